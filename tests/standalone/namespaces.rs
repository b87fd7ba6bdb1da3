//! `--namespaces` with tens of namespaces (issue 31): each namespace gets its own set of
//! controllers and some forty watches, each an HTTP/2 stream for as long as it runs. On one
//! connection, three namespaces already stalled every request: the Lease renewal did not
//! answer in time, the leader stood down, and no Clair was reconciled. The operator now
//! spreads its requests over connections (`apiclient::Spread`): with twenty namespaces the
//! Lease stays renewed and a Clair in each becomes Available.

use std::time::Duration;

use anyhow::{Context, ensure};
use clair_operator::api::Phase;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use crate::support::TestEnv;
use crate::support::clair::{create_clair, external_inputs, external_spec, phase_is, wait_clair};

const NAMESPACES: usize = 20;
const OVERLAY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/namespaced");

pub async fn tens_of_namespaces_keep_the_lease_renewed_and_every_clair_is_served(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    crate::operator::install_namespaced(env)?;
    let mut namespaces = Vec::new();
    for i in 0..NAMESPACES {
        let ns = env.namespace(&format!("many-{i}")).await?;
        env.kubectl_ok(
            &ns,
            &["apply", "-f", &format!("{OVERLAY}/watched-namespace.yaml")],
        )?;
        external_inputs(env, &client, &ns).await?;
        namespaces.push(ns);
    }
    let list = namespaces.join(",");
    let mut operator = crate::operator::start(
        env,
        "operator-many",
        &["--namespaces", &list, "--no-webhook"],
    )?;
    let result = async {
        for ns in &namespaces {
            create_clair(&client, ns, "clair", external_spec()).await?;
        }
        let leases: Api<Lease> = Api::namespaced(client.clone(), "clair-operator");
        let renewed = |lease: &Lease| {
            lease
                .spec
                .as_ref()
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0)
        };
        // Renewed at every look for half a minute, by this operator.
        let mut last = None;
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let lease = leases.get("clair-operator").await?;
            let now = renewed(&lease).context("a renewed Lease")?;
            ensure!(
                last.is_none_or(|before| now > before),
                "the Lease was not renewed in 5 s ({last:?}, then {now:?})"
            );
            ensure!(
                lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                    == Some("operator-many"),
                "the operator lost its Lease: {:?}",
                lease.spec
            );
            last = Some(now);
        }
        ensure!(
            !operator.log().contains("the lease renewal did not answer in time"),
            "a Lease renewal waited past its deadline"
        );
        operator.check_running()?;
        for ns in &namespaces {
            wait_clair(&client, ns, "clair", &format!("the Clair in {ns} Available"), phase_is(Phase::Available)).await?;
        }
        println!(
            "{NAMESPACES} namespaces: the Lease renewed throughout, every Clair Available, {} connections to the apiserver",
            operator.connections_to(env.plane.api_port())?
        );
        Ok(())
    }
    .await;
    let log = operator.log();
    let connections = operator.connections_to(env.plane.api_port()).unwrap_or(0);
    result.map_err(|e| {
        let first = namespaces.first().cloned().unwrap_or_default();
        let tail: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&first) || l.contains("WARN") || l.contains("ERROR"))
            .collect();
        anyhow::anyhow!(
            "{e:#}\n{connections} connections to the apiserver; operator log (tail):\n{}",
            tail[tail.len().saturating_sub(40)..].join("\n")
        )
    })
}
