//! The size bounds of the CRDs' schemas (`maxItems`, `maxLength`, `maxProperties`) held
//! against an object as JSON. The apiserver holds every object to them before it calls a
//! webhook, so a review over one did not come from it: the resource webhook refuses such a
//! review before it makes any access review for what the object names.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

/// The schema of each kind the operator serves, from its CRD (the stored version's).
fn schemas() -> &'static HashMap<String, Value> {
    use kube::CustomResourceExt;
    static SCHEMAS: OnceLock<HashMap<String, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        [
            super::Clair::crd(),
            super::Indexer::crd(),
            super::Matcher::crd(),
            super::Notifier::crd(),
        ]
        .into_iter()
        .filter_map(|crd| {
            let kind = crd.spec.names.kind.clone();
            let version = crd.spec.versions.into_iter().find(|v| v.storage)?;
            let schema = version.schema?.open_api_v3_schema?;
            Some((kind, serde_json::to_value(schema).ok()?))
        })
        .collect()
    })
}

/// The first place where `object`, a `kind` of the operator's, passes its CRD's bounds:
/// the field's path and the bound, as a refusal names them.
pub fn exceeded(kind: &str, object: &Value) -> Option<String> {
    let schema = schemas().get(kind)?;
    walk(schema, object, &mut String::new())
}

fn walk(schema: &Value, value: &Value, path: &mut String) -> Option<String> {
    let bound = |name: &str| schema.get(name).and_then(Value::as_u64);
    let over = |field: &str, length: usize, what: &str, name: &str| {
        bound(name)
            .filter(|&max| length as u64 > max)
            .map(|max| format!("{field}: {length} {what}, over the CRD's {name} of {max}"))
    };
    let field = if path.is_empty() { "." } else { path.as_str() };
    match value {
        Value::String(text) => over(field, text.chars().count(), "characters", "maxLength"),
        Value::Array(items) => {
            if let Some(refusal) = over(field, items.len(), "items", "maxItems") {
                return Some(refusal);
            }
            let item = schema.get("items")?;
            items.iter().enumerate().find_map(|(i, value)| {
                let length = path.len();
                path.push_str(&format!("[{i}]"));
                let found = walk(item, value, path);
                path.truncate(length);
                found
            })
        }
        Value::Object(fields) => {
            if let Some(refusal) = over(field, fields.len(), "fields", "maxProperties") {
                return Some(refusal);
            }
            let properties = schema.get("properties");
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            fields.iter().find_map(|(name, value)| {
                let sub = properties.and_then(|p| p.get(name)).or(additional)?;
                let length = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
                let found = walk(sub, value, path);
                path.truncate(length);
                found
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn indexer(spec: Value) -> Value {
        json!({"apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Indexer",
               "metadata": {"name": "i"}, "spec": spec})
    }

    #[test]
    fn an_object_within_the_crds_bounds_passes() {
        let env: Vec<Value> = (0..8)
            .map(|i| json!({"name": format!("E{i}"), "value": "x"}))
            .collect();
        let object = indexer(json!({
            "config": {"root": {"configMap": {"name": "cfg", "key": "config.yaml"}},
                       "dropins": [{"secret": {"name": "d", "key": "k"}}]},
            "pod": {"env": env}}));
        assert_eq!(exceeded("Indexer", &object), None);
        assert_eq!(exceeded("NotOurs", &object), None, "no schema, no bounds");
    }

    #[test]
    fn every_kind_of_bound_names_the_field_and_the_bound() {
        let dropins: Vec<Value> = (0..17)
            .map(|i| json!({"secret": {"name": format!("s{i}"), "key": "k"}}))
            .collect();
        let object = indexer(json!({
            "config": {"root": {"configMap": {"name": "cfg", "key": "config.yaml"}},
                       "dropins": dropins}}));
        assert_eq!(
            exceeded("Indexer", &object).as_deref(),
            Some("spec.config.dropins: 17 items, over the CRD's maxItems of 16")
        );
        // A string, found under an array's item.
        let object = indexer(json!({
            "config": {"root": {"configMap": {"name": "cfg", "key": "config.yaml"}},
                       "dropins": [{"secret": {"name": "x".repeat(300), "key": "k"}}]}}));
        let refusal = exceeded("Indexer", &object).expect("a name over its bound");
        assert!(
            refusal.starts_with(
                "spec.config.dropins[0].secret.name: 300 characters, over the CRD's maxLength of"
            ),
            "{refusal}"
        );
    }
}
