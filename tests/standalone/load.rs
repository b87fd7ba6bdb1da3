//! The harness holds under load (the scale issue's first point): both cores kept busy by
//! two spinning processes for a minute while 100 Indexers converge. No kwok node leaves
//! Ready (kwok renews a Lease per node, checked fresh at the end; the controller manager's
//! node-monitor grace period is 5 minutes, so a starved heartbeat is not a dead node), every
//! pod is Ready once the load stops, and every Indexer is Available.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clair_operator::api::{Indexer, Phase};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::support::{TestEnv, eventually};

const INDEXERS: usize = 100;
const LOAD: Duration = Duration::from_secs(60);

/// Busy processes, killed when dropped.
struct Burners(Vec<Child>);

impl Burners {
    fn start(count: usize) -> anyhow::Result<Self> {
        let mut children = Vec::new();
        for _ in 0..count {
            children.push(
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()?,
            );
        }
        Ok(Self(children))
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn ready(conditions: Option<&Vec<k8s_openapi::api::core::v1::NodeCondition>>) -> bool {
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub async fn kwok_nodes_stay_ready_while_the_machine_is_saturated(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    crate::operator::install(env, "base")?;
    let ns = env.namespace("load").await?;
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
        "data": {"config.yaml": "indexer:\n  connstring: host=db\n"}});
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &serde_json::from_value(config)?)
        .await?;
    let args = ["--no-webhook", "--no-leader-election", "--namespaces", &ns];
    let mut operator = crate::operator::start(env, "operator-load", &args)?;
    let nodes: Api<Node> = Api::all(client.clone());
    let indexers: Api<Indexer> = Api::namespaced(client.clone(), &ns);
    let burners = Burners::start(2)?;
    let started = Instant::now();
    for i in 0..INDEXERS {
        let indexer: Indexer = serde_json::from_value(json!({
            "apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Indexer",
            "metadata": {"name": format!("indexer-{i}")},
            "spec": {"config": {"root": {"configMap": {"name": "cfg", "key": "config.yaml"}}}},
        }))?;
        indexers.create(&PostParams::default(), &indexer).await?;
    }
    // Every node, every second, for the whole minute of load.
    let mut checks = 0;
    let mut available_under_load = 0;
    while started.elapsed() < LOAD {
        let listed = nodes.list(&ListParams::default()).await?;
        let not_ready: Vec<String> = listed
            .items
            .iter()
            .filter(|n| !ready(n.status.as_ref().and_then(|s| s.conditions.as_ref())))
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        ensure!(
            not_ready.is_empty(),
            "under load after {:?}: nodes not Ready: {not_ready:?}",
            started.elapsed()
        );
        checks += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let loaded = started.elapsed();
    available_under_load += indexers
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|i| i.status.as_ref().and_then(|s| s.phase) == Some(Phase::Available))
        .count();
    drop(burners);
    eventually(
        Duration::from_secs(300),
        "every Indexer Available",
        || async {
            Ok(indexers
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .all(|i| i.status.as_ref().and_then(|s| s.phase) == Some(Phase::Available)))
        },
    )
    .await
    .with_context(|| {
        operator
            .log()
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    let all = started.elapsed();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let listed = pods.list(&ListParams::default()).await?.items;
    let unready = listed.iter().filter(|p| !pod_ready(p)).count();
    ensure!(
        listed.len() == INDEXERS && unready == 0,
        "{} pods, {unready} not Ready",
        listed.len()
    );
    // The nodes' heartbeat the node controller trusts: a Lease per node, renewed every
    // 10 s. Without it (kwok's default) the node status, posted every five minutes, raced the
    // grace period and every pod turned unready for good.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for node in nodes.list(&ListParams::default()).await?.items {
        let name = node.metadata.name.unwrap_or_default();
        let renewed = leases
            .get_opt(&name)
            .await?
            .and_then(|l| l.spec?.renew_time)
            .with_context(|| format!("node {name} has no renewed Lease in kube-node-lease"))?;
        let age = k8s_openapi::jiff::Timestamp::now().duration_since(renewed.0);
        ensure!(
            age.as_secs() < 60,
            "node {name}'s Lease was last renewed {age:?} ago"
        );
    }
    operator.check_running()?;
    println!(
        "| Indexers | load | node checks, all Ready | Available when the load stopped | all Available |\n\
         |---|---|---|---|---|\n\
         | {INDEXERS} | 2 spinning processes, {:.0} s | {checks} | {available_under_load} | {:.1} s |",
        loaded.as_secs_f64(),
        all.as_secs_f64()
    );
    Ok(())
}
