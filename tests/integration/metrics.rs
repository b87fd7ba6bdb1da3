//! The operator's `/metrics`, scraped from the running operator: valid OpenMetrics by the
//! Prometheus Python client's parser, clean by `promtool check metrics` in the older text
//! format, and true to the cluster: phase gauges equal the resources' phases, transitions
//! count, and a deleted resource's series go. `/healthz` and `/readyz` answer.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use clair_operator::api::{Clair, Indexer, Phase};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

use crate::support::clair::{
    PASSWORD, apply_json, create_clair, external_inputs, external_spec, phase_is, wait_clair,
};
use crate::support::{TestEnv, dashboards, eventually};

/// One sample as the parser read it.
#[derive(Debug)]
pub struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0";

/// `GET url` as the tests' Prometheus scrapes: with the token of a ServiceAccount bound to
/// deploy/base's `clair-operator-metrics-reader`.
fn get(env: &TestEnv, url: &str, accept: &str) -> anyhow::Result<(u16, String)> {
    Ok(clair_testenv::scrape::get(
        url,
        Some(&env.scraper_token()?),
        accept,
    )?)
}

/// The value of `clair_operator_metrics_scrape_refusals_total{reason}` in `text`.
fn scrape_refusals(text: &str, reason: &str) -> anyhow::Result<f64> {
    let series = format!("clair_operator_metrics_scrape_refusals_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .context(format!("no series {series}"))?
        .trim()
        .parse()
        .context("a counter's value")
}

/// `/metrics` answers only a scraper the apiserver authenticates and authorizes (issue 54
/// point 7): no token or a made-up one gets 401, a ServiceAccount without
/// `clair-operator-metrics-reader` 403, one with it the metrics; plain HTTP gets nothing;
/// each refusal is counted; the health endpoints answer without a token (the kubelet's
/// probes carry none).
pub async fn metrics_are_served_only_to_scrapers_the_apiserver_authorizes(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use clair_testenv::scrape;
    let base = env.operator_metrics_url()?;
    let url = format!("{base}/metrics");
    let before = metrics_text(env)?;
    let (status, body) = scrape::get(&url, None, OPENMETRICS)?;
    ensure!(status == 401, "no token: {status} {body}");
    let (status, body) = scrape::get(&url, Some("made-up.token.value"), OPENMETRICS)?;
    ensure!(status == 401, "a made-up token: {status} {body}");
    let nobody = env.token_of("metrics-nobody", None)?;
    for _ in 0..2 {
        let (status, body) = scrape::get(&url, Some(&nobody), OPENMETRICS)?;
        ensure!(
            status == 403 && body.contains("clair-operator-metrics-reader"),
            "a ServiceAccount without the reader role: {status} {body}"
        );
        ensure!(
            !body.contains("clair_operator_"),
            "a refusal holds metrics: {body}"
        );
    }
    let plain = base.replacen("https://", "http://", 1);
    // The TLS server closes a plain request's connection: an error, or an answer without
    // the metrics.
    let plain_answer = scrape::get(
        &format!("{plain}/metrics"),
        Some(&env.scraper_token()?),
        OPENMETRICS,
    );
    if let Ok((status, body)) = plain_answer {
        ensure!(
            !body.contains("clair_operator_"),
            "plain HTTP got the metrics: {status}"
        );
    }
    let after = metrics_text(env)?;
    for (reason, expected) in [("unauthenticated", 2.0), ("forbidden", 2.0)] {
        let counted = scrape_refusals(&after, reason)? - scrape_refusals(&before, reason)?;
        ensure!(
            counted == expected,
            "{counted} {reason} refusals counted, where {expected} were made"
        );
    }
    ensure!(
        scrape_refusals(&after, "unavailable")? == 0.0,
        "a scrape found the reviews unavailable"
    );
    for path in ["/healthz", "/readyz"] {
        let (status, body) = scrape::get(&format!("{base}{path}"), None, "*/*")?;
        ensure!(status == 200, "{path} without a token: {status} {body}");
    }
    Ok(())
}

/// The operator's metrics as Prometheus reads them (OpenMetrics text).
pub fn metrics_text(env: &TestEnv) -> anyhow::Result<String> {
    let (status, text) = get(
        env,
        &format!("{}/metrics", env.operator_metrics_url()?),
        OPENMETRICS,
    )?;
    anyhow::ensure!(status == 200, "GET /metrics: {status}");
    Ok(text)
}

/// Scrapes OpenMetrics and parses it with the Prometheus project's parser: its samples.
pub fn scrape(env: &TestEnv) -> anyhow::Result<Vec<Sample>> {
    Ok(scrape_families(env)?
        .into_iter()
        .flat_map(|(_, _, samples)| samples)
        .collect())
}

/// Every family as the parser read it: name, type and samples.
fn scrape_families(env: &TestEnv) -> anyhow::Result<Vec<(String, String, Vec<Sample>)>> {
    let url = format!("{}/metrics", env.operator_metrics_url()?);
    let (status, text) = get(env, &url, OPENMETRICS)?;
    ensure!(status == 200, "GET /metrics: {status}: {text}");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/openmetrics/parse.py");
    let output = run_with_input(Command::new("/usr/bin/python3").arg(script), &text)
        .context("the OpenMetrics parser (Debian package python3-prometheus-client; scripts/install-deps installs it)")?;
    ensure!(
        output.status.success(),
        "the exposition is not valid OpenMetrics: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut families = Vec::new();
    for line in String::from_utf8(output.stdout)?.lines() {
        let family: Value = serde_json::from_str(line)?;
        let mut samples = Vec::new();
        for sample in family["samples"].as_array().into_iter().flatten() {
            samples.push(Sample {
                name: sample["name"].as_str().unwrap_or_default().to_string(),
                labels: serde_json::from_value(sample["labels"].clone())?,
                value: sample["value"].as_f64().unwrap_or(f64::NAN),
            });
        }
        let text = |key: &str| family[key].as_str().unwrap_or_default().to_string();
        families.push((text("family"), text("type"), samples));
    }
    Ok(families)
}

fn run_with_input(command: &mut Command, input: &str) -> anyhow::Result<std::process::Output> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(input.as_bytes())?;
    Ok(child.wait_with_output()?)
}

/// The samples named `name` whose labels include all of `labels`.
pub fn find<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect()
}

