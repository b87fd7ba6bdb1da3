//! The control plane failing under a converging operator (reliability case 2): the
//! kube-apiserver stopped for 10 s and started again while Clairs converge, then etcd stopped
//! for 20 s. The operator (leader election on, as deployed) neither exits nor spins: its
//! requests while the apiserver is unreachable stay few (its own metrics count them), the
//! failures show in `api_requests_total{code="error"}`, it stands by when it cannot renew
//! its Lease and leads again after, and every Clair converges; a change made after the
//! outages is acted on.
//!
//! Last in the tier: it stops and starts the control plane's parts.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clair_operator::api::{Indexer, Phase};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::operator::OperatorProcess;
use crate::support::clair::{available_clairs, create_clairs, external_spec, unsettled};
use crate::support::{TestEnv, eventually};

const CLAIRS: usize = 10;
/// How long each component is down before it is started again (the requests counted are
/// those of this window; starting and getting ready again take longer).
const APISERVER_DOWN: Duration = Duration::from_secs(10);
const ETCD_DOWN: Duration = Duration::from_secs(20);

/// A series of the operator's metrics summed over its labels (those containing `having`).
fn total(metrics: &str, series: &str, having: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{series}{{")) && l.contains(having))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn requests(operator: &OperatorProcess) -> anyhow::Result<(f64, f64)> {
    let metrics = operator.metrics()?;
    Ok((
        total(&metrics, "clair_operator_api_requests_total", ""),
        total(
            &metrics,
            "clair_operator_api_requests_total",
            "code=\"error\"",
        ),
    ))
}

/// One outage: `component` stopped for `down`, started again, the apiserver ready. The
/// operator's requests while it was down (all, and those that got no answer).
async fn outage(
    env: &TestEnv,
    operator: &mut OperatorProcess,
    component: &str,
    down: Duration,
) -> anyhow::Result<(f64, f64, Duration)> {
    let (before, failed_before) = requests(operator)?;
    let stopped = Instant::now();
    env.plane.stop_component(component)?;
    tokio::time::sleep(down / 2).await;
    let (halfway, _) = requests(operator)?;
    tokio::time::sleep(down / 2).await;
    let (during, failed_during) = requests(operator)?;
    // Backing off: fewer retries in the second half than in the first (the first half
    // holds each watch's first retries at 0.8, 1.6 and 3.2 s; the second, one at most).
    let (first, second) = (halfway - before, during - halfway);
    println!("{component} down: {first} requests in the first half, {second} in the second");
    // Backing off: the second half makes at most a fifth of the first (measured: 4–6 after
    // 111–398), or a handful when the first made few (etcd down: requests are held open).
    ensure!(
        second <= (first / 5.0).max(10.0),
        "{component} down: {first} requests in the first half, {second} in the second: not backing off"
    );
    env.plane.start_component(component)?;
    env.plane.wait_until_ready(Duration::from_secs(120)).await?;
    operator.check_running()?;
    Ok((
        during - before,
        failed_during - failed_before,
        stopped.elapsed(),
    ))
}

pub async fn an_apiserver_restart_and_an_etcd_outage_are_ridden_out(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let (client, ns) = crate::operator::fleet_namespace(env, "outage").await?;
    let mut operator = crate::operator::start(env, "operator-outage", &["--no-webhook"])?;
    let outcome = async {
        create_clairs(&client, &ns, CLAIRS, external_spec()).await?;
        eventually(
            Duration::from_secs(300),
            "some Clairs Available",
            || async { Ok(available_clairs(&client, &ns).await?.len() >= 2) },
        )
        .await?;
        let converging = available_clairs(&client, &ns).await?.len();

        let (apiserver_requests, apiserver_failed, apiserver_down) = outage(
            env,
            &mut operator,
            "kube-apiserver",
            APISERVER_DOWN,
        )
        .await?;
        let back = Instant::now();
        let waited = eventually(
            Duration::from_secs(300),
            "every Clair Available after the restart",
            || async { Ok(available_clairs(&client, &ns).await?.len() == CLAIRS) },
        )
        .await;
        if let Err(e) = waited {
            return Err(e.context(unsettled(&client, &ns).await));
        }
        let converged = back.elapsed();

        let (etcd_requests, etcd_failed, etcd_down) =
            outage(env, &mut operator, "etcd", ETCD_DOWN).await?;
        // Acted on after both: one Clair's indexer scaled to two.
        let back = Instant::now();
        let clairs: Api<clair_operator::api::Clair> = Api::namespaced(client.clone(), &ns);
        let name = available_clairs(&client, &ns)
            .await?
            .into_iter()
            .next()
            .context("no Clair")?;
        let scale = json!({"spec": {"indexer": {"replicas": 2}}});
        eventually(Duration::from_secs(60), "the change accepted", || async {
            Ok(clairs
                .patch(&name, &PatchParams::default(), &Patch::Merge(&scale))
                .await
                .is_ok())
        })
        .await?;
        let indexers: Api<Indexer> = Api::namespaced(client.clone(), &ns);
        eventually(
            Duration::from_secs(300),
            "the indexer scaled after the etcd outage",
            || async {
                let status = indexers
                    .get_opt(&format!("{name}-indexer"))
                    .await?
                    .and_then(|i| i.status);
                Ok(status.is_some_and(|s| {
                    s.phase == Some(Phase::Available) && s.ready_replicas == 2
                }))
            },
        )
        .await?;
        let acted = back.elapsed();
        operator.check_running()?;
        println!(
            "| outage | until ready again | operator requests while down | of them unanswered | per second | then |\n\
             |---|---|---|---|---|---|\n\
             | kube-apiserver stopped and started ({converging} of {CLAIRS} Clairs Available) | {:.1} s | {apiserver_requests} | {apiserver_failed} | {:.1} | all Available {:.1} s after it was ready |\n\
             | etcd stopped | {:.1} s | {etcd_requests} | {etcd_failed} | {:.1} | a change acted on {:.1} s after it was ready |",
            apiserver_down.as_secs_f64(),
            apiserver_requests / APISERVER_DOWN.as_secs_f64(),
            converged.as_secs_f64(),
            etcd_down.as_secs_f64(),
            etcd_requests / ETCD_DOWN.as_secs_f64(),
            acted.as_secs_f64(),
        );
        // Not spinning: every watch, the Lease and each cached object's failed reconcile retry
        // with a growing wait, so the first half of the outage holds nearly all requests and
        // the second a few (checked in `outage`); a busy loop would make thousands a second.
        // The count itself grows with what the operator caches (400 with the earlier tests'
        // objects still being deleted, 120 without), so it is bounded per second loosely.
        ensure!(
            apiserver_requests / APISERVER_DOWN.as_secs_f64() < 200.0,
            "{apiserver_requests} requests in {apiserver_down:?} with the apiserver down"
        );
        ensure!(
            apiserver_failed > 0.0,
            "no unanswered request counted while the apiserver was down"
        );
        ensure!(
            etcd_requests / ETCD_DOWN.as_secs_f64() < 200.0,
            "{etcd_requests} requests in {etcd_down:?} with etcd down"
        );
        let log = operator.log();
        // The Lease could not be renewed while the apiserver was down: it stood by, and led
        // again once it could, without exiting.
        let led = log.matches("leading: the controllers start").count();
        ensure!(
            log.contains("lost the lease: the controllers stopped; standing by") && led >= 2,
            "the operator did not stand by and lead again (led {led} times)"
        );
        println!("the operator led {led} times (standing by between)");
        ensure!(
            !log.contains("panicked"),
            "the operator panicked: {}",
            log.lines().filter(|l| l.contains("panicked")).collect::<Vec<_>>().join("\n")
        );
        Ok(())
    }
    .await;
    // Whatever happened, the next test needs a whole control plane.
    for component in ["etcd", "kube-apiserver"] {
        let _ = env.plane.start_component(component);
    }
    let _ = env.plane.wait_until_ready(Duration::from_secs(120)).await;
    outcome.with_context(|| {
        operator
            .log()
            .lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .join("\n")
    })
}
