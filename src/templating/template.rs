//! Config templating: `secret://NAME/KEY` and `configmap://NAME/KEY` references in a config
//! are replaced by the values they name. Pure: finding references and rendering take
//! values; fetching them and checking who may read them is the webhook's job.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::clairconfig::{self, Document, Format, limits};

/// The kind of object a reference names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKind {
    Secret,
    ConfigMap,
}

impl SourceKind {
    /// The resource name, for access reviews.
    pub fn resource(self) -> &'static str {
        match self {
            SourceKind::Secret => "secrets",
            SourceKind::ConfigMap => "configmaps",
        }
    }
}

/// `secret://NAME/KEY` or `configmap://NAME/KEY`, in the object's own namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Reference {
    pub kind: SourceKind,
    pub name: String,
    pub key: String,
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = match self.kind {
            SourceKind::Secret => "secret",
            SourceKind::ConfigMap => "configmap",
        };
        write!(f, "{scheme}://{}/{}", self.name, self.key)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(String),
    #[error(
        "{reference} is malformed: use secret://NAME/KEY or configmap://NAME/KEY, in this namespace"
    )]
    Malformed { reference: String },
    #[error("cannot write the rendered config: {0}")]
    Encode(String),
    #[error("{0}")]
    TooLarge(String),
}

/// The most distinct references one template may hold: each is a read (and an access
/// check) by the operator.
pub const MAX_REFERENCES: usize = 50;

fn is_name_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

/// The references in one string, with their byte ranges.
fn scan(text: &str) -> Result<Vec<(std::ops::Range<usize>, Reference)>, Error> {
    let mut found = Vec::new();
    for (scheme, kind) in [
        ("secret://", SourceKind::Secret),
        ("configmap://", SourceKind::ConfigMap),
    ] {
        let mut from = 0;
        while let Some(offset) = text[from..].find(scheme) {
            let start = from + offset;
            let body_start = start + scheme.len();
            let body: String = text[body_start..]
                .chars()
                .take_while(|c| is_name_char(*c) || is_key_char(*c) || *c == '/')
                .collect();
            let end = body_start + body.len();
            let malformed = || Error::Malformed {
                reference: text[start..end].to_string(),
            };
            let (name, key) = body.split_once('/').ok_or_else(malformed)?;
            if name.is_empty()
                || key.is_empty()
                || !name.chars().all(is_name_char)
                || key.contains('/')
            {
                return Err(malformed());
            }
            found.push((
                start..end,
                Reference {
                    kind,
                    name: name.to_string(),
                    key: key.to_string(),
                },
            ));
            from = end;
        }
    }
    found.sort_by_key(|(range, _)| range.start);
    // One reference inside another's key (`secret://a/bconfigmap://c/d`) is not two.
    if let Some(pair) = found.windows(2).find(|w| w[1].0.start < w[0].0.end) {
        return Err(Error::Malformed {
            reference: text[pair[0].0.start..pair[1].0.end].to_string(),
        });
    }
    Ok(found)
}

fn walk_strings(
    value: &Value,
    visit: &mut impl FnMut(&str) -> Result<(), Error>,
) -> Result<(), Error> {
    match value {
        Value::String(s) => visit(s),
        Value::Array(items) => items.iter().try_for_each(|v| walk_strings(v, visit)),
        Value::Object(map) => map.values().try_for_each(|v| walk_strings(v, visit)),
        _ => Ok(()),
    }
}

/// The format of a template key: `.yaml` or `.json`, optionally followed by `.in`
/// (`config.yaml.in`, as in the design discussion).
pub fn format_of(key: &str) -> Result<Format, Error> {
    clairconfig::root_format(key.strip_suffix(".in").unwrap_or(key)).ok_or_else(|| {
        Error::Config(format!(
            "the key {key:?} must end in .yaml or .json (a template input may add .in)"
        ))
    })
}

/// Parses the template (YAML or JSON, by the input key) as Clair would read it.
pub fn parse(key: &str, text: &str) -> Result<(Value, Format), Error> {
    let format = format_of(key)?;
    let document = Document {
        name: format!("key {key}"),
        key: key.to_string(),
        text: text.to_string(),
        secret: false,
    };
    let value = clairconfig::parse(&document, format).map_err(|e| Error::Config(e.to_string()))?;
    Ok((value, format))
}

/// Every reference in the parsed template, each once.
pub fn references(template: &Value) -> Result<Vec<Reference>, Error> {
    let mut all = Vec::new();
    walk_strings(template, &mut |s| {
        all.extend(scan(s)?.into_iter().map(|(_, r)| r));
        Ok(())
    })?;
    all.sort();
    all.dedup();
    if all.len() > MAX_REFERENCES {
        return Err(Error::TooLarge(format!(
            "the template names {} different objects' keys; at most {MAX_REFERENCES}",
            all.len()
        )));
    }
    Ok(all)
}

/// The refusal of an output over [`limits::MAX_DOCUMENT_BYTES`].
pub fn too_large() -> Error {
    Error::TooLarge(format!(
        "the rendered config would exceed {} bytes (1 MiB), the most a config may hold",
        limits::MAX_DOCUMENT_BYTES
    ))
}

