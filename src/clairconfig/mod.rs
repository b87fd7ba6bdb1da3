//! Clair's config: a root document plus drop-ins, parsed and merged as Clair does it
//! (`cmd/config.go`), validated for a mode, and hashed. Pure: the controller reads the
//! documents, this module judges them.

pub mod files;
pub mod limits;
pub mod report;
mod validate;

use serde_json::Value;
use sha2::{Digest, Sha256};

pub(crate) use validate::parse_go_duration;
pub use validate::{Problem, notifier_intervals, validate};

use crate::api::ServiceKind;

/// Why a config cannot be used. Each message names the document and, where known, the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{name}: {message}")]
    Parse { name: String, message: String },
    #[error("{name}: a drop-in JSON Patch failed: {message}")]
    Patch { name: String, message: String },
    #[error("{0}")]
    Invalid(String),
    /// A document, or the config merged from it, passes a limit (see [`limits`]).
    #[error("{name}: {message}")]
    TooLarge { name: String, message: String },
}

impl Error {
    /// The condition reason and metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Parse { .. } => "ConfigUnparsable",
            Error::Patch { .. } => "DropinFailed",
            Error::Invalid(_) => "ConfigInvalid",
            Error::TooLarge { .. } => "ConfigTooLarge",
        }
    }
}

/// How Clair reads a document, from its key's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

/// One document: a key of a ConfigMap or Secret, with its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    /// For messages and for the format: `ConfigMap clair-config key config.yaml`.
    pub name: String,
    pub key: String,
    pub text: String,
    /// Read from a Secret: messages about a config it is part of quote none of its values
    /// (see [`redact`]), since they end in conditions and Events anyone who reads the
    /// resource sees.
    pub secret: bool,
}

/// The format of a root key (`.yaml` or `.json`; Clair refuses anything else).
pub fn root_format(key: &str) -> Option<Format> {
    if key.ends_with(".yaml") {
        Some(Format::Yaml)
    } else if key.ends_with(".json") {
        Some(Format::Json)
    } else {
        None
    }
}

/// Parses one document as YAML or JSON, as Clair does: only the first YAML document counts,
/// and a top level that is not a mapping reads as `{}`.
pub fn parse(document: &Document, format: Format) -> Result<Value, Error> {
    limits::text(document)?;
    let parse_error = |message: String| Error::Parse {
        name: document.name.clone(),
        message,
    };
    let value: Value = match format {
        Format::Json => {
            if !document.text.starts_with('{') {
                return Err(parse_error("a JSON config must begin with '{'".into()));
            }
            serde_json::from_str(&document.text).map_err(|e| parse_error(e.to_string()))?
        }
        Format::Yaml => {
            if document.text.trim().is_empty() {
                Value::Object(Default::default())
            } else {
                from_yaml(&document.text).map_err(|e| parse_error(e.to_string()))?
            }
        }
    };
    limits::value(&document.name, &value)?;
    Ok(match value {
        Value::Object(_) => value,
        _ => Value::Object(Default::default()),
    })
}

/// What a drop-in key means next to a root of `root` format, by Clair's rules: the same
/// extension is a JSON Merge Patch, the extension plus `-patch` a JSON Patch, anything else
/// is ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropinKind {
    MergePatch,
    JsonPatch,
    Ignored,
}

pub fn dropin_kind(root: Format, key: &str) -> DropinKind {
    let ext = match root {
        Format::Yaml => ".yaml",
        Format::Json => ".json",
    };
    if key.ends_with(ext) {
        DropinKind::MergePatch
    } else if key.ends_with(&format!("{ext}-patch")) {
        DropinKind::JsonPatch
    } else {
        DropinKind::Ignored
    }
}

/// The merged config and what was ignored on the way.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    pub config: Value,
    /// Drop-ins Clair would ignore (wrong extension for the root), by name.
    pub ignored: Vec<String>,
}

