//! The platform's lists, as a platform team sets them on `clair-operator run` (issue 54
//! points 2 and 3): a KEDA address outside `--allowed-prometheus` is refused by the webhook
//! naming the field and the flag; a database in a network the checks may not reach (loopback,
//! refused by default) is never dialled, and the Clair says which flag keeps it out.

use std::time::Duration;

use anyhow::ensure;
use clair_operator::api::Clair;
use serde_json::json;

use crate::support::TestEnv;
use crate::support::clair::{condition, create_clair, external_spec, wait_clair};

const LISTED: &str = "http://prometheus-operated.monitoring.svc:9090";

pub async fn the_platforms_lists_hold_for_keda_and_database_checks(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let (client, ns) = crate::operator::fleet_namespace(env, "platform-lists").await?;
    // A database of the test's own on loopback, counting who connects.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    crate::fairness::every_database_at(
        &client,
        &ns,
        &format!("host=127.0.0.1 port={port} user=x password=y dbname=z"),
    )
    .await?;
    let args = [
        &format!("--allowed-prometheus={LISTED}") as &str,
        // The default, said once so the harness does not open loopback to the checks.
        "--database-networks-refused=127.0.0.0/8,::1/128,169.254.0.0/16,fe80::/10",
    ];
    let mut operator = crate::operator::start_with_webhook(env, "operator-platform", &args)?;
    let result = async {
        let indexer = |address: &str| {
            json!({"apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Indexer",
                   "metadata": {"name": "scaled"},
                   "spec": {"config": {"root": {"configMap": {"name": "cfg", "key": "config.yaml"}}},
                            "autoscaling": {"engine": "KEDA", "maxReplicas": 3,
                                            "keda": {"prometheusAddress": address}}}})
            .to_string()
        };
        let unlisted = indexer("http://prometheus-k8s.monitoring.svc:9090");
        // The webhook registers itself once it serves, and the resource webhook fails open:
        // until the apiserver calls it, the write passes.
        let mut refused = None;
        for _ in 0..60 {
            operator.check_running()?;
            let outcome = env.kubectl_run(&ns, &["create", "--dry-run=server", "-f", "-"], Some(&unlisted))?;
            if !outcome.success {
                refused = Some(outcome);
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let refused = refused.ok_or_else(|| anyhow::anyhow!("an unlisted Prometheus was admitted for 30 s"))?;
        ensure!(
            !refused.success
                && refused.stderr.contains("spec.autoscaling.keda.prometheusAddress")
                && refused.stderr.contains("--allowed-prometheus"),
            "an unlisted Prometheus was not refused naming the field and the flag: {}",
            refused.stderr
        );
        let listed = env.kubectl_run(&ns, &["create", "--dry-run=server", "-f", "-"], Some(&indexer(&format!("{LISTED}/"))))?;
        ensure!(listed.success, "the listed Prometheus was refused: {}", listed.stderr);

        create_clair(&client, &ns, "clair", external_spec()).await?;
        let clair = wait_clair(&client, &ns, "clair", "DatabaseReady=False, the network refused", |c: &Clair| {
            condition(c, "DatabaseReady")
                .is_some_and(|d| d.status == "False" && d.reason == "DatabaseMisconfigured")
        })
        .await?;
        let message = &condition(&clair, "DatabaseReady").map(|c| c.message.clone()).unwrap_or_default();
        ensure!(message.contains("--database-networks"), "the condition names the flag: {message}");
        let dialled = listener.accept();
        ensure!(
            dialled.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "a check dialled loopback, which the operator refuses by default: {dialled:?}"
        );
        operator.check_running()?;
        println!("| platform list | refused with |\n|---|---|\n| --allowed-prometheus | {} |\n| loopback database | {message} |",
            refused.stderr.lines().last().unwrap_or_default());
        anyhow::Ok(())
    }
    .await;
    drop(operator);
    crate::operator::remove_webhook_configurations(&client).await?;
    result
}