pub fn total(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    find(samples, name, labels).iter().map(|s| s.value).sum()
}

/// The phase the gauge reports for one resource, failing when it reports none or several.
fn gauge_phase(samples: &[Sample], kind: &str, ns: &str, name: &str) -> anyhow::Result<String> {
    let found = find(
        samples,
        "clair_operator_resource_phase",
        &[("kind", kind), ("namespace", ns), ("name", name)],
    );
    match found.as_slice() {
        [one] if one.value == 1.0 => Ok(one.labels["phase"].clone()),
        other => bail!("{kind} {ns}/{name}: phase series {other:?}"),
    }
}

pub async fn metrics_match_the_cluster_and_pass_promtool(env: &TestEnv) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("metrics").await?;
    external_inputs(env, &client, &ns).await?;
    let available = [("kind", "Clair"), ("to", "Available")];
    let before = total(
        &scrape(env)?,
        "clair_operator_phase_transitions_total",
        &available,
    );
    create_clair(&client, &ns, "clair", external_spec()).await?;
    let clair = wait_clair(
        &client,
        &ns,
        "clair",
        "Available",
        phase_is(Phase::Available),
    )
    .await?;

    // Phases, replicas and counts agree with the cluster (the gauges are read from the
    // operator's caches, which may lag a status write by a moment).
    let indexer = Api::<Indexer>::namespaced(client.clone(), &ns)
        .get("clair-indexer")
        .await?;
    eventually(
        Duration::from_secs(30),
        "the metrics to match the cluster",
        || async {
            let samples = scrape(env)?;
            ensure!(gauge_phase(&samples, "Clair", &ns, "clair")? == "Available");
            let status = indexer.status.clone().unwrap_or_default();
            let phase = status.phase.context("indexer phase")?;
            ensure!(gauge_phase(&samples, "Indexer", &ns, "clair-indexer")? == phase.as_str());
            let ready = total(
                &samples,
                "clair_operator_service_replicas",
                &[("kind", "Indexer"), ("namespace", &ns), ("state", "ready")],
            );
            ensure!(
                ready == f64::from(status.ready_replicas),
                "ready replicas {ready} vs {status:?}"
            );
            let age = find(
                &samples,
                "clair_operator_resource_phase_age_seconds",
                &[("namespace", &ns), ("name", "clair")],
            );
            ensure!(age.len() == 1 && age[0].value >= 0.0, "phase age: {age:?}");
            ensure!(
                total(
                    &samples,
                    "clair_operator_phase_transitions_total",
                    &available
                ) >= before + 1.0,
                "no transition to Available counted"
            );
            for (name, labels) in [
                (
                    "clair_operator_reconciles_total",
                    vec![("kind", "Clair"), ("result", "success")],
                ),
                (
                    "clair_operator_reconcile_duration_seconds_count",
                    vec![("kind", "Indexer")],
                ),
                (
                    "clair_operator_applies_total",
                    vec![("kind", "Deployment"), ("outcome", "created")],
                ),
                (
                    "clair_operator_api_requests_total",
                    vec![
                        ("verb", "patch"),
                        ("resource", "clairs/status"),
                        ("code", "200"),
                    ],
                ),
                (
                    "clair_operator_api_requests_total",
                    vec![("verb", "watch"), ("resource", "secrets")],
                ),
                (
                    "clair_operator_database_probe_duration_seconds_count",
                    vec![("result", "ok")],
                ),
                (
                    "clair_operator_webhook_admissions_total",
                    vec![("webhook", "resources"), ("verdict", "allowed")],
                ),
                (
                    "clair_operator_database_connections",
                    vec![("namespace", ns.as_str()), ("state", "demand")],
                ),
                (
                    "clair_operator_database_connections",
                    vec![("namespace", ns.as_str()), ("state", "limit")],
                ),
            ] {
                ensure!(
                    total(&samples, name, &labels) >= 1.0,
                    "{name}{labels:?} is not counted"
                );
            }
            Ok(true)
        },
    )
    .await?;

    dashboard_queries_exported_metrics(env)?;

    // The older text format passes promtool's checks.
    let url = env.operator_metrics_url()?;
    let (status, text) = get(env, &format!("{url}/metrics"), "text/plain")?;
    ensure!(status == 200, "GET /metrics as text: {status}");
    let promtool = run_with_input(Command::new("promtool").args(["check", "metrics"]), &text)
        .context("promtool (Debian package prometheus; scripts/install-deps installs it)")?;
    ensure!(
        promtool.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&promtool.stdout),
        String::from_utf8_lossy(&promtool.stderr)
    );
    // The kubelet probes them with no token.
    for path in ["/healthz", "/readyz"] {
        eventually(Duration::from_secs(30), path, || async {
            let (status, body) = clair_testenv::scrape::get(&format!("{url}{path}"), None, "*/*")?;
            ensure!(status == 200, "{path}: {status} {body}");
            Ok(true)
        })
        .await?;
    }

    // A forced transition: the database refuses the indexer's password.
    let uid = clair.metadata.uid.clone().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let strings = secrets.get("databases").await?;
    let indexer_string = crate::support::clair::secret_text(&strings, "indexer")?;
    apply_json::<Secret>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "databases"},
               "stringData": {"indexer": indexer_string.replace(PASSWORD, "not-the-password")}}),
    )
    .await?;
    let moved = wait_clair(&client, &ns, "clair", "a phase other than Available", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.phase)
            .is_some_and(|p| p != Phase::Available)
    })
    .await?;
    let phase = moved.status.and_then(|s| s.phase).context("phase")?;
    eventually(
        Duration::from_secs(30),
        "the gauge to follow the transition",
        || async {
            let samples = scrape(env)?;
            Ok(
                gauge_phase(&samples, "Clair", &ns, "clair")? == phase.as_str()
                    && total(
                        &samples,
                        "clair_operator_phase_transitions_total",
                        &[
                            ("kind", "Clair"),
                            ("from", "Available"),
                            ("to", phase.as_str()),
                        ],
                    ) >= 1.0,
            )
        },
    )
    .await?;

    // Deleted: its series go with it (and with its services, collected by their owner).
    Api::<Clair>::namespaced(client.clone(), &ns)
        .delete("clair", &DeleteParams::default())
        .await?;
    eventually(
        Duration::from_secs(60),
        "the deleted resources' series gone",
        || async {
            let samples = scrape(env)?;
            let left = find(
                &samples,
                "clair_operator_resource_phase",
                &[("namespace", &ns)],
            )
            .len()
                + find(
                    &samples,
                    "clair_operator_resource_phase_age_seconds",
                    &[("namespace", &ns)],
                )
                .len()
                + find(
                    &samples,
                    "clair_operator_service_replicas",
                    &[("namespace", &ns)],
                )
                .len();
            Ok(left == 0)
        },
    )
    .await
    .with_context(|| format!("Clair {uid}"))?;
    Ok(())
}

