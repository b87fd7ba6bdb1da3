//! What marks an object as the operator's: the labels every owned object carries (and the
//! selector of a service's pods), and the field manager of every write the operator makes.
//! One place, imported by the controllers and the webhook alike.

use std::collections::BTreeMap;

/// The one field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "clair-operator";

pub const NAME: &str = "app.kubernetes.io/name";
pub const INSTANCE: &str = "app.kubernetes.io/instance";
pub const COMPONENT: &str = "app.kubernetes.io/component";
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const PART_OF: &str = "app.kubernetes.io/part-of";

/// The value of `app.kubernetes.io/managed-by` on everything the operator owns; the
/// controllers' caches select on it.
pub const OPERATOR: &str = "clair-operator";

/// `app.kubernetes.io/managed-by=clair-operator`, for watches and list calls.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY}={OPERATOR}")
}

/// Every object the operator made for the resource `instance` carries these labels: the
/// one query per kind that finds what a resource owns (its owner UID then tells it apart
/// from a namesake's).
pub fn owned_selector(instance: &str) -> String {
    format!("{INSTANCE}={instance},{MANAGED_BY}={OPERATOR}")
}

/// Labels that identify the pods of one service resource; never change them on a running
/// Deployment (its selector is immutable).
pub fn selector(instance: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME.to_string(), "clair".to_string()),
        (INSTANCE.to_string(), instance.to_string()),
        (COMPONENT.to_string(), component.to_string()),
    ])
}

/// Every label of an owned object.
pub fn all(instance: &str, component: &str) -> BTreeMap<String, String> {
    let mut labels = selector(instance, component);
    labels.insert(MANAGED_BY.to_string(), OPERATOR.to_string());
    labels.insert(PART_OF.to_string(), "clair".to_string());
    labels
}

/// A selector as the scale subresource and `kubectl get -l` read it.
pub fn to_selector_string(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `selector` selects an object labelled `labels`, as the apiserver matches them:
/// every `matchLabels` entry, and every expression (`In`, `NotIn`, `Exists`,
/// `DoesNotExist`; an unknown operator selects nothing).
pub fn selects(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: &BTreeMap<String, String>,
) -> bool {
    let matched = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    matched
        && selector.match_expressions.iter().flatten().all(|e| {
            let value = labels.get(&e.key);
            let listed = || value.is_some_and(|v| e.values.iter().flatten().any(|x| x == v));
            match e.operator.as_str() {
                "In" => listed(),
                "NotIn" => !listed(),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

#[cfg(test)]
mod selects_tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    #[test]
    fn a_selector_matches_as_the_apiserver_does() {
        let labels = BTreeMap::from([
            ("a".to_string(), "1".to_string()),
            ("b".to_string(), "2".to_string()),
        ]);
        let expression = |key: &str, operator: &str, values: &[&str]| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.to_string(),
                operator: operator.to_string(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        };
        assert!(selects(&LabelSelector::default(), &labels));
        assert!(selects(&expression("a", "In", &["1", "3"]), &labels));
        assert!(!selects(&expression("a", "In", &["3"]), &labels));
        assert!(selects(&expression("a", "NotIn", &["3"]), &labels));
        assert!(selects(&expression("c", "NotIn", &["3"]), &labels));
        assert!(selects(&expression("b", "Exists", &[]), &labels));
        assert!(!selects(&expression("b", "DoesNotExist", &[]), &labels));
        assert!(!selects(&expression("a", "Gt", &["0"]), &labels));
        let matching = LabelSelector {
            match_labels: Some(BTreeMap::from([("a".to_string(), "2".to_string())])),
            ..Default::default()
        };
        assert!(!selects(&matching, &labels));
    }
}
