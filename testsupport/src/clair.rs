//! `Clair` helpers both test tiers share: databases on the test PostgreSQL, the resource
//! and its drop-ins applied, waiting on its phase and conditions.

use std::time::Duration;

use anyhow::{Context, bail};
use clair_operator::api::{Clair, Phase};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::{FIELD_MANAGER, TestEnv, eventually};

pub const LONG: Duration = Duration::from_secs(120);
pub const PASSWORD: &str = "s3cret-Pa55word";

/// A Secret or ConfigMap (by `kind`), applied.
pub async fn apply_json<K>(client: &Client, ns: &str, object: Value) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let name = object["metadata"]["name"]
        .as_str()
        .context("object without a name")?
        .to_string();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .with_context(|| format!("apply {name}"))?;
    Ok(())
}

/// Roles `PREFIX_indexer` and so on, each owning a database of its name, on the test
/// PostgreSQL; returns their connection strings in a Secret named `databases`.
pub async fn external_databases(
    env: &TestEnv,
    client: &Client,
    ns: &str,
) -> anyhow::Result<String> {
    let prefix = ns.replace('-', "_");
    let mut data = serde_json::Map::new();
    for service in ["indexer", "matcher", "notifier"] {
        let role = format!("{prefix}_{service}");
        env.postgres.create_role_and_database(&role, PASSWORD)?;
        data.insert(
            service.to_string(),
            json!(env.postgres.connstring(&role, PASSWORD, &role)),
        );
    }
    apply_json::<Secret>(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "databases"}, "stringData": data}),
    )
    .await?;
    Ok(prefix)
}

/// The notifier's delivery, as users add it: a drop-in.
pub async fn notifier_dropin(client: &Client, ns: &str, target: &str) -> anyhow::Result<()> {
    let text = format!(
        "notifier:\n  webhook:\n    target: {target}\n    callback: http://clair-notifier.{ns}.svc:6060/notifier/api/v1/notification/\n"
    );
    apply_json::<ConfigMap>(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "delivery"}, "data": {"notifier.yaml": text}}),
    )
    .await
}

/// What [`external_spec`] reads in `ns`: the databases (Secret `databases`) and the
/// notifier's delivery drop-in, to a host nobody serves (nothing is delivered). Returns the
/// roles' prefix.
pub async fn external_inputs(env: &TestEnv, client: &Client, ns: &str) -> anyhow::Result<String> {
    let prefix = external_databases(env, client, ns).await?;
    notifier_dropin(client, ns, "http://quay.example.com/notify").await?;
    Ok(prefix)
}

/// A new namespace named from `prefix`, with its [`external_inputs`] and a `Clair` `clair` of
/// `spec` that reached Available. Returns the namespace.
pub async fn available_clair(
    env: &TestEnv,
    client: &Client,
    prefix: &str,
    spec: Value,
) -> anyhow::Result<String> {
    let ns = env.namespace(prefix).await?;
    external_inputs(env, client, &ns).await?;
    create_clair(client, &ns, "clair", spec).await?;
    wait_clair(
        client,
        &ns,
        "clair",
        "clair Available",
        phase_is(Phase::Available),
    )
    .await?;
    Ok(ns)
}

/// A Secret `databases` of connection strings (`service` → string), applied.
pub async fn databases_secret(
    client: &Client,
    ns: &str,
    strings: serde_json::Map<String, Value>,
) -> anyhow::Result<()> {
    apply_json::<Secret>(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "databases"}, "stringData": strings}),
    )
    .await
}

/// External databases for the indexer and matcher (Secret `databases`), no notifier.
pub fn external_spec_without_notifier() -> Value {
    json!({
        "database": {"external": {
            "indexer": {"name": "databases", "key": "indexer"},
            "matcher": {"name": "databases", "key": "matcher"},
        }},
        "notifier": {"enabled": false},
    })
}

