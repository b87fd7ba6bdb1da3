//! Fairness (issue 31 point 4): twenty Clairs of one tenant whose databases never answer (a
//! loopback listener that takes connections and says nothing) held every reconcile worker
//! for minutes, and a good Clair in another namespace became Available after 226 s instead of
//! 2 s. Database checks now run apart from the reconciles, a few per namespace at once: the
//! good Clair is acted on as if the attack were not there, and the hostile ones say why they
//! wait.

use std::time::{Duration, Instant};

use anyhow::ensure;
use clair_operator::api::{Clair, Phase};
use kube::api::Api;

use crate::operator::fleet_namespace;
use crate::support::TestEnv;
use crate::support::clair::{
    apply_json, create_clair, external_spec, notifier_dropin, phase_is, wait_clair,
    wait_clair_within,
};

const HOSTILE: usize = 20;
/// The good Clair must become Available within this while the attack runs (it took 226 s).
const BOUND: Duration = Duration::from_secs(60);

pub async fn a_tenant_whose_databases_never_answer_slows_no_one_else(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let (client, good) = fleet_namespace(env, "fair-good").await?;
    let hostile = env.namespace("fair-hostile").await?;
    // Takes connections into its backlog and never answers them.
    let silent = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = silent.local_addr()?.port();
    let string =
        format!("host=127.0.0.1 port={port} user=x password=y dbname=z connect_timeout=10");
    every_database_at(&client, &hostile, &string).await?;
    let mut operator = crate::operator::start(env, "operator-fairness", &["--no-webhook"])?;
    let result = async {
        // The same Clair's time to Available with no attack, in this run, for comparison.
        let start = Instant::now();
        create_clair(&client, &good, "before", external_spec()).await?;
        wait_clair(&client, &good, "before", "a Clair Available before the attack", phase_is(Phase::Available)).await?;
        let baseline = start.elapsed();
        for i in 0..HOSTILE {
            create_clair(&client, &hostile, &format!("stuck-{i}"), external_spec()).await?;
        }
        // Let the hostile checks take every slot they can.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let start = Instant::now();
        create_clair(&client, &good, "clair", external_spec()).await?;
        wait_clair_within(BOUND, &client, &good, "clair", "the other tenant's Clair Available", phase_is(Phase::Available)).await?;
        let took = start.elapsed();
        println!(
            "| attack | another namespace's Clair Available after |\n|---|---|\n| none | {:.1} s |\n| {HOSTILE} Clairs on a database that never answers | {:.1} s (was 226 s against 2 s) |",
            baseline.as_secs_f64(),
            took.as_secs_f64()
        );
        // A change there is acted on too, while the attack goes on.
        let changed = Instant::now();
        crate::support::clair::patch_spec(&client, &good, "clair", serde_json::json!({"indexer": {"replicas": 2}})).await?;
        wait_clair(&client, &good, "clair", "the change acted on", |c: &Clair| {
            c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
                && c.status.as_ref().and_then(|s| s.phase) == Some(Phase::Available)
        })
        .await?;
        ensure!(changed.elapsed() < BOUND, "the change took {:?}", changed.elapsed());
        // The hostile ones wait on their database, and say so.
        let stuck = Api::<Clair>::namespaced(client.clone(), &hostile).get("stuck-0").await?;
        let ready = crate::support::clair::condition(&stuck, "DatabaseReady").cloned();
        ensure!(
            ready.as_ref().is_some_and(|c| c.status != "True"),
            "a Clair whose database never answers: {ready:?}"
        );
        operator.check_running()?;
        Ok(())
    }
    .await;
    drop(silent);
    result
}

/// What [`external_spec`] reads in `ns`, every service's database at `string`.
pub async fn every_database_at(
    client: &kube::Client,
    ns: &str,
    string: &str,
) -> anyhow::Result<()> {
    apply_json::<k8s_openapi::api::core::v1::Secret>(
        client,
        ns,
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "databases"},
                           "stringData": {"indexer": string, "matcher": string, "notifier": string}}),
    )
    .await?;
    notifier_dropin(client, ns, "http://quay.example.com/notify").await
}
