//! A `Clair` whose managed database runs on CloudNativePG (its operator built from the Go
//! module proxy, beside the node; its instances from an operand image of Debian's
//! PostgreSQL): two instances with a synchronous standby, the services connected to the
//! read-write Service. The primary's pod is deleted: CloudNativePG promotes the standby, the
//! operator rolls the services onto it by itself, and a report indexed before is served
//! again. The connection budget is measured against the `max_connections` the primary
//! reports.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clair_operator::api::{Clair, Phase};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, DynamicObject};
use serde_json::json;

use crate::fixtures::{FixtureServer, VULNERABLE_VERSION, alpine_layer, request_within};
use crate::managed::local_volume;
use crate::scan::{
    START, airgapped_dropin, dump_on_error, index, quay_token, restricted_namespace, service_url,
};
use crate::support::clair::{condition, create_clair, patch_spec, phase_is, wait_clair_within};
use crate::support::{TestEnv, eventually};

/// CloudNativePG's bootstrap: an initdb Job, the primary, a join Job cloning it, the standby.
const CLUSTER_START: Duration = Duration::from_secs(600);
const MAX_CONNECTIONS: u32 = 40;

/// Local volumes for the instances' claims (`clair-database-N`), owned by CloudNativePG's
/// postgres user (26). One spare, for an instance CloudNativePG makes anew.
async fn local_volumes(env: &TestEnv, ns: &str) -> anyhow::Result<()> {
    for instance in 1..=3 {
        let claim = format!("clair-database-{instance}");
        local_volume(env, ns, &format!("{ns}-{instance}"), &claim, 26).await?;
    }
    Ok(())
}

