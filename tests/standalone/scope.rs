//! `--namespaces`: an operator given RoleBindings in one namespace only (`deploy/namespaced`)
//! reconciles there, leaves other namespaces alone, never asks for what its roles do not
//! grant, and its webhooks are called for its namespaces only.

use std::time::Duration;

use anyhow::{Context, ensure};
use clair_operator::api::{Clair, Indexer, Phase};
use kube::api::{Api, ListParams};

use crate::operator::requests_since;
use crate::support::clair::{create_clair, external_inputs, external_spec, phase_is, wait_clair};
use crate::support::{TestEnv, request_line};

const OVERLAY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/namespaced");

pub async fn an_operator_scoped_to_a_namespace_acts_there_only_with_its_roles(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let watched = env.namespace("scoped-a").await?;
    let other = env.namespace("scoped-c").await?;
    // As the README installs it: the overlay, then a RoleBinding in each watched namespace
    // (and no cluster-wide binding a test before may have left).
    crate::operator::install_namespaced(env)?;
    env.kubectl_ok(
        &watched,
        &["apply", "-f", &format!("{OVERLAY}/watched-namespace.yaml")],
    )?;
    for ns in [&watched, &other] {
        external_inputs(env, &client, ns).await?;
    }

    let args = ["--log-format", "json", "--namespaces", &watched];
    let mut operator = crate::operator::start_with_webhook(env, "operator-scoped", &args)?;
    let result = async {
        create_clair(&client, &watched, "clair", external_spec()).await?;
        create_clair(&client, &other, "clair", external_spec()).await?;
        wait_clair(&client, &watched, "clair", "the watched namespace's Clair Available", phase_is(Phase::Available)).await?;
        operator.check_running()?;

        // The other namespace's Clair: untouched, no status, nothing created for it.
        let theirs = Api::<Clair>::namespaced(client.clone(), &other).get("clair").await?;
        ensure!(theirs.status.is_none(), "the Clair outside the scope got a status: {:?}", theirs.status);
        let indexers = Api::<Indexer>::namespaced(client.clone(), &other)
            .list(&ListParams::default())
            .await?;
        ensure!(indexers.items.is_empty(), "an Indexer was created outside the scope");

        // The webhooks are called in the watched namespace only: an invalid labelled config
        // is refused there and let through elsewhere.
        let invalid = |ns: &str| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  namespace: {ns}\n  labels:\n    clair.projectquay.io/validate-config: \"true\"\n  annotations:\n    clair.projectquay.io/config: config.yaml\ndata:\n  config.yaml: |\n    not_a_clair_key: 1\n"
            )
        };
        let mut refused = false;
        for _ in 0..30 {
            let outcome = env.kubectl_run(&watched, &["apply", "-f", "-"], Some(&invalid(&watched)))?;
            if !outcome.success && outcome.stderr.contains("denied the request") {
                refused = true;
                break;
            }
            ensure!(outcome.success || outcome.stderr.contains("failed calling webhook"), "unexpected kubectl failure: {}", outcome.stderr);
            let _ = env.kubectl_run(&watched, &["delete", "configmap", "bad", "--ignore-not-found"], None)?;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        ensure!(refused, "the scoped webhook did not refuse an invalid config in its namespace");
        let outside = env.kubectl_run(&other, &["apply", "-f", "-"], Some(&invalid(&other)))?;
        ensure!(outside.success, "the scoped webhook was called outside its namespaces: {}", outside.stderr);

        // Every request it made: namespaced ones in the watched namespace or its own, nothing
        // refused, and cluster-wide only what the narrow ClusterRole grants.
        let requests = requests_since(env, operator.started)?;
        ensure!(!requests.is_empty(), "no request of the scoped operator in the audit log");
        let mut problems = Vec::new();
        for entry in &requests {
            let code = entry["responseStatus"]["code"].as_u64().unwrap_or(0);
            let namespace = entry["objectRef"]["namespace"].as_str();
            let resource = entry["objectRef"]["resource"].as_str().unwrap_or_default();
            let line = format!("{} (namespace {namespace:?}, code {code})", request_line(entry));
            if code == 403 {
                problems.push(format!("refused: {line}"));
            }
            match namespace {
                Some(ns) if ns == watched || ns == "clair-operator" => {}
                Some(_) => problems.push(format!("outside the scope: {line}")),
                None if [
                    "customresourcedefinitions",
                    "validatingwebhookconfigurations",
                    "mutatingwebhookconfigurations",
                    "subjectaccessreviews",
                    // Every authenticated user may ask who it is (system:basic-user); the
                    // webhook asks once, to know its own writes.
                    "selfsubjectreviews",
                    "",
                ]
                .contains(&resource) => {}
                None => problems.push(format!("cluster-wide: {line}")),
            }
        }
        ensure!(problems.is_empty(), "the scoped operator overstepped:\n{}", problems.join("\n"));

        // Its log (`--log-format json`): one JSON object a line, no colour codes, and the
        // reconcile span naming the resource and the phase it decided.
        let log = operator.log();
        ensure!(!log.contains('\u{1b}'), "colour codes in the log");
        let mut decided = false;
        for line in log.lines() {
            let entry: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("a log line that is not JSON: {line}"))?;
            let span = &entry["span"];
            decided |= span["name"] == "reconcile"
                && span["kind"] == "Clair"
                && span["namespace"] == watched.as_str()
                && span["phase"].is_string();
        }
        ensure!(decided, "no log line carries the reconcile span with its phase:\n{log}");
        Ok(())
    }
    .await;
    drop(operator);
    // Its webhook configurations would call a port nobody listens on any more.
    crate::operator::remove_webhook_configurations(&client).await?;
    result
}