/// `count` Clairs `clair-0`, `clair-1`, ... with `spec`, created eight at a time.
pub async fn create_clairs(
    client: &Client,
    ns: &str,
    count: usize,
    spec: Value,
) -> anyhow::Result<()> {
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(0..count)
        .map(|i| {
            let spec = spec.clone();
            async move { create_clair(client, ns, &format!("clair-{i}"), spec).await }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// The names of the Clairs in `ns` that are Available.
pub async fn available_clairs(
    client: &Client,
    ns: &str,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let list = Api::<Clair>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase) == Some(Phase::Available))
        .map(|c| c.name_any())
        .collect())
}

/// For a failure message: each Clair in `ns` that is not Available, with its phase and the
/// conditions that are not True, and how many pods in `ns` are not Ready (what a fleet that
/// did not converge was waiting on: the operator, or the nodes and controllers under it).
pub async fn unsettled(client: &Client, ns: &str) -> String {
    let clairs = match Api::<Clair>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => return format!("cannot list the Clairs: {e}"),
    };
    let mut lines: Vec<String> = clairs
        .iter()
        .filter_map(|c| {
            let status = c.status.as_ref();
            let phase = status.and_then(|s| s.phase);
            (phase != Some(Phase::Available)).then(|| {
                let conditions = status
                    .map(|s| s.conditions.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .filter(|c| c.status != "True")
                    .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                    .collect::<Vec<_>>()
                    .join("; ");
                format!("{} {phase:?}: {conditions}", c.name_any())
            })
        })
        .collect();
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await;
    if let Ok(pods) = pods {
        let unready = pods
            .items
            .iter()
            .filter(|p| {
                !p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        lines.push(format!("{unready} of {} pods not Ready", pods.items.len()));
    }
    lines.join("\n")
}

pub fn external_spec() -> Value {
    json!({
        "database": {"external": {
            "indexer": {"name": "databases", "key": "indexer"},
            "matcher": {"name": "databases", "key": "matcher"},
            "notifier": {"name": "databases", "key": "notifier"},
        }},
        "dropins": [{"configMap": {"name": "delivery", "key": "notifier.yaml"}}],
    })
}

pub async fn create_clair(
    client: &Client,
    ns: &str,
    name: &str,
    spec: Value,
) -> anyhow::Result<()> {
    apply_json::<Clair>(
        client,
        ns,
        json!({"apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Clair", "metadata": {"name": name}, "spec": spec}),
    )
    .await
}

pub async fn patch_spec(client: &Client, ns: &str, name: &str, spec: Value) -> anyhow::Result<()> {
    let api: Api<Clair> = Api::namespaced(client.clone(), ns);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "spec": spec })),
    )
    .await?;
    Ok(())
}

pub fn condition<'a>(
    clair: &'a Clair,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    clair
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

/// Waits until `check` holds for the Clair; the error names its last conditions.
pub async fn wait_clair(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&Clair) -> bool,
) -> anyhow::Result<Clair> {
    wait_clair_within(LONG, client, ns, name, what, check).await
}

/// As [`wait_clair`], for up to `timeout`.
pub async fn wait_clair_within(
    timeout: Duration,
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&Clair) -> bool,
) -> anyhow::Result<Clair> {
    let api: Api<Clair> = Api::namespaced(client.clone(), ns);
    let check = &check;
    eventually(timeout, what, || {
        let api = api.clone();
        async move {
            let clair = api.get(name).await?;
            if check(&clair) {
                return Ok(true);
            }
            let status = clair.status.clone().unwrap_or_default();
            let summary: Vec<String> = status
                .conditions
                .iter()
                .filter(|c| c.status != "True")
                .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                .collect();
            bail!("phase {:?}; {}", status.phase, summary.join(" | "))
        }
    })
    .await?;
    Ok(api.get(name).await?)
}

pub fn phase_is(phase: Phase) -> impl Fn(&Clair) -> bool {
    move |c| c.status.as_ref().and_then(|s| s.phase) == Some(phase)
}

pub fn secret_text(secret: &Secret, key: &str) -> anyhow::Result<String> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .with_context(|| format!("Secret {} has no key {key}", secret.name_any()))?;
    Ok(String::from_utf8(bytes.0.clone())?)
}
