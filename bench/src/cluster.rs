//! One benchmark cluster: the local control plane with kwok nodes, the CRDs, a PostgreSQL on
//! loopback holding the three services' databases, and the namespace every Clair shares
//! with its connection strings and its notifier delivery.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clair_operator::api::{Clair, Phase};
use clair_testenv::{ControlPlane, Options, Postgres};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

pub const NAMESPACE: &str = "bench";
/// Concurrent writes of the user creating Clairs and of the baseline's plain client.
pub const PARALLELISM: usize = 16;
const DELIVERY: &str = "delivery";

pub struct Cluster {
    pub plane: ControlPlane,
    /// Kept running while the cluster is (stopped when dropped).
    _postgres: Postgres,
    pub client: Client,
    /// The Secret and ConfigMap the Clairs read.
    pub fixtures: Vec<Value>,
}

impl Cluster {
    /// Starts everything; `nodes` kwok nodes (2,000 pods each).
    pub fn start(runtime: &tokio::runtime::Runtime, nodes: usize) -> anyhow::Result<Self> {
        let plane = ControlPlane::start(Options {
            nodes,
            ..Options::default()
        })
        .context("the control plane did not start (tools/controlplane/build.sh builds it)")?;
        plane.install_operator_prerequisites()?;
        plane.kubectl_ok(&["create", "namespace", NAMESPACE])?;
        let postgres = Postgres::start(&plane.dir().join("logs"))?;
        let mut strings = serde_json::Map::new();
        for service in ["indexer", "matcher", "notifier"] {
            let password = format!("{service}-bench");
            postgres.create_role_and_database(service, &password)?;
            strings.insert(
                service.to_string(),
                Value::from(postgres.connstring(service, &password, service)),
            );
        }
        let fixtures = vec![
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "databases", "namespace": NAMESPACE},
                   "stringData": strings}),
            delivery("https://quay.example.com/secscan/notification"),
        ];
        let client = runtime.block_on(plane.client())?;
        Ok(Self {
            plane,
            _postgres: postgres,
            client,
            fixtures,
        })
    }

    /// Applies the Secret and ConfigMap.
    pub async fn apply_fixtures(&self) -> anyhow::Result<()> {
        for fixture in &self.fixtures {
            apply(&self.client, fixture).await?;
        }
        Ok(())
    }
}

/// The notifier's webhook delivery: the drop-in every Clair names (changed to roll all).
pub fn delivery(target: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": DELIVERY, "namespace": NAMESPACE},
           "data": {"notifier.yaml": format!("notifier:\n  webhook:\n    target: {target}\n    callback: https://clair.example.com/notifier/api/v1/notification/\n")}})
}

/// Clair `clair-I`: external databases, the notifier with a webhook delivery.
pub fn clair(i: usize) -> Value {
    json!({
        "apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Clair",
        "metadata": {"name": format!("clair-{i}"), "namespace": NAMESPACE},
        "spec": {
            "database": {"external": {
                "indexer": {"name": "databases", "key": "indexer"},
                "matcher": {"name": "databases", "key": "matcher"},
                "notifier": {"name": "databases", "key": "notifier"},
            }},
            "dropins": [{"configMap": {"name": DELIVERY, "key": "notifier.yaml"}}],
        }
    })
}

/// Server-side applies `object` (any kind) as the benchmark's plain client.
pub async fn apply(client: &Client, object: &Value) -> anyhow::Result<()> {
    apply_all(client, std::slice::from_ref(object)).await
}

/// Applies `objects`, `PARALLELISM` at a time (each kind resolved once, first).
pub async fn apply_all(client: &Client, objects: &[Value]) -> anyhow::Result<()> {
    let mut resources = BTreeMap::new();
    let mut decoded = Vec::with_capacity(objects.len());
    for object in objects {
        let object: DynamicObject = serde_json::from_value(object.clone())?;
        let types = object.types.clone().context("no apiVersion or kind")?;
        let key = (types.api_version.clone(), types.kind.clone());
        if !resources.contains_key(&key) {
            let gvk = GroupVersionKind::try_from(&types)?;
            let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await?;
            resources.insert(key.clone(), resource);
        }
        decoded.push((key, object));
    }
    let resources = &resources;
    futures::stream::iter(decoded)
        .map(|(key, object)| async move {
            let api: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                &object.namespace().unwrap_or_else(|| NAMESPACE.to_string()),
                &resources[&key],
            );
            api.patch(
                &object.name_any(),
                &PatchParams::apply("clair-bench").force(),
                &Patch::Apply(&object),
            )
            .await
            .with_context(|| format!("applying {} {}", key.1, object.name_any()))
        })
        .buffer_unordered(PARALLELISM)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// How many Clairs in the namespace are Available.
pub async fn available(client: &Client) -> anyhow::Result<usize> {
    let clairs = Api::<Clair>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await?;
    Ok(clairs
        .items
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase) == Some(Phase::Available))
        .count())
}

/// The namespace's Deployments, by name.
pub async fn deployments(client: &Client) -> anyhow::Result<BTreeMap<String, Deployment>> {
    let list = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await?;
    Ok(list.items.into_iter().map(|d| (d.name_any(), d)).collect())
}

/// Whether the deployment controller has rolled `deployment` out and every pod is ready.
pub fn rolled_out(deployment: &Deployment) -> bool {
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let Some(status) = &deployment.status else {
        return false;
    };
    status.observed_generation >= deployment.metadata.generation
        && status.updated_replicas.unwrap_or(0) == wanted
        && status.ready_replicas.unwrap_or(0) == wanted
        && status.replicas.unwrap_or(0) == wanted
}

/// Polls `count` (every second, up to every 5 s for thousands) until it reaches `wanted`,
/// with a bar saying `what`.
pub async fn wait_for<F, Fut>(
    what: &str,
    wanted: usize,
    timeout: Duration,
    mut count: F,
) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<usize>>,
{
    let start = Instant::now();
    let bar = indicatif::ProgressBar::new(wanted as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("  {spinner} [{elapsed}] {pos}/{len} {msg}")
    {
        bar.set_style(style);
    }
    bar.set_message(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    loop {
        // A failed list (the apiserver busy) counts as no progress.
        let done = count().await.unwrap_or(0);
        bar.set_position(done as u64);
        if done >= wanted {
            bar.finish_and_clear();
            return Ok(start.elapsed());
        }
        ensure!(
            start.elapsed() < timeout,
            "{what}: {done} of {wanted} after {timeout:?}"
        );
        // Each poll lists the namespace: at 1,000 Clairs (3,000 Deployments) once a second
        // would be load of its own. At 10 a whole run takes 7 s, and polling once a second
        // could move the ratio to the baseline by up to 0.15 either way.
        tokio::time::sleep(Duration::from_millis((wanted as u64 * 2).clamp(250, 5000))).await;
    }
}
