//! The operator watches other people's ConfigMaps and Secrets as metadata only: 2,000
//! unrelated Secrets of 50 KiB in other namespaces (100 MiB) cost it their names, not their
//! data: the bytes the apiserver sends for its Secret lists and its peak memory stay flat.

use std::time::Duration;

use anyhow::{Context, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, PostParams};

use crate::operator::requests_since;
use crate::support::{TestEnv, eventually};

const SECRETS: usize = 2_000;
const SECRET_BYTES: usize = 50 * 1024;
const NAMESPACES: usize = 4;
const MIB: f64 = 1024.0 * 1024.0;

pub async fn unrelated_secrets_cost_their_metadata_only(env: &TestEnv) -> anyhow::Result<()> {
    let client = env.client().await?;
    // Cluster-wide, as `deploy/base` installs it.
    crate::operator::install(env, "base")?;

    // The operator on an almost empty cluster, for comparison.
    let (baseline_rss, _) = run_until_synced(env, "operator-baseline").await?;

    // Other tenants' Secrets, nothing to do with Clair.
    let mut namespaces = Vec::new();
    for i in 0..NAMESPACES {
        namespaces.push(env.namespace(&format!("unrelated-{i}")).await?);
    }
    let value = "x".repeat(SECRET_BYTES);
    futures::stream::iter(0..SECRETS)
        .map(|i| {
            let api: Api<Secret> = Api::namespaced(client.clone(), &namespaces[i % NAMESPACES]);
            let secret: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("unrelated-{i}")},
                "stringData": {"blob": value},
            }))
            .expect("a Secret");
            async move { api.create(&PostParams::default(), &secret).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .context("create the unrelated Secrets")?;

    let before = secret_list_bytes(env)?;
    let (loaded_rss, requests) = run_until_synced(env, "operator-loaded").await?;
    let listed = secret_list_bytes(env)? - before;
    let data = (SECRETS * SECRET_BYTES) as f64;
    println!(
        "| unrelated Secrets | data | bytes of the operator's Secret lists | its Secret lists | peak RSS |\n\
         |---|---|---|---|---|\n\
         | 0 | 0 MiB | - | - | {:.1} MiB |\n\
         | {SECRETS} | {:.1} MiB | {:.2} MiB | {requests} | {:.1} MiB |",
        baseline_rss as f64 / MIB,
        data / MIB,
        listed / MIB,
        loaded_rss as f64 / MIB,
    );
    // Full objects would be every Secret once per controller that lists them: 4 × 100 MiB.
    ensure!(
        listed < data / 10.0,
        "the operator's Secret lists took {:.1} MiB for {:.1} MiB of unrelated Secrets: it \
         lists full objects, not their metadata",
        listed / MIB,
        data / MIB
    );
    ensure!(
        (loaded_rss as f64) < baseline_rss as f64 + 25.0 * MIB,
        "the operator's peak memory grew from {:.1} MiB to {:.1} MiB with {SECRETS} unrelated \
         Secrets",
        baseline_rss as f64 / MIB,
        loaded_rss as f64 / MIB
    );

    for ns in &namespaces {
        Api::<Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await?;
    }
    Ok(())
}

/// Starts a cluster-wide operator (no webhook), waits until all four controllers have listed
/// the Secrets and a few seconds more, and returns its peak memory and how many Secret lists
/// it made.
async fn run_until_synced(env: &TestEnv, name: &str) -> anyhow::Result<(u64, usize)> {
    let mut operator = crate::operator::start(env, name, &["--no-webhook"])?;
    let started = operator.started;
    let secret_lists = || -> anyhow::Result<usize> {
        Ok(requests_since(env, started)?
            .iter()
            .filter(|e| e["verb"] == "list" && e["objectRef"]["resource"] == "secrets")
            .filter(|e| e["stage"] == "ResponseComplete")
            .count())
    };
    eventually(
        Duration::from_secs(120),
        "the operator's Secret lists",
        || {
            let done = secret_lists().map(|n| n >= 4);
            async move { done }
        },
    )
    .await
    .with_context(|| format!("{name}'s log:\n{}", operator.log()))?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    operator.check_running()?;
    Ok((operator.peak_rss()?, secret_lists()?))
}

/// The bytes the apiserver has sent in answer to Secret lists since it started.
fn secret_list_bytes(env: &TestEnv) -> anyhow::Result<f64> {
    let metrics = env.kubectl_ok("default", &["get", "--raw", "/metrics"])?;
    Ok(metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_response_sizes_sum{"))
        .filter(|l| l.contains("resource=\"secrets\"") && l.contains("verb=\"LIST\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}