/// Replaces the references in `value`'s strings, spending the text written from `left`: a
/// value used ten thousand times stops at the limit instead of filling memory.
fn substitute(
    value: &mut Value,
    values: &BTreeMap<Reference, String>,
    left: &mut usize,
) -> Result<(), Error> {
    let spend = |text: &str, left: &mut usize| -> Result<(), Error> {
        *left = left.checked_sub(text.len()).ok_or_else(too_large)?;
        Ok(())
    };
    match value {
        Value::String(s) => {
            let mut out = String::with_capacity(s.len());
            let mut last = 0;
            for (range, reference) in scan(s)? {
                let literal = &s[last..range.start];
                let substituted = values
                    .get(&reference)
                    .map(String::as_str)
                    .unwrap_or_default();
                spend(literal, left)?;
                spend(substituted, left)?;
                out.push_str(literal);
                out.push_str(substituted);
                last = range.end;
            }
            spend(&s[last..], left)?;
            out.push_str(&s[last..]);
            *s = out;
            Ok(())
        }
        Value::Array(items) => items
            .iter_mut()
            .try_for_each(|v| substitute(v, values, left)),
        Value::Object(map) => map
            .values_mut()
            .try_for_each(|v| substitute(v, values, left)),
        _ => Ok(()),
    }
}

/// The template with every reference replaced by its value, written in the template's
/// format. Values replace the reference inside the string that holds it, so a value with
/// YAML's special characters cannot change the document's structure.
pub fn render(
    template: &Value,
    format: Format,
    values: &BTreeMap<Reference, String>,
) -> Result<String, Error> {
    let mut rendered = template.clone();
    let mut left = limits::MAX_DOCUMENT_BYTES;
    substitute(&mut rendered, values, &mut left)?;
    match format {
        Format::Json => {
            serde_json::to_string_pretty(&rendered).map_err(|e| Error::Encode(e.to_string()))
        }
        Format::Yaml => {
            serde_saphyr::to_string(&rendered).map_err(|e| Error::Encode(e.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_inside_another_is_malformed() {
        // Found by the fuzzer: overlapping references made the substitution slice backwards.
        let text = "secret://databasbase/Dconfigmap://addresses/inn~exer";
        assert!(
            matches!(scan(text), Err(Error::Malformed { .. })),
            "{:?}",
            scan(text)
        );
    }

    fn reference(kind: SourceKind, name: &str, key: &str) -> Reference {
        Reference {
            kind,
            name: name.into(),
            key: key.into(),
        }
    }

    #[test]
    fn references_are_found_and_values_substituted_in_place() {
        let (template, format) = parse(
            "config.yaml.in",
            "matcher:\n  connstring: secret://database/DSN\n  indexer_addr: http://configmap://addrs/indexer:6060\nlog_level: info\n",
        )
        .unwrap();
        let refs = references(&template).unwrap();
        assert_eq!(
            refs,
            vec![
                reference(SourceKind::Secret, "database", "DSN"),
                reference(SourceKind::ConfigMap, "addrs", "indexer")
            ]
        );
        let values = BTreeMap::from([
            (
                refs[0].clone(),
                "host=db user=x password='a: b # c'".to_string(),
            ),
            (refs[1].clone(), "indexer".to_string()),
        ]);
        let out = render(&template, format, &values).unwrap();
        let back: Value = serde_saphyr::from_str(&out).unwrap();
        assert_eq!(
            back["matcher"]["connstring"],
            "host=db user=x password='a: b # c'"
        );
        assert_eq!(back["matcher"]["indexer_addr"], "http://indexer:6060");
        assert_eq!(back["log_level"], "info");
    }

    #[test]
    fn malformed_references_are_named() {
        let (template, _) = parse("in.yaml", "a: secret://database\n").unwrap();
        assert_eq!(
            references(&template),
            Err(Error::Malformed {
                reference: "secret://database".into()
            })
        );
        let (template, _) = parse("in.yaml", "a: configmap://UPPER/key\n").unwrap();
        assert!(references(&template).is_err());
        assert!(parse("in.txt", "a: 1").is_err());
    }

    #[test]
    fn a_value_repeated_ten_thousand_times_stops_at_the_limit() {
        let text = format!(
            "a: [{}]\n",
            vec!["configmap://big/value"; 10_000].join(", ")
        );
        let (template, format) = parse("in.yaml", &text).unwrap();
        let refs = references(&template).unwrap();
        let values = BTreeMap::from([(refs[0].clone(), "x".repeat(100 * 1024))]);
        let error = render(&template, format, &values).expect_err("refused");
        assert!(matches!(error, Error::TooLarge(_)), "{error}");
        let many: Vec<String> = (0..=MAX_REFERENCES)
            .map(|i| format!("configmap://c{i}/k"))
            .collect();
        let (template, _) = parse("in.yaml", &format!("a: [{}]\n", many.join(", "))).unwrap();
        assert!(matches!(references(&template), Err(Error::TooLarge(_))));
    }
}
