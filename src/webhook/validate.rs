//! Config validation for admission: the verdict on a ConfigMap or Secret labelled
//! `clair.projectquay.io/validate-config`. Pure: an object in, a verdict out.

use std::collections::BTreeSet;

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::api::ServiceKind;
use crate::api::keys::CONFIG;
use crate::clairconfig::{self, Document};
use crate::sources::value_of;

/// What admission answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// `None`: allowed. `Some(message)`: denied, saying why and what to do.
    pub denied: Option<String>,
    pub warnings: Vec<String>,
}

impl Verdict {
    fn deny(message: impl Into<String>) -> Self {
        Self {
            denied: Some(message.into()),
            warnings: Vec::new(),
        }
    }
}

/// Validates the config of a labelled object in each service mode. What is wrong in every
/// mode is refused; what is wrong only in some modes (a matcher config lacks nothing an
/// indexer needs) comes back as warnings, since one object may serve some services only.
pub fn config_object(object: &DynamicObject, kind: &str) -> Verdict {
    let name = object.name_any();
    let Some(key) = object.annotations().get(CONFIG).cloned() else {
        return Verdict::deny(format!(
            "{kind} {name} is labelled for config validation but has no {CONFIG} annotation: set it to the key that holds the Clair config"
        ));
    };
    if clairconfig::root_format(&key).is_none() {
        return Verdict::deny(format!(
            "{CONFIG}: {key:?} must end in .yaml or .json, the only config names Clair reads"
        ));
    }
    let Some(text) = value_of(object, kind, &key) else {
        return Verdict::deny(format!(
            "{kind} {name} has no key {key:?} (named by {CONFIG})"
        ));
    };
    let document = Document {
        name: format!("{kind} {name} key {key}"),
        key,
        text,
        secret: kind == "Secret",
    };
    let modes = [
        ServiceKind::Indexer,
        ServiceKind::Matcher,
        ServiceKind::Notifier,
    ];
    let checks: Vec<(ServiceKind, clairconfig::Checked)> = modes
        .iter()
        .map(|mode| (*mode, clairconfig::check(&document, &[], *mode)))
        .collect();
    let errors: Vec<BTreeSet<String>> = checks
        .iter()
        .map(|(_, c)| c.errors().into_iter().collect())
        .collect();
    let everywhere: Vec<String> = errors[0]
        .iter()
        .filter(|e| errors.iter().all(|set| set.contains(*e)))
        .cloned()
        .collect();
    let mut warnings: BTreeSet<String> = BTreeSet::new();
    for (mode, checked) in &checks {
        for problem in &checked.problems {
            let text = problem.to_string();
            if problem.warning {
                warnings.insert(text);
            } else if !everywhere.contains(&text) {
                warnings.insert(format!("invalid in {} mode: {text}", mode.as_str()));
            }
        }
    }
    Verdict {
        denied: (!everywhere.is_empty()).then(|| {
            format!(
                "invalid Clair config in {}: {}",
                document.name,
                everywhere.join("; ")
            )
        }),
        warnings: warnings.into_iter().collect(),
    }
}

/// The kind of an admission request's object.
pub fn kind_of(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(kind: &str, annotations: Value, data: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": kind,
            "metadata": {"name": "c", "annotations": annotations},
            "data": data
        }))
        .expect("object")
    }

    #[test]
    fn what_fails_everywhere_is_denied_with_the_field() {
        let o = object(
            "ConfigMap",
            json!({CONFIG: "config.yaml"}),
            json!({"config.yaml": "indexer:\n  migrations: maybe\n"}),
        );
        let v = config_object(&o, "ConfigMap");
        let denied = v.denied.expect("denied");
        assert!(
            denied.contains("indexer.migrations: must be true or false"),
            "{denied}"
        );
    }

    #[test]
    fn what_fails_in_some_modes_is_a_warning() {
        let o = object(
            "ConfigMap",
            json!({CONFIG: "config.yaml"}),
            json!({"config.yaml": "indexer:\n  connstring: host=db\n"}),
        );
        let v = config_object(&o, "ConfigMap");
        assert_eq!(v.denied, None);
        assert!(
            v.warnings
                .iter()
                .any(|w| w.starts_with("invalid in matcher mode: matcher.indexer_addr")),
            "{:?}",
            v.warnings
        );
    }

    #[test]
    fn secrets_are_decoded_and_missing_pieces_named() {
        let encoded = "aW5kZXhyOiB7fQo="; // "indexr: {}\n"
        let o = object(
            "Secret",
            json!({CONFIG: "config.yaml"}),
            json!({"config.yaml": encoded}),
        );
        assert!(
            config_object(&o, "Secret")
                .denied
                .expect("denied")
                .contains("indexr: unknown key")
        );
        let o = object("Secret", json!({}), json!({}));
        assert!(
            config_object(&o, "Secret")
                .denied
                .expect("denied")
                .contains("no clair.projectquay.io/config annotation")
        );
        let o = object(
            "ConfigMap",
            json!({CONFIG: "other.yaml"}),
            json!({"config.yaml": ""}),
        );
        assert!(
            config_object(&o, "ConfigMap")
                .denied
                .expect("denied")
                .contains("no key \"other.yaml\"")
        );
        let o = object("ConfigMap", json!({CONFIG: "config.yml"}), json!({}));
        assert!(
            config_object(&o, "ConfigMap")
                .denied
                .expect("denied")
                .contains("must end in .yaml or .json")
        );
    }
}