fn clusters(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = clair_operator::render::cloudnative_pg::cluster_resource();
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// The Cluster's current primary, once it serves (as the operator reads it).
async fn serving_primary(client: &kube::Client, ns: &str) -> anyhow::Result<Option<String>> {
    let cluster = clusters(client, ns).get("clair-database").await?;
    Ok(clair_operator::render::cloudnative_pg::serving_primary(
        &cluster.data,
    ))
}

pub async fn a_clair_on_cloudnative_pg_fails_over_and_serves_what_it_indexed(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let ns = restricted_namespace(env, "cnpg").await?;
    let outcome = fails_over(env, &ns).await;
    // Its pods' CPU requests are the node's to give back: the tests beside and after it
    // schedule theirs on the same two cores (the Clusters have no owner to go with the Clair).
    let namespaces: Api<Namespace> = Api::all(env.client().await?);
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    outcome
}

async fn fails_over(env: &TestEnv, ns: &str) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = ns.to_string();
    local_volumes(env, &ns).await?;
    let layer = alpine_layer(VULNERABLE_VERSION)?;
    let server = FixtureServer::for_scans(&[("vulnerable", &layer)]).await?;
    airgapped_dropin(&client, &ns, &server).await?;
    create_clair(
        &client,
        &ns,
        "clair",
        json!({
            "database": {"managed": {
                "engine": "CloudNativePG",
                "instances": 2,
                "image": clair_testenv::cloudnative_pg_operand_image()?,
                "maxConnections": MAX_CONNECTIONS,
                "storage": {"size": "1Gi"},
                // Two instances and their bootstrap Jobs on a node the other tests share.
                "resources": {"requests": {"cpu": "20m", "memory": "128Mi"}},
            }},
            "dropins": [{"configMap": {"name": "delivery", "key": "notifier.yaml"}}],
            // No updater runs in the matcher (it would reach for the Internet).
            "updaters": {"mode": "CronJob", "schedule": "0 */6 * * *"},
        }),
    )
    .await?;
    let available = |what: &'static str| {
        wait_clair_within(
            CLUSTER_START,
            &client,
            &ns,
            "clair",
            what,
            phase_is(Phase::Available),
        )
    };
    let clair = dump_on_error(
        env,
        &ns,
        available("clair Available on a two-instance CloudNativePG cluster").await,
    )?;

    // Checked for real: each role logged in to its database on the primary, which reported
    // its max_connections (3 of them kept for superusers).
    let database = condition(&clair, "DatabaseReady").context("no DatabaseReady")?;
    ensure!(
        database.reason == "DatabaseReachable",
        "DatabaseReady: {database:?}"
    );
    let fit = condition(&clair, "ConnectionsFit").context("no ConnectionsFit")?;
    let usable = MAX_CONNECTIONS - 3;
    ensure!(
        fit.status == "True" && fit.message.contains(&format!("of {usable} usable")),
        "the budget is measured against the primary's max_connections: {fit:?}"
    );

    // Something to lose: an index report, committed on the standby too.
    let token = quay_token(&client, &ns).await?;
    let indexer = service_url(&client, &ns, "clair-indexer").await?;
    let report = index(&client, &ns, &token, &server.layer("vulnerable")?).await?;
    let manifest = report["manifest_hash"]
        .as_str()
        .context("no manifest hash")?
        .to_string();

    // The primary's pod is deleted; CloudNativePG promotes the standby.
    let primary = serving_primary(&client, &ns)
        .await?
        .context("no serving primary while the Clair is Available")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.delete(&primary, &DeleteParams::default()).await?;
    let deleted_at = Instant::now();
    let promoted = eventually(START, "CloudNativePG to promote the standby", || {
        let (client, ns, primary) = (client.clone(), ns.clone(), primary.clone());
        async move {
            Ok(serving_primary(&client, &ns)
                .await?
                .is_some_and(|p| p != primary))
        }
    })
    .await;
    dump_on_error(env, &ns, promoted)?;
    println!(
        "CloudNativePG promoted the standby {:.1} s after the primary's pod was deleted",
        deleted_at.elapsed().as_secs_f64()
    );

    // Nobody restarts anything: the report indexed before is served again from the new
    // primary.
    let report_url = format!("{indexer}/indexer/api/v1/index_report/{manifest}");
    let answer = std::sync::Mutex::new((0, String::new()));
    let served = eventually(START, "the index report served again", || {
        let (report_url, token, answer) = (report_url.clone(), token.clone(), &answer);
        async move {
            // Briefly: a request that reaches a pod still holding dead connections hangs.
            let within = Duration::from_secs(5);
            let Ok((status, text)) =
                request_within(within, "GET", report_url, Some(token), None).await
            else {
                return Ok(false);
            };
            let served = status == 200;
            *answer.lock().expect("lock") = (status, text);
            Ok(served)
        }
    })
    .await
    .with_context(|| format!("the last answer: {:?}", answer.lock().map(|a| a.0)));
    dump_on_error(env, &ns, served)?;
    println!(
        "the index report was served again {:.1} s after the primary's pod was deleted",
        deleted_at.elapsed().as_secs_f64()
    );
    let (_, text) = answer.into_inner().expect("lock");
    let kept: serde_json::Value = serde_json::from_str(&text)?;
    ensure!(
        kept["state"] == "IndexFinished" && kept["manifest_hash"] == manifest.as_str(),
        "the report indexed before the failover: {kept}"
    );
    dump_on_error(
        env,
        &ns,
        available("clair Available after the failover").await,
    )?;

    // More indexers than the cluster's connections can serve: refused, both numbers named.
    patch_spec(
        &client,
        &ns,
        "clair",
        json!({"indexer": {"autoscaling": {"minReplicas": 1, "maxReplicas": 20}}}),
    )
    .await?;
    let clairs: Api<Clair> = Api::namespaced(client.clone(), &ns);
    let refused = eventually(Duration::from_secs(60), "ConnectionsFit False", || {
        let clairs = clairs.clone();
        async move {
            let clair = clairs.get("clair").await?;
            Ok(condition(&clair, "ConnectionsFit").is_some_and(|c| {
                c.status == "False"
                    && c.reason == "ConnectionsExceedLimit"
                    && c.message.contains(&format!("of {usable} usable"))
                    && c.message.contains("×20")
            }))
        }
    })
    .await;
    let clair = clairs.get("clair").await?;
    refused.with_context(|| format!("{:?}", condition(&clair, "ConnectionsFit")))?;
    Ok(())
}