/// Merges `dropins` over `root` in order, as Clair merges `config.yaml.d/`. Every document
/// and every step of the merge is held to [`limits`]: a drop-in that would make the config
/// grow without bound stops at the first step past the limit.
pub fn merge(root: &Document, dropins: &[Document]) -> Result<Merged, Error> {
    let format = root_format(&root.key).ok_or_else(|| Error::Parse {
        name: root.name.clone(),
        message: "the root config key must end in .yaml or .json".into(),
    })?;
    let mut config = parse(root, format)?;
    let mut ignored = Vec::new();
    for dropin in dropins {
        match dropin_kind(format, &dropin.key) {
            DropinKind::MergePatch => {
                let patch = parse(dropin, format)?;
                json_patch::merge(&mut config, &patch);
                limits::value(&dropin.name, &config)?;
            }
            DropinKind::JsonPatch => {
                limits::text(dropin)?;
                let value: Value = match format {
                    Format::Json => {
                        serde_json::from_str(&dropin.text).map_err(|e| Error::Parse {
                            name: dropin.name.clone(),
                            message: e.to_string(),
                        })?
                    }
                    Format::Yaml => from_yaml(&dropin.text).map_err(|e| Error::Parse {
                        name: dropin.name.clone(),
                        message: e.to_string(),
                    })?,
                };
                let patch: json_patch::Patch =
                    serde_json::from_value(value).map_err(|e| Error::Parse {
                        name: dropin.name.clone(),
                        message: format!("not a JSON Patch (a list of operations): {e}"),
                    })?;
                limits::operations(&dropin.name, patch.0.len())?;
                // One operation at a time, each held to the size limit before it runs: a
                // `copy` can double the document, so checking only at the end would come
                // too late.
                let mut budget = limits::PatchBudget::new(&dropin.name, &config)?;
                for operation in &patch.0 {
                    budget.spend(&dropin.name, &config, operation)?;
                    json_patch::patch(&mut config, std::slice::from_ref(operation)).map_err(
                        |e| Error::Patch {
                            name: dropin.name.clone(),
                            message: e.to_string(),
                        },
                    )?;
                }
            }
            DropinKind::Ignored => ignored.push(dropin.name.clone()),
        }
    }
    Ok(Merged { config, ignored })
}

/// YAML as Go's yaml.v3 reads it for Clair: YAML 1.2 booleans only (`yes`, `on`, `n` stay
/// strings, so a bool field refuses them as Clair does).
fn from_yaml(text: &str) -> Result<Value, serde_saphyr::Error> {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options.budget = Some(limits::yaml_budget());
    serde_saphyr::from_str_with_options(text, options)
}

/// A config judged for one mode.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    /// The merged config, when the documents parse and merge.
    pub config: Option<Value>,
    /// A merge failure is one error; otherwise the validator's findings, with the drop-ins
    /// Clair would ignore as warnings.
    pub problems: Vec<Problem>,
}

impl Checked {
    /// The errors, each `path: message`.
    pub fn errors(&self) -> Vec<String> {
        self.problems
            .iter()
            .filter(|p| !p.warning)
            .map(|p| p.to_string())
            .collect()
    }
}

/// Merges and validates, as Clair does at start-up in `mode`. When any document comes from
/// a Secret, every message is [`redact`]ed.
pub fn check(root: &Document, dropins: &[Document], mode: ServiceKind) -> Checked {
    let mut checked = check_documents(root, dropins, mode);
    if root.secret || dropins.iter().any(|d| d.secret) {
        for problem in &mut checked.problems {
            problem.message = redact(&problem.message);
        }
    }
    checked
}

/// A message with every quoted value (`"..."`, as the validator and the parsers quote them)
/// replaced by `"…"`, and anything after its first line (a parser's source snippet) dropped.
pub fn redact(message: &str) -> String {
    let first_line = message.lines().next().unwrap_or_default();
    let mut out = String::with_capacity(first_line.len());
    let mut chars = first_line.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            out.push(c);
            continue;
        }
        // Skip to the closing quote, honouring backslash escapes.
        while let Some(inner) = chars.next() {
            match inner {
                '\\' => {
                    chars.next();
                }
                '"' => break,
                _ => {}
            }
        }
        out.push_str("\"…\"");
    }
    out
}

fn check_documents(root: &Document, dropins: &[Document], mode: ServiceKind) -> Checked {
    match merge(root, dropins) {
        Err(e) => Checked {
            config: None,
            problems: vec![Problem {
                path: String::new(),
                message: e.to_string(),
                warning: false,
            }],
        },
        Ok(merged) => {
            let mut problems = validate(&merged.config, mode);
            problems.extend(merged.ignored.into_iter().map(|name| Problem {
                path: String::new(),
                message: format!(
                    "{name}: ignored: a drop-in must have the root's extension, or it plus -patch"
                ),
                warning: true,
            }));
            Checked {
                config: Some(merged.config),
                problems,
            }
        }
    }
}

