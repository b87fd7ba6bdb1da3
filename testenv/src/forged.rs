//! Admission reviews as an attacker writes them by hand (docs/security.md, "Forged admission
//! reviews"): a user and a namespace of the sender's choosing, for objects that name what the
//! sender wants read. The tests send them to the webhook without going through the apiserver
//! and look for any of what they name in the answer.

use serde_json::{Value, json};

/// The user a forged review claims to be: a cluster administrator.
const CLAIMED_GROUPS: [&str; 2] = ["system:masters", "system:authenticated"];

fn review(kind: (&str, &str, &str), resource: &str, namespace: &str, object: Value) -> String {
    let (group, version, kind) = kind;
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": object["metadata"]["name"],
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:admin", "groups": CLAIMED_GROUPS},
            "object": object,
            "oldObject": null,
            "dryRun": true,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    })
    .to_string()
}

/// A templated Secret in `namespace` whose output would hold `secret://SECRET/KEY`.
pub fn template_review(namespace: &str, secret: &str, key: &str) -> String {
    let object = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "forged-template",
            "namespace": namespace,
            "labels": {"clair.projectquay.io/template-config": "true"},
            "annotations": {
                "clair.projectquay.io/template-input": "config.yaml.in",
                "clair.projectquay.io/template-output": "config.yaml",
            },
        },
        "data": {"config.yaml.in": base64_of(&format!("v: secret://{secret}/{key}\n"))},
    });
    review(("", "v1", "Secret"), "secrets", namespace, object)
}

/// An Indexer in `namespace` whose root config is ConfigMap `config_map`'s `config.yaml`:
/// the resource webhook, if it read it, would say whether it exists and what is wrong in it.
pub fn resource_review(namespace: &str, config_map: &str) -> String {
    let object = json!({
        "apiVersion": "clair.projectquay.io/v1alpha1",
        "kind": "Indexer",
        "metadata": {"name": "forged-indexer", "namespace": namespace},
        "spec": {"config": {"root": {"configMap": {"name": config_map, "key": "config.yaml"}}}},
    });
    review(
        ("clair.projectquay.io", "v1alpha1", "Indexer"),
        "indexers",
        namespace,
        object,
    )
}

/// A forged review of an Indexer in `namespace` whose config names `secrets` drop-ins, each
/// a Secret of its own (the CRD admits 16).
pub fn resource_review_naming(namespace: &str, secrets: usize) -> String {
    let dropins: Vec<Value> = (0..secrets)
        .map(|i| json!({"secret": {"name": format!("dropin-{i}"), "key": "config.yaml"}}))
        .collect();
    let object = json!({
        "apiVersion": "clair.projectquay.io/v1alpha1",
        "kind": "Indexer",
        "metadata": {"name": "forged-indexer", "namespace": namespace},
        "spec": {"config": {"root": {"configMap": {"name": "cfg", "key": "config.yaml"}},
                            "dropins": dropins}},
    });
    review(
        ("clair.projectquay.io", "v1alpha1", "Indexer"),
        "indexers",
        namespace,
        object,
    )
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The answer's JSON Patch as text, or empty. It travels as bytes: base64 as Go writes them,
/// or a list of numbers as kube-rs does (the apiserver reads both).
pub fn patch_of(answer: &str) -> String {
    use base64::Engine;
    let Ok(review) = serde_json::from_str::<Value>(answer) else {
        return String::new();
    };
    let bytes = match &review["response"]["patch"] {
        Value::String(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap_or_default(),
        Value::Array(numbers) => numbers
            .iter()
            .filter_map(|n| n.as_u64().and_then(|n| u8::try_from(n).ok()))
            .collect(),
        _ => Vec::new(),
    };
    String::from_utf8_lossy(&bytes).into_owned()
}
