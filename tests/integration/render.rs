//! `clair-operator render` and the controllers make the same objects from the same inputs
//! (both call the families' one `plan`): a `Clair` reconciled to Available by the operator,
//! then rendered offline from the same `Clair`, ConfigMap and Secrets (its pre-shared key
//! read back from the cluster, where the operator generated it). Every object `render`
//! prints is in the cluster, with every field `render` sets at the same value.

use anyhow::{Context, ensure};
use clair_operator::offline;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use serde_json::{Value, json};

use crate::support::clair::{available_clair, external_spec};
use crate::support::{CLUSTER_WIDE_CHANGES, TestEnv};

pub async fn render_makes_what_a_reconcile_applies(env: &TestEnv) -> anyhow::Result<()> {
    // No optional API appears meanwhile (render is told what the cluster serves).
    let _quiet = CLUSTER_WIDE_CHANGES.read().await;
    let client = env.client().await?;
    let mut spec = external_spec();
    spec["indexer"] = json!({"autoscaling": {"minReplicas": 1, "maxReplicas": 3}});
    let ns = available_clair(env, &client, "render-same", spec.clone()).await?;

    // The same inputs, as a user would give them to `render`.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut documents = vec![json!({
        "apiVersion": "clair.projectquay.io/v1alpha1",
        "kind": "Clair",
        "metadata": {"name": "clair", "namespace": ns},
        "spec": spec,
    })];
    for secret in ["databases", "clair-psk"] {
        documents.push(input(
            serde_json::to_value(secrets.get(secret).await?)?,
            "Secret",
        ));
    }
    documents.push(input(
        serde_json::to_value(config_maps.get("delivery").await?)?,
        "ConfigMap",
    ));
    let options = offline::Options {
        namespace: ns.clone(),
        platform: crate::support::platform(),
        ..Default::default()
    };
    let rendered = offline::render(documents, &options)?;
    let kinds: Vec<String> = rendered
        .objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    for kind in [
        "Indexer",
        "Deployment",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
    ] {
        ensure!(
            kinds.iter().any(|k| k == kind),
            "render made no {kind}: {kinds:?}"
        );
    }

    let mut differ = Vec::new();
    for object in &rendered.objects {
        let kind = object["kind"].as_str().context("a kind")?;
        let name = object["metadata"]["name"].as_str().context("a name")?;
        let text = env.kubectl_ok(&ns, &["get", kind, name, "-o", "json"])?;
        // A Secret's text values as `render` prints them.
        let mut live: Value = serde_json::from_str(&text)?;
        offline::readable_secret(&mut live);
        let mut found = Vec::new();
        differences(object, &live, "", &mut found);
        differ.extend(found.into_iter().map(|d| format!("{kind} {name}: {d}")));
    }
    // The comparison bites: a rendered Deployment with another image differs there alone.
    let deployment = (rendered.objects.iter())
        .find(|o| o["kind"] == "Deployment")
        .context("a Deployment")?;
    let name = deployment["metadata"]["name"].as_str().context("a name")?;
    let live: Value =
        serde_json::from_str(&env.kubectl_ok(&ns, &["get", "Deployment", name, "-o", "json"])?)?;
    let mut changed = deployment.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("quay.io/projectquay/clair:0.0.1");
    let mut found = Vec::new();
    differences(&changed, &live, "", &mut found);
    ensure!(
        found.len() == 1 && found[0].starts_with(".spec.template.spec.containers[0].image:"),
        "a changed image was not the one difference: {found:?}"
    );
    ensure!(
        differ.is_empty(),
        "render and the reconcile made different objects ({} of {} fields):\n{}",
        differ.len(),
        rendered.objects.len(),
        differ.join("\n")
    );
    Ok(())
}

/// An object read from the cluster as a user would write it: its kind, name, labels and
/// content, no server-set metadata.
fn input(mut object: Value, kind: &str) -> Value {
    object["kind"] = json!(kind);
    object["apiVersion"] = json!("v1");
    let metadata = &object["metadata"];
    object["metadata"] = json!({
        "name": metadata["name"],
        "namespace": metadata["namespace"],
        "labels": metadata.get("labels").cloned().unwrap_or(json!({})),
    });
    object
}

/// Where `rendered` is not contained in `live`: a field `render` sets that the live object
/// lacks or holds at another value. Fields only the live object has (server defaults,
/// status, the operator's applied-hash annotation, owner references) do not count; an empty
/// list or map `render` sets matches an absent field (the apiserver drops empty ones).
fn differences(rendered: &Value, live: &Value, at: &str, out: &mut Vec<String>) {
    match (rendered, live) {
        (Value::Object(r), Value::Object(l)) => {
            for (key, value) in r {
                let path = format!("{at}.{key}");
                match l.get(key) {
                    Some(live) => differences(value, live, &path, out),
                    None if empty(value) => {}
                    None => out.push(format!("{path}: rendered {value}, absent in the cluster")),
                }
            }
        }
        (Value::Array(r), Value::Array(l)) if r.len() == l.len() => {
            for (index, (r, l)) in r.iter().zip(l).enumerate() {
                differences(r, l, &format!("{at}[{index}]"), out);
            }
        }
        (r, l) if r == l => {}
        (r, l) => out.push(format!("{at}: rendered {r}, in the cluster {l}")),
    }
}

fn empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}
