//! One operator killed (SIGKILL) while 100 Clairs converge, then started again: every Clair
//! reaches Available, no owned object is duplicated or orphaned (counted by owner UID), and a
//! Clair that was Available at the kill gets no transition Event from the restarted operator
//! (its phase is read back from its status, not recomputed from Pending).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clair_operator::api::{Clair, Indexer, Matcher, Notifier};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};

use crate::support::clair::{available_clairs, create_clairs, external_spec};
use crate::support::{TestEnv, eventually};

/// As the faults issue asks: 300 Deployments and their pods on the two kwok nodes.
const CLAIRS: usize = 100;

/// How many of `objects` each owner UID has, and the owners that are no Clair.
fn by_owner<K: Resource>(
    objects: &[K],
    clairs: &BTreeSet<String>,
) -> (BTreeMap<String, usize>, usize) {
    let mut counts = BTreeMap::new();
    let mut orphans = 0;
    for object in objects {
        match object
            .meta()
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
        {
            Some(owner) if clairs.contains(&owner.uid) => {
                *counts.entry(owner.uid.clone()).or_default() += 1
            }
            _ => orphans += 1,
        }
    }
    (counts, orphans)
}

pub async fn a_killed_operator_restarted_finishes_and_duplicates_nothing(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let (client, ns) = crate::operator::fleet_namespace(env, "restart").await?;
    let args = ["--no-webhook", "--no-leader-election"];
    let mut first = crate::operator::start(env, "operator-first", &args)?;

    create_clairs(&client, &ns, CLAIRS, external_spec()).await?;
    let clairs: Api<Clair> = Api::namespaced(client.clone(), &ns);
    let available = || available_clairs(&client, &ns);
    eventually(
        Duration::from_secs(300),
        "some Clairs Available",
        || async { Ok(available().await?.len() >= 10) },
    )
    .await
    .with_context(|| first.log())?;
    first.kill()?;
    let available_at_kill = available().await?;
    let restarted_at = Timestamp::now();
    let restarted = Instant::now();
    let mut second = crate::operator::start(env, "operator-second", &args)?;
    eventually(
        Duration::from_secs(600),
        "every Clair Available",
        || async { Ok(available().await?.len() == CLAIRS) },
    )
    .await
    .with_context(|| second.log())?;
    let converged = restarted.elapsed();
    second.check_running()?;
    println!(
        "| Clairs | Available at the kill | all Available after the restart |\n|---|---|---|\n| {CLAIRS} | {} | {:.1} s |",
        available_at_kill.len(),
        converged.as_secs_f64()
    );
    // Requests and watches multiplexed on a few HTTP/2 connections (64 streams each, a next
    // one opened only when those are full: `apiclient::Spread`), not one per request in
    // flight as over HTTP/1.1 (147 at 100 Clairs, the pool keeping them all).
    let connections = second.connections_to(env.plane.api_port())?;
    ensure!(
        (1..=4).contains(&connections),
        "the operator holds {connections} connections to the apiserver, not one to four"
    );

    // Nothing duplicated or orphaned: each Clair controls one of each.
    let uids: BTreeSet<String> = clairs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|c| c.uid())
        .collect();
    let list = ListParams::default();
    let indexers = Api::<Indexer>::namespaced(client.clone(), &ns)
        .list(&list)
        .await?
        .items;
    let matchers = Api::<Matcher>::namespaced(client.clone(), &ns)
        .list(&list)
        .await?
        .items;
    let notifiers = Api::<Notifier>::namespaced(client.clone(), &ns)
        .list(&list)
        .await?
        .items;
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns)
        .list(&list)
        .await?
        .items;
    let psks: Vec<Secret> = secrets
        .into_iter()
        .filter(|s| s.name_any().ends_with("-psk"))
        .collect();
    for (kind, (counts, orphans)) in [
        ("Indexer", by_owner(&indexers, &uids)),
        ("Matcher", by_owner(&matchers, &uids)),
        ("Notifier", by_owner(&notifiers, &uids)),
        ("pre-shared key Secret", by_owner(&psks, &uids)),
    ] {
        ensure!(orphans == 0, "{orphans} {kind}s controlled by no Clair");
        ensure!(
            counts.len() == CLAIRS && counts.values().all(|n| *n == 1),
            "{kind}s per Clair: {} Clairs have one, {} have more",
            counts.values().filter(|n| **n == 1).count(),
            counts.values().filter(|n| **n > 1).count()
        );
    }

    // No transition Event for what was Available at the kill: its phase was rehydrated.
    let events = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&list)
        .await?
        .items;
    let spurious: Vec<String> = events
        .iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("Clair")
                    && r.name
                        .as_ref()
                        .is_some_and(|n| available_at_kill.contains(n))
            })
        })
        .filter(|e| {
            let first = e.event_time.as_ref().map(|t| t.0);
            let last = e.series.as_ref().map(|s| s.last_observed_time.0);
            first.into_iter().chain(last).any(|t| t >= restarted_at)
        })
        .map(|e| {
            format!(
                "{} {}",
                e.regarding
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_default(),
                e.reason.clone().unwrap_or_default()
            )
        })
        .collect();
    ensure!(
        spurious.is_empty(),
        "Clairs Available at the kill got transition Events after the restart: {spurious:?}"
    );
    drop(second);
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&ns, &Default::default())
        .await?;
    Ok(())
}
