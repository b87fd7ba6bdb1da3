//! Reading a resource of this group from JSON with an error that names the field
//! (`spec.pod.volumes[0].secret: invalid type: ...`), for the controllers (an object they
//! cannot read) and the resource webhook (an object it refuses) alike.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ServiceSpec;
use super::clair::ServiceOverrides;

/// `value` as `K` (of kind `kind`), or the field that stops it and why.
pub fn named<K: DeserializeOwned>(kind: &str, value: Value) -> Result<K, String> {
    serde_path_to_error::deserialize(value.clone()).map_err(|e| {
        let path = e.path().to_string();
        refine(kind, &path, &value).unwrap_or_else(|| format!("{path}: {}", e.inner()))
    })
}

/// serde loses the path inside a flattened struct (a service's spec, a Clair's notifier):
/// that part decoded as its own type names the field.
fn refine(kind: &str, path: &str, value: &Value) -> Option<String> {
    fn locate<T: DeserializeOwned>(value: &Value) -> Option<String> {
        serde_path_to_error::deserialize::<_, T>(value.clone())
            .err()
            .map(|e| format!("{}: {}", e.path(), e.inner()))
    }
    let inner = match (kind, path) {
        ("Indexer" | "Matcher" | "Notifier", "spec") => locate::<ServiceSpec>(&value["spec"]),
        ("Clair", "spec.notifier") => locate::<ServiceOverrides>(&value["spec"]["notifier"]),
        _ => None,
    }?;
    Some(format!("{path}.{inner}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Clair, Indexer};
    use serde_json::json;

    #[test]
    fn a_field_inside_a_flattened_part_is_named() {
        let indexer = json!({
            "apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Indexer",
            "metadata": {"name": "i"},
            "spec": {"config": {"root": {"configMap": {"name": "c", "key": "k"}}}, "replicas": "two"},
        });
        let error = named::<Indexer>("Indexer", indexer).unwrap_err();
        assert!(error.starts_with("spec.replicas: invalid type"), "{error}");
        let clair = json!({
            "apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Clair",
            "metadata": {"name": "c"},
            "spec": {"database": {"managed": {}}, "notifier": {"replicas": "many"}},
        });
        let error = named::<Clair>("Clair", clair).unwrap_err();
        assert!(
            error.starts_with("spec.notifier.replicas: invalid type"),
            "{error}"
        );
    }
}
