//! Two operator processes elect a leader on the Lease `clair-operator`; the leader killed
//! (SIGKILL) while 50 Clairs converge hands over to the other within the lease's duration,
//! which finishes the work; no object has two writers, none is duplicated, and each Clair's
//! generated key is created exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, ensure};
use clair_operator::api::Indexer;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::operator::TEST_GROUP;
use crate::support::clair::{available_clairs, create_clairs, external_spec};
use crate::support::{TestEnv, audited_since, eventually};

const CLAIRS: usize = 50;
/// The lease's duration (`leader::Timing::default`) and a candidate's retry period.
const LEASE: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_secs(2);

async fn holder(env: &TestEnv) -> anyhow::Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(env.client().await?, "clair-operator");
    Ok(leases
        .get_opt("clair-operator")
        .await?
        .and_then(|l| l.spec?.holder_identity))
}

/// Which operator process made an audited request, by the group the test gave it.
fn process_of(entry: &Value) -> Option<String> {
    entry["impersonatedUser"]["groups"]
        .as_array()?
        .iter()
        .find_map(|g| g.as_str()?.strip_prefix(TEST_GROUP).map(String::from))
}

fn at(entry: &Value) -> anyhow::Result<SystemTime> {
    let stamp: k8s_openapi::jiff::Timestamp = entry["requestReceivedTimestamp"]
        .as_str()
        .unwrap_or_default()
        .parse()?;
    Ok(SystemTime::from(stamp))
}

pub async fn a_killed_leader_hands_over_and_nothing_is_done_twice(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let (client, ns) = crate::operator::fleet_namespace(env, "leader").await?;

    let since = SystemTime::now();
    let mut first = crate::operator::start(env, "operator-a", &["--no-webhook"])?;
    eventually(Duration::from_secs(60), "operator-a to lead", || async {
        Ok(holder(env).await?.as_deref() == Some("operator-a"))
    })
    .await
    .with_context(|| first.log())?;
    let mut second = crate::operator::start(env, "operator-b", &["--no-webhook"])?;
    // Give the second time to see the lease held and stand by.
    tokio::time::sleep(RETRY * 2).await;

    create_clairs(&client, &ns, CLAIRS, external_spec()).await?;
    let available = || async { anyhow::Ok(available_clairs(&client, &ns).await?.len()) };
    // Mid-convergence: some Available, not all.
    eventually(
        Duration::from_secs(300),
        "a few Clairs Available",
        || async { Ok(available().await? >= 5) },
    )
    .await
    .with_context(|| first.log())?;
    let before_kill = available().await?;
    first.kill()?;
    let killed = (SystemTime::now(), Instant::now());

    eventually(LEASE + RETRY * 5, "operator-b to take the lead", || async {
        Ok(holder(env).await?.as_deref() == Some("operator-b"))
    })
    .await
    .with_context(|| second.log())?;
    let takeover = killed.1.elapsed();
    eventually(
        Duration::from_secs(600),
        "every Clair Available",
        || async { Ok(available().await? == CLAIRS) },
    )
    .await
    .with_context(|| second.log())?;
    let converged = killed.1.elapsed();
    second.check_running()?;
    println!(
        "| Clairs | Available at the kill | lead taken over after | all Available after the kill |\n\
         |---|---|---|---|\n\
         | {CLAIRS} | {before_kill} | {:.1} s | {:.1} s |",
        takeover.as_secs_f64(),
        converged.as_secs_f64()
    );
    ensure!(
        takeover <= LEASE + RETRY * 3,
        "the lead took {takeover:?} to pass, more than the lease's {LEASE:?} and a few retries"
    );

    // Nothing duplicated: one indexer per Clair, each controlled by its own Clair.
    let indexers = Api::<Indexer>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await?;
    let owners: BTreeSet<String> = indexers
        .items
        .iter()
        .filter_map(|i| i.owner_references().first().map(|o| o.uid.clone()))
        .collect();
    ensure!(
        indexers.items.len() == CLAIRS && owners.len() == CLAIRS,
        "{} indexers for {} owners",
        indexers.items.len(),
        owners.len()
    );

    // The audit log: the second wrote nothing but the Lease before it led (so no object had
    // two writers at once), and each Clair's pre-shared key was created exactly once.
    let writes = audited_since(env, since, |entry| {
        matches!(
            entry["verb"].as_str(),
            Some("create" | "update" | "patch" | "delete")
        ) && process_of(entry).is_some()
    })?;
    let mut early = Vec::new();
    let mut psk_created: BTreeMap<String, usize> = BTreeMap::new();
    for entry in &writes {
        let resource = entry["objectRef"]["resource"].as_str().unwrap_or_default();
        let name = entry["objectRef"]["name"].as_str().unwrap_or_default();
        if process_of(entry).as_deref() == Some("operator-b")
            && resource != "leases"
            && at(entry)? < killed.0
        {
            early.push(crate::support::request_line(entry));
        }
        if resource == "secrets" && name.ends_with("-psk") && entry["responseStatus"]["code"] == 201
        {
            *psk_created.entry(name.to_string()).or_default() += 1;
        }
    }
    ensure!(
        early.is_empty(),
        "the standby wrote while the leader lived: {early:?}"
    );
    ensure!(
        psk_created.len() == CLAIRS && psk_created.values().all(|n| *n == 1),
        "pre-shared keys created: {psk_created:?}"
    );
    drop(second);
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&ns, &Default::default())
        .await?;
    Ok(())
}
