//! Traces on real parts: a `Clair` whose `tracing` names the harness's collector (Jaeger's
//! all-in-one, listening on the node's address) indexes a layer, and the collector's query
//! API then holds the indexer's span of that request and the operator's spans of its
//! reconciles of that `Clair` (the harness points the in-cluster operator at the same
//! collector with `OTEL_EXPORTER_OTLP_ENDPOINT`).

use std::time::Duration;

use anyhow::{Context, ensure};
use clair_operator::api::Indexer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};

use crate::fixtures::{FixtureServer, VULNERABLE_VERSION, alpine_layer, request};
use crate::scan::{
    START, airgapped_dropin, index, quay_token, restricted_namespace, until_available,
};
use crate::support::clair::{apply_json, create_clair, external_databases, external_spec};
use crate::support::{TestEnv, eventually};

/// Spans reach Jaeger within its batch timeouts and Clair's (5 s each).
const SPANS_ARRIVE: Duration = Duration::from_secs(90);

pub async fn a_clairs_spans_and_the_operators_reach_the_collector(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let collector = env
        .plane
        .addons()
        .context("the real node runs no trace collector")?
        .collector()
        .clone();
    let ns = restricted_namespace(env, "traces").await?;
    external_databases(env, &client, &ns).await?;
    apply_json::<Secret>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "trace-headers"},
            "stringData": {"X-Scope-OrgID": "tenant-a"}}),
    )
    .await?;
    let layer = alpine_layer(VULNERABLE_VERSION)?;
    let server = FixtureServer::for_scans(&[("layer", &layer)]).await?;
    airgapped_dropin(&client, &ns, &server).await?;
    let mut spec = external_spec();
    // No updater runs in the matcher (it would reach for the Internet).
    spec["updaters"] = json!({"mode": "CronJob", "schedule": "0 */6 * * *"});
    spec["tracing"] = json!({
        "endpoint": collector.otlp_http,
        "samplingRatio": "1",
        "headersSecret": "trace-headers",
    });
    create_clair(&client, &ns, "clair", spec).await?;
    until_available(env, &client, &ns, START, "a traced clair Available").await?;

    // The indexer's pods run the trace section, with the Secret's header.
    let trace = running_config(&client, &ns, "clair-indexer").await?["trace"].clone();
    ensure!(
        trace["name"] == "otlp"
            && trace["probability"] == 1.0
            && trace["otlp"]["http"]["insecure"] == true
            && trace["otlp"]["http"]["headers"]["x-scope-orgid"] == "tenant-a",
        "the indexer's trace section: {trace}"
    );

    let token = quay_token(&client, &ns).await?;
    index(&client, &ns, &token, &server.layer("layer")?).await?;
    eventually(
        SPANS_ARRIVE,
        "the indexer's span of the index request in Jaeger",
        || {
            let query = collector.query.clone();
            async move {
                let spans = spans(&query, "clairv4/indexer", None).await?;
                Ok(spans.iter().any(|span| {
                    tag(span, "http.request.method").or_else(|| tag(span, "http.method"))
                        == Some("POST")
                        && span["tags"].as_array().is_some_and(|tags| {
                            tags.iter().any(|t| {
                                t["value"]
                                    .as_str()
                                    .is_some_and(|v| v.contains("index_report"))
                            })
                        })
                }))
            }
        },
    )
    .await?;
    eventually(
        SPANS_ARRIVE,
        "the operator's reconcile spans of this Clair",
        || {
            let (query, ns) = (collector.query.clone(), ns.clone());
            async move {
                let tags = json!({"namespace": ns, "name": "clair", "kind": "Clair"});
                let spans =
                    spans(&query, clair_operator::telemetry::SERVICE_NAME, Some(&tags)).await?;
                Ok(spans
                    .iter()
                    .any(|span| span["operationName"] == "reconcile"))
            }
        },
    )
    .await?;

    // An edit of the headers Secret is a new config: the indexer's hash moves.
    let before = config_hash(&client, &ns).await?;
    apply_json::<Secret>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "trace-headers"},
            "stringData": {"X-Scope-OrgID": "tenant-b"}}),
    )
    .await?;
    eventually(
        Duration::from_secs(60),
        "a new config hash after the headers' edit",
        || {
            let (client, ns, before) = (client.clone(), ns.clone(), before.clone());
            async move { Ok(config_hash(&client, &ns).await? != before) }
        },
    )
    .await
}

/// The config the Deployment `name`'s pods run: its snapshot Secret's `config.json`.
async fn running_config(client: &Client, ns: &str, name: &str) -> anyhow::Result<Value> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let secret = deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.volumes)
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == "config")
        .and_then(|v| v.secret?.secret_name)
        .context("the Deployment mounts no config Secret")?;
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(&secret)
        .await?;
    let bytes = secret
        .data
        .and_then(|d| d.get("config.json").cloned())
        .context("the snapshot has no config.json")?;
    Ok(serde_json::from_slice(&bytes.0)?)
}

async fn config_hash(client: &Client, ns: &str) -> anyhow::Result<Option<String>> {
    let indexer = Api::<Indexer>::namespaced(client.clone(), ns)
        .get("clair-indexer")
        .await?;
    Ok(indexer.status.and_then(|s| s.config_hash))
}

/// The spans Jaeger's query API holds for `service`, of traces with a span carrying every
/// one of `tags` (a JSON object), if given.
async fn spans(query: &str, service: &str, tags: Option<&Value>) -> anyhow::Result<Vec<Value>> {
    let query_string = {
        let mut params = form_urlencoded::Serializer::new(String::new());
        params
            .append_pair("service", service)
            .append_pair("limit", "200");
        if let Some(tags) = tags {
            params.append_pair("tags", &tags.to_string());
        }
        params.finish()
    };
    let (status, text) = request(
        "GET",
        format!("{query}/api/traces?{query_string}"),
        None,
        None,
    )
    .await?;
    ensure!(
        status == 200,
        "Jaeger's /api/traces answered {status}: {text}"
    );
    let traces: Value = serde_json::from_str(&text)?;
    Ok(traces["data"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|trace| trace["spans"].as_array().cloned().unwrap_or_default())
        .collect())
}

/// The string value of the span's tag `key`.
fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["tags"].as_array()?.iter().find(|t| t["key"] == key)?["value"].as_str()
}
