//! Faults around a running Clair (issue: faults, docs/reliability.md): its external database
//! stopped under it and started again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clair_operator::api::Phase;
use clair_testenv::Postgres;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::support::TestEnv;
use crate::support::clair::{
    condition, create_clair, databases_secret, external_spec_without_notifier, phase_is, wait_clair,
};

pub const PASSWORD: &str = "lost-database-password";

/// Each Deployment's generation and pod template: what a rollout would change.
async fn deployments(
    api: &Api<Deployment>,
) -> anyhow::Result<BTreeMap<String, (Option<i64>, serde_json::Value)>> {
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|d| {
            let template = serde_json::to_value(d.spec.map(|s| s.template)).unwrap_or_default();
            (
                d.metadata.name.unwrap_or_default(),
                (d.metadata.generation, template),
            )
        })
        .collect())
}

pub async fn a_lost_database_degrades_and_recovers_without_a_rollout(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("db-lost").await?;
    // A PostgreSQL of this test's own (its logs in a folder of their own): stopping the
    // shared one would fail the others.
    let logs = env.plane.dir().join("logs/db-lost");
    std::fs::create_dir_all(&logs)?;
    // Started from this test's runtime worker, not a blocking-pool thread: the server dies
    // with the thread that started it (PR_SET_PDEATHSIG), and pool threads come and go. A
    // few seconds of blocking here stall nothing else (each test has a runtime of its own).
    let mut postgres = Postgres::start_reachable(&logs, None)?;
    let prefix = ns.replace('-', "_");
    let mut strings = serde_json::Map::new();
    for service in ["indexer", "matcher"] {
        let role = format!("{prefix}_{service}");
        postgres.create_role_and_database(&role, PASSWORD)?;
        strings.insert(
            service.to_string(),
            json!(postgres.connstring(&role, PASSWORD, &role)),
        );
    }
    databases_secret(&client, &ns, strings).await?;
    create_clair(&client, &ns, "clair", external_spec_without_notifier()).await?;
    wait_clair(
        &client,
        &ns,
        "clair",
        "Available",
        phase_is(Phase::Available),
    )
    .await?;
    let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let before = deployments(&api).await?;
    ensure!(before.len() == 2, "deployments: {:?}", before.keys());

    // Stopped: seen at the next probe, DatabaseReady False, Degraded, nothing rolled or gone.
    postgres.stop();
    let lost_at = Instant::now();
    let degraded = wait_clair(&client, &ns, "clair", "Degraded, database not ready", |c| {
        phase_is(Phase::Degraded)(c)
            && condition(c, "DatabaseReady").is_some_and(|d| d.status == "False")
    })
    .await?;
    let seen_after = lost_at.elapsed();
    let message = &condition(&degraded, "DatabaseReady")
        .context("DatabaseReady")?
        .message;
    // The probes run apart, each on its own clock: the first to fail is named first.
    ensure!(
        (message.contains("indexer") || message.contains("matcher")) && !message.contains(PASSWORD),
        "DatabaseReady: {message}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        deployments(&api).await? == before,
        "a Deployment changed or went while the database was down"
    );

    // Started again: Available within one probe at the Degraded pace, still no rollout.
    postgres.start_again()?;
    let back_at = Instant::now();
    wait_clair(
        &client,
        &ns,
        "clair",
        "Available again",
        phase_is(Phase::Available),
    )
    .await?;
    let recovered_after = back_at.elapsed();
    ensure!(
        deployments(&api).await? == before,
        "the recovery rolled a Deployment"
    );
    eprintln!(
        "database lost: DatabaseReady=False after {:.1} s (recheck of an Available Clair: 10 s \
         in this suite, 300 s by default); Available again {:.1} s after it answered",
        seen_after.as_secs_f64(),
        recovered_after.as_secs_f64()
    );
    Ok(())
}