const MONITORING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/monitoring");

/// `deploy/monitoring`: the alerts pass promtool's checks and unit tests (one per alert,
/// firing and not), the PrometheusRule holds the same groups as the rules file, and every
/// alert links a runbook section that exists.
pub async fn alerts_hold_to_promtool_and_the_runbooks(_env: &TestEnv) -> anyhow::Result<()> {
    for args in [
        vec!["check", "rules", "alerts.rules.yaml"],
        vec!["test", "rules", "alerts.test.yaml"],
    ] {
        let output = Command::new("promtool")
            .args(&args)
            .current_dir(MONITORING)
            .output()
            .context("promtool (Debian package prometheus; scripts/install-deps installs it)")?;
        ensure!(
            output.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    let read = |file: &str| -> anyhow::Result<Value> {
        let text = std::fs::read_to_string(format!("{MONITORING}/{file}"))?;
        serde_saphyr::from_str(&text).with_context(|| file.to_string())
    };
    let rules = read("alerts.rules.yaml")?;
    let resource = read("prometheusrule.yaml")?;
    ensure!(
        resource["spec"]["groups"] == rules["groups"],
        "prometheusrule.yaml's groups differ from alerts.rules.yaml's: keep them the same"
    );
    let tests = std::fs::read_to_string(format!("{MONITORING}/alerts.test.yaml"))?;
    let alerts: Vec<&Value> = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter(|r| r["alert"].is_string())
        .collect();
    ensure!(!alerts.is_empty(), "no alerts in alerts.rules.yaml");
    for alert in alerts {
        let name = alert["alert"].as_str().unwrap_or_default();
        ensure!(
            tests.contains(&format!("alertname: {name}\n")),
            "alert {name} has no test in alerts.test.yaml"
        );
        let link = alert["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_default();
        let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
        let page = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")))
            .with_context(|| format!("alert {name}: runbook {link:?}"))?;
        if !anchor.is_empty() {
            let slugs: Vec<String> = page
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|heading| slug(heading.trim_start_matches('#')))
                .collect();
            ensure!(
                slugs.iter().any(|s| s == anchor),
                "alert {name}: {path} has no heading for #{anchor} (it has {slugs:?})"
            );
        }
    }

    Ok(())
}

/// Every query of the dashboard names a metric the operator exports: checked against a
/// scrape of an operator that has done some work (a family appears once it has a series).
fn dashboard_queries_exported_metrics(env: &TestEnv) -> anyhow::Result<()> {
    // Every family of the scrape, with its sample suffixes.
    let mut exported = std::collections::BTreeSet::new();
    for (family, kind, samples) in scrape_families(env)? {
        let suffixes: &[&str] = match kind.as_str() {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        for suffix in suffixes {
            exported.insert(format!("{family}{suffix}"));
        }
        exported.extend(samples.into_iter().map(|s| s.name));
    }
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(format!(
        "{MONITORING}/dashboard.json"
    ))?)
    .context("dashboard.json is not JSON")?;
    let queried = dashboards::queries(&dashboard);
    ensure!(!queried.is_empty(), "the dashboard has no queries");
    for expr in &queried {
        for name in dashboards::metric_names(expr, &["clair_operator_"]) {
            ensure!(
                exported.contains(&name),
                "the dashboard queries {name}, which the operator does not export ({expr})"
            );
        }
    }
    Ok(())
}

/// GitHub's anchor of a Markdown heading: lowercase, spaces to `-`, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