/// A short, stable hash of a JSON value (a merged config, an object the operator applies):
/// serde_json writes object keys in sorted order, so equal values hash equal however they
/// were written.
pub fn hash(config: &Value) -> String {
    hex::encode(&Sha256::digest(config.to_string().as_bytes())[..8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_about_a_secret_sourced_config_quote_no_value() {
        assert_eq!(
            redact(r#"log_level: unknown level "hunter\"2": use one of debug, info"#),
            r#"log_level: unknown level "…": use one of debug, info"#
        );
        assert_eq!(redact("bad\n  3 | password: hunter2\n    ^"), "bad");
        let mut secret = doc(
            "config.yaml",
            "log_level: hunter2\nnotifier:\n  poll_interval: sekrit9\n",
        );
        secret.secret = true;
        let checked = check(&secret, &[], ServiceKind::Notifier);
        let errors = checked.errors().join("; ");
        assert!(!errors.is_empty());
        assert!(
            !errors.contains("hunter2") && !errors.contains("sekrit9"),
            "{errors}"
        );
        secret.secret = false;
        let plain = check(&secret, &[], ServiceKind::Notifier)
            .errors()
            .join("; ");
        assert!(
            plain.contains("hunter2"),
            "a ConfigMap's values may be quoted: {plain}"
        );
    }

    fn doc(key: &str, text: &str) -> Document {
        Document {
            name: format!("ConfigMap c key {key}"),
            key: key.into(),
            text: text.into(),
            secret: false,
        }
    }

    #[test]
    fn merge_patches_objects_replaces_arrays_and_deletes_nulls() {
        let root = doc(
            "config.yaml",
            "log_level: info\nindexer:\n  connstring: a\n  scanlock_retry: 5\nmatchers:\n  names: [a, b]\n",
        );
        let dropin = doc(
            "10-x.yaml",
            "indexer:\n  scanlock_retry: null\n  migrations: true\nmatchers:\n  names: [c]\n",
        );
        let merged = merge(&root, &[dropin]).expect("merges");
        assert_eq!(
            merged.config,
            json!({"log_level": "info", "indexer": {"connstring": "a", "migrations": true}, "matchers": {"names": ["c"]}})
        );
    }

    #[test]
    fn json_patch_dropins_apply_in_order_and_a_failed_test_is_an_error() {
        let root = doc("config.yaml", "log_level: info\n");
        let set = doc(
            "20-level.yaml-patch",
            "- {op: replace, path: /log_level, value: debug}\n",
        );
        let merged = merge(&root, std::slice::from_ref(&set)).expect("patches");
        assert_eq!(merged.config, json!({"log_level": "debug"}));
        let failing = doc(
            "30-test.yaml-patch",
            "- {op: test, path: /log_level, value: info}\n",
        );
        let err = merge(&root, &[set, failing]).expect_err("test op fails after the replace");
        assert!(matches!(err, Error::Patch { .. }), "{err}");
    }

    #[test]
    fn dropins_of_the_other_format_are_ignored_as_clair_ignores_them() {
        let root = doc("config.yaml", "log_level: info\n");
        let merged = merge(&root, &[doc("x.json", "{\"log_level\": \"debug\"}")]).expect("ok");
        assert_eq!(merged.config, json!({"log_level": "info"}));
        assert_eq!(merged.ignored, vec!["ConfigMap c key x.json".to_string()]);
    }

    #[test]
    fn json_roots_must_start_with_a_brace_and_yaml_scalars_read_as_empty() {
        assert!(parse(&doc("c.json", "\n{}"), Format::Json).is_err());
        assert_eq!(
            parse(&doc("c.yaml", "just a string"), Format::Yaml).unwrap(),
            json!({})
        );
        let err = parse(&doc("c.yaml", "a: [1,\n"), Format::Yaml).expect_err("broken YAML");
        assert!(
            err.to_string().starts_with("ConfigMap c key c.yaml: "),
            "{err}"
        );
    }

    #[test]
    fn the_hash_ignores_key_order_and_changes_with_content() {
        let a = parse(&doc("a.yaml", "x: 1\ny: 2\n"), Format::Yaml).unwrap();
        let b = parse(&doc("b.json", "{\"y\": 2, \"x\": 1}"), Format::Json).unwrap();
        assert_eq!(hash(&a), hash(&b));
        assert_ne!(hash(&a), hash(&json!({"x": 1, "y": 3})));
        assert_eq!(hash(&a).len(), 16);
    }
}
