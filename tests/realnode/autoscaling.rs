//! Autoscaling on real signals: the metrics pipeline beside the real node (metrics-server,
//! Prometheus, KEDA) feeds the autoscalers a `Clair` asks for, and a load step from the load
//! generator (`clair_testenv::load`: layers made here, PSK-signed index requests through the
//! indexer's Service) makes them scale. Behaviour is asserted, not timings: the figures are
//! the load study's (`scripts/bench load`).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clair_testenv::load::{self, Class, LayerKind, LayerServer, Sample, Step, Target};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::fixtures::FixtureServer;
use crate::scan::{START, airgapped_dropin, service_url, until_available};
use crate::support::clair::{
    create_clair, external_databases, external_spec, patch_spec, secret_text,
};
use crate::support::{TestEnv, dashboards, eventually};

const INDEXER: &str = "clair-indexer";

/// Small pods, so that scaling out adds capacity on two cores (three fit beside the
/// control plane): the study's figures say how they carry over to bigger ones.
pub(crate) fn small_pod() -> Value {
    json!({"resources": {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"cpu": "500m", "memory": "1Gi"},
    }})
}

/// Scale-in 30 s after the load ends, scale-out at once: short enough for a test.
fn quick_behavior() -> Value {
    json!({
        "scaleUp": {"stabilizationWindowSeconds": 0},
        "scaleDown": {"stabilizationWindowSeconds": 30, "policies": [{"type": "Pods", "value": 1, "periodSeconds": 15}]},
    })
}

/// A Clair in `ns` whose indexer has `autoscaling`, Available; its fixture server.
async fn autoscaled_clair(
    env: &TestEnv,
    ns: &str,
    autoscaling: Value,
) -> anyhow::Result<(Client, FixtureServer)> {
    let client = env.client().await?;
    external_databases(env, &client, ns).await?;
    let server = FixtureServer::for_scans(&[]).await?;
    airgapped_dropin(&client, ns, &server).await?;
    let mut spec = external_spec();
    spec["notifier"] = json!({"enabled": false});
    spec["database"]["external"]
        .as_object_mut()
        .context("external databases")?
        .remove("notifier");
    spec["indexer"] = json!({"autoscaling": autoscaling, "pod": small_pod()});
    create_clair(&client, ns, "clair", spec).await?;
    until_available(env, &client, ns, START, "clair Available on the real node").await?;
    Ok((client, server))
}

/// Runs `test` in a namespace of its own, then deletes the namespace and waits until its
/// pods are gone: the node has two cores, and the tests after need their CPU requests.
async fn in_own_namespace<'a, F, Fut>(env: &'a TestEnv, prefix: &str, test: F) -> anyhow::Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + 'a,
{
    let ns = env.namespace(prefix).await?;
    let result = test(ns.clone()).await;
    let released = release(env, &ns).await;
    // The test's own failure first: a cleanup failure after it says less.
    result.and(released)
}

/// Deletes the namespace `ns` and waits until its pods are gone.
pub(crate) async fn release(env: &TestEnv, ns: &str) -> anyhow::Result<()> {
    let client = env.client().await?;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .delete(ns, &Default::default())
        .await?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, ns);
    eventually(
        Duration::from_secs(120),
        &format!("the pods of namespace {ns} to be gone"),
        || {
            let pods = pods.clone();
            async move { Ok(pods.list(&ListParams::default()).await?.items.is_empty()) }
        },
    )
    .await
}

/// Where the load goes: the indexer's Service, signed with the Clair's PSK; each request a
/// new manifest (a Debian layer of 400 packages and a Python tree of 100).
async fn load_target(client: &Client, ns: &str) -> anyhow::Result<Arc<Target>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let psk = secret_text(&secrets.get("clair-psk").await?, "key")?;
    Ok(Arc::new(Target {
        indexer: service_url(client, ns, INDEXER).await?,
        matcher: None,
        notifier: None,
        psk,
        server: LayerServer::start().await?,
        new_manifest: Arc::new(|server, seed| {
            load::Manifest::of(vec![
                server.add(load::layer(LayerKind::Debian { packages: 400 }, seed)),
                server.add(load::layer(LayerKind::Python { packages: 100 }, seed)),
            ])
        }),
        request_timeout: Duration::from_secs(120),
        stop: Arc::new(AtomicBool::new(false)),
    }))
}

/// New manifests from `clients` clients each step, for at most `duration` each.
fn start_load(
    target: &Arc<Target>,
    steps: &[(usize, Duration)],
) -> tokio::task::JoinHandle<Vec<Sample>> {
    let target = Arc::clone(target);
    let steps: Vec<Step> = steps
        .iter()
        .map(|&(clients, duration)| Step {
            clients,
            duration,
            class: Class::New,
        })
        .collect();
    tokio::spawn(async move { load::run(target, &steps, 5_000).await })
}

async fn stop_load(
    target: &Arc<Target>,
    load: tokio::task::JoinHandle<Vec<Sample>>,
) -> anyhow::Result<Vec<Sample>> {
    target
        .stop
        .store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(load.await?)
}

/// No answer was a server error and every request got one (429s are Clair's back-pressure,
/// counted, not failures).
fn no_failures(samples: &[Sample]) -> anyhow::Result<()> {
    let failed: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.status == 0 || s.status >= 500)
        .collect();
    let refused = samples.iter().filter(|s| s.status == 429).count();
    println!(
        "load: {} requests, {} answered 201, {refused} refused with 429, {} failed",
        samples.len(),
        samples.iter().filter(|s| s.status == 201).count(),
        failed.len()
    );
    ensure!(
        failed.is_empty(),
        "{} of {} index requests failed (status 0 is no answer): {:?}",
        failed.len(),
        samples.len(),
        failed.iter().take(5).collect::<Vec<_>>()
    );
    ensure!(
        samples.iter().any(|s| s.status == 201),
        "no index request succeeded"
    );
    Ok(())
}

pub(crate) async fn hpa(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<Option<HorizontalPodAutoscaler>> {
    Ok(
        Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await?,
    )
}

pub(crate) fn desired(hpa: &HorizontalPodAutoscaler) -> i32 {
    hpa.status.as_ref().map_or(0, |s| s.desired_replicas)
}

pub(crate) async fn ready_pods(client: &Client, ns: &str) -> anyhow::Result<i32> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(INDEXER)
        .await?;
    Ok(deployment
        .status
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0))
}

/// Every HorizontalPodAutoscaler in `ns` that scales the indexer's Deployment.
async fn indexer_autoscalers(client: &Client, ns: &str) -> anyhow::Result<Vec<String>> {
    let all = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?;
    Ok(all
        .items
        .iter()
        .filter(|h| {
            h.spec
                .as_ref()
                .is_some_and(|s| s.scale_target_ref.name == INDEXER)
        })
        .map(ResourceExt::name_any)
        .collect())
}

async fn scaled_objects(client: &Client, ns: &str) -> anyhow::Result<Vec<String>> {
    let resource = clair_operator::render::autoscaling::scaled_object_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect())
}

/// Polls the autoscaler `name` while the load holds, until it asked for `replicas` and as
/// many indexer pods are ready; then holds the load `hold` longer, checking it never turns
/// back. Returns the longest `desiredReplicas` sequence seen, for the failure message.
async fn scales_out_and_holds(
    client: &Client,
    ns: &str,
    name: &str,
    replicas: i32,
    within: Duration,
    hold: Duration,
) -> anyhow::Result<Vec<i32>> {
    let start = Instant::now();
    let mut seen = Vec::new();
    let mut reached: Option<Instant> = None;
    loop {
        let read = hpa(client, ns, name).await?;
        let wanted = read.as_ref().map_or(0, desired);
        if seen.last() != Some(&wanted) {
            seen.push(wanted);
        }
        match reached {
            None if wanted >= replicas && ready_pods(client, ns).await? >= replicas => {
                reached = Some(Instant::now());
            }
            None => ensure!(
                start.elapsed() < within,
                "{name} did not scale the indexer to {replicas} ready pods within {}s under load: desiredReplicas went {seen:?}; its conditions: {}",
                within.as_secs(),
                conditions(read.as_ref())
            ),
            Some(at) => {
                ensure!(
                    wanted >= replicas,
                    "{name} turned back to {wanted} while the load held: desiredReplicas went {seen:?}"
                );
                if at.elapsed() >= hold {
                    return Ok(seen);
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The autoscaler's conditions, `Type=Status (Reason: message)` each, for a failure message.
fn conditions(hpa: Option<&HorizontalPodAutoscaler>) -> String {
    hpa.and_then(|h| h.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .map(|all| {
            all.iter()
                .map(|c| {
                    format!(
                        "{}={} ({}: {})",
                        c.type_,
                        c.status,
                        c.reason.as_deref().unwrap_or_default(),
                        c.message.as_deref().unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_else(|| "none".to_string())
}

async fn scales_in(client: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(240),
        &format!("{name} to scale the idle indexer back to one pod"),
        || async move {
            let wanted = hpa(client, ns, name).await?.as_ref().map_or(0, desired);
            let pods = Api::<Deployment>::namespaced(client.clone(), ns)
                .get(INDEXER)
                .await?
                .spec
                .and_then(|s| s.replicas);
            Ok(wanted == 1 && pods == Some(1))
        },
    )
    .await
}

pub async fn a_cpu_autoscaler_scales_the_indexer_on_what_metrics_server_reads(
    env: &TestEnv,
) -> anyhow::Result<()> {
    in_own_namespace(env, "hpa", |ns| cpu_autoscaler(env, ns)).await
}

async fn cpu_autoscaler(env: &TestEnv, ns: String) -> anyhow::Result<()> {
    let autoscaling = json!({
        "minReplicas": 1, "maxReplicas": 2,
        "targetCPUUtilizationPercentage": 60,
        "behavior": quick_behavior(),
    });
    let (client, _server) = autoscaled_clair(env, &ns, autoscaling).await?;
    ensure!(
        indexer_autoscalers(&client, &ns).await? == [INDEXER],
        "the operator's own HorizontalPodAutoscaler alone scales the indexer"
    );
    let target = load_target(&client, &ns).await?;
    a_go_binary_is_indexed(&client, &ns, &target).await?;
    an_rhel_layer_is_indexed(&client, &ns, &target).await?;
    let load = start_load(&target, &[(4, Duration::from_secs(300))]);
    let result = scales_out_and_holds(
        &client,
        &ns,
        INDEXER,
        2,
        Duration::from_secs(240),
        Duration::from_secs(10),
    )
    .await;
    let samples = stop_load(&target, load).await?;
    result?;
    // The CPU reading came from metrics-server through the apiserver.
    let read = hpa(&client, &ns, INDEXER)
        .await?
        .context("the autoscaler")?;
    let cpu = read
        .status
        .as_ref()
        .and_then(|s| s.current_metrics.as_ref())
        .and_then(|m| m.iter().find_map(|m| m.resource.as_ref()))
        .and_then(|r| r.current.average_utilization);
    ensure!(
        cpu.is_some(),
        "the autoscaler shows no CPU reading: {:?}",
        read.status
    );
    no_failures(&samples)
}

pub async fn keda_scales_the_indexer_on_its_in_flight_requests_and_back_in(
    env: &TestEnv,
) -> anyhow::Result<()> {
    in_own_namespace(env, "keda", |ns| keda_autoscaler(env, ns)).await
}

async fn keda_autoscaler(env: &TestEnv, ns: String) -> anyhow::Result<()> {
    let prometheus = prometheus_url(env)?;
    let autoscaling = json!({
        "engine": "KEDA",
        "minReplicas": 1, "maxReplicas": 2,
        "keda": {"prometheusAddress": prometheus, "targetInFlight": 1, "pollingIntervalSeconds": 5},
        "behavior": quick_behavior(),
    });
    let (client, _server) = autoscaled_clair(env, &ns, autoscaling).await?;
    let keda_hpa = format!("keda-hpa-{INDEXER}");
    eventually(
        Duration::from_secs(60),
        "KEDA to make its autoscaler for the operator's ScaledObject",
        || {
            let (client, ns, keda_hpa) = (&client, &ns, &keda_hpa);
            async move { Ok(indexer_autoscalers(client, ns).await? == [keda_hpa.clone()]) }
        },
    )
    .await?;
    ensure!(
        scaled_objects(&client, &ns).await? == [INDEXER],
        "one ScaledObject, the indexer's"
    );

    let target = load_target(&client, &ns).await?;
    // A burst past the indexer's concurrency limit (GOMAXPROCS × 4: 8 here), then a load
    // one pod serves with four requests in flight.
    let load = start_load(
        &target,
        &[(16, Duration::from_secs(20)), (4, Duration::from_secs(300))],
    );
    let result = scales_out_and_holds(
        &client,
        &ns,
        &keda_hpa,
        2,
        Duration::from_secs(240),
        Duration::from_secs(20),
    )
    .await;
    let samples = stop_load(&target, load).await?;
    let seen = result?;
    println!("keda: desiredReplicas went {seen:?}");
    no_failures(&samples)?;
    ensure!(
        samples.iter().any(|s| s.status == 429),
        "the burst of 16 clients met no 429 from the indexer's concurrency limit"
    );
    // One vulnerability report, so that the matcher's request series exist too.
    let matcher = service_url(&client, &ns, "clair-matcher").await?;
    let token = crate::scan::quay_token(&client, &ns).await?;
    let (status, _) = crate::fixtures::request(
        "GET",
        format!(
            "{matcher}/matcher/api/v1/vulnerability_report/sha256:{}",
            "0".repeat(64)
        ),
        Some(token),
        None,
    )
    .await?;
    ensure!(status != 0 && status < 500, "the matcher answered {status}");
    clair_dashboard_queries_answer(&prometheus, &ns).await?;
    scales_in(&client, &ns, &keda_hpa).await?;

    // The operator's tuning metrics read KEDA's autoscaler: the scale-up, and how long
    // its pods took to be ready, as Prometheus scraped them from the operator's pod.
    let selector = format!(r#"namespace="{ns}",name="{INDEXER}""#);
    for series in [
        format!("clair_operator_autoscaler_scale_ups_total{{{selector}}}"),
        format!("clair_operator_autoscaler_last_scale_up_ready_seconds{{{selector}}}"),
    ] {
        let value = prometheus_value(&prometheus, &series).await?;
        ensure!(
            value.is_some_and(|v| v >= 1.0 || series.contains("ready_seconds") && v > 0.0),
            "{series} is {value:?} in Prometheus"
        );
    }
    Ok(())
}

pub async fn switching_engines_leaves_exactly_one_autoscaler(env: &TestEnv) -> anyhow::Result<()> {
    in_own_namespace(env, "switch", |ns| switching_engines(env, ns)).await
}

async fn switching_engines(env: &TestEnv, ns: String) -> anyhow::Result<()> {
    let prometheus = prometheus_url(env)?;
    let (client, _server) = autoscaled_clair(
        env,
        &ns,
        json!({"minReplicas": 1, "maxReplicas": 2, "targetCPUUtilizationPercentage": 80}),
    )
    .await?;
    // Merge patches, as `kubectl patch --type merge` sends them: the other engine's fields
    // set to null.
    let keda_mode = json!({
        "engine": "KEDA", "minReplicas": 1, "maxReplicas": 2,
        "keda": {"prometheusAddress": prometheus},
        "targetCPUUtilizationPercentage": null,
    });
    let hpa_mode = json!({
        "engine": null, "keda": null,
        "minReplicas": 1, "maxReplicas": 2, "targetCPUUtilizationPercentage": 80,
    });
    let one = |wanted: &'static str, objects: usize| {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            eventually(
                Duration::from_secs(120),
                &format!("{wanted} alone to scale the indexer"),
                || {
                    let (client, ns) = (client.clone(), ns.clone());
                    async move {
                        let autoscalers = indexer_autoscalers(&client, &ns).await?;
                        let scaled = scaled_objects(&client, &ns).await?;
                        Ok(autoscalers.len() == 1
                            && autoscalers[0].starts_with(wanted)
                            && scaled.len() == objects)
                    }
                },
            )
            .await
        }
    };
    for (mode, wanted, objects) in [
        (keda_mode.clone(), "keda-hpa-", 1),
        (hpa_mode, INDEXER, 0),
        (keda_mode, "keda-hpa-", 1),
        (Value::Null, "", 0),
    ] {
        patch_spec(
            &client,
            &ns,
            "clair",
            json!({"indexer": {"autoscaling": mode}}),
        )
        .await?;
        if wanted.is_empty() {
            eventually(
                Duration::from_secs(120),
                "no autoscaler once autoscaling is removed",
                || {
                    let (client, ns) = (client.clone(), ns.clone());
                    async move {
                        Ok(indexer_autoscalers(&client, &ns).await?.is_empty()
                            && scaled_objects(&client, &ns).await?.is_empty())
                    }
                },
            )
            .await?;
        } else {
            one(wanted, objects).await?;
        }
        until_available(
            env,
            &client,
            &ns,
            Duration::from_secs(120),
            "clair Available after the switch",
        )
        .await?;
    }
    Ok(())
}

/// A Go binary with build information (metrics-server's, built here) is indexed and its
/// modules reported: the Go-binary scanner spools it to the temporary folder, which the
/// pod's read-only root filesystem would refuse were it not the scratch volume.
async fn a_go_binary_is_indexed(client: &Client, ns: &str, target: &Target) -> anyhow::Result<()> {
    let binary = std::fs::read(clair_testenv::metrics_server_binary()?)?;
    let layer = load::file_layer("usr/local/bin/metrics-server", &binary, 1);
    let report = index_one_layer(client, ns, target, layer, "a Go binary").await?;
    let modules = packages_named(&report, |name| name.contains("k8s.io/"));
    ensure!(
        modules > 0,
        "no Go module of the binary was reported: {report}"
    );
    Ok(())
}

/// A RHEL 9 layer with an RPM database that rpm wrote (tools/rpmdb) is indexed and every one
/// of its packages reported: the RPM scanner, too, spools the database to the temporary
/// folder.
async fn an_rhel_layer_is_indexed(
    client: &Client,
    ns: &str,
    target: &Target,
) -> anyhow::Result<()> {
    const PACKAGES: usize = 50;
    let rpmdb = std::fs::read(clair_testenv::rpm_database(PACKAGES)?)?;
    let layer = load::rhel_layer(&rpmdb, 1);
    let report = index_one_layer(client, ns, target, layer, "a RHEL layer").await?;
    let found = packages_named(&report, |name| name.starts_with("rhel-load-"));
    ensure!(
        found == PACKAGES,
        "{found} of the RHEL layer's {PACKAGES} RPM packages were reported: {report}"
    );
    Ok(())
}

/// The index report of a manifest of `layer` alone, which must have finished.
async fn index_one_layer(
    client: &Client,
    ns: &str,
    target: &Target,
    layer: Vec<u8>,
    what: &str,
) -> anyhow::Result<Value> {
    let layer = target.server.add(layer);
    let manifest = load::Manifest::of(vec![layer.clone()]);
    let token = crate::scan::quay_token(client, ns).await?;
    let (status, text) = crate::fixtures::request(
        "POST",
        format!("{}/indexer/api/v1/index_report", target.indexer),
        Some(token),
        Some(manifest.body()),
    )
    .await?;
    target.server.remove(&layer);
    ensure!(status == 201, "indexing {what} answered {status}: {text}");
    let report: Value = serde_json::from_str(&text)?;
    ensure!(
        report["state"] == "IndexFinished" && report["success"] == true,
        "indexing {what} did not finish: {}",
        report["err"]
    );
    Ok(report)
}

/// How many packages of an index report have a name that `matches`.
fn packages_named(report: &Value, matches: impl Fn(&str) -> bool) -> usize {
    report["packages"].as_object().map_or(0, |packages| {
        packages
            .values()
            .filter(|p| p["name"].as_str().is_some_and(&matches))
            .count()
    })
}

/// Every query of `deploy/monitoring/clair-dashboard.json` evaluates in the harness's
/// Prometheus, and every metric it names has series there: a real scrape of this Clair's
/// pods (and the operator's) after load.
async fn clair_dashboard_queries_answer(prometheus: &str, ns: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/monitoring/clair-dashboard.json"
    ))?;
    let dashboard: Value = serde_json::from_str(&text).context("clair-dashboard.json")?;
    let queries = dashboards::queries(&dashboard);
    ensure!(!queries.is_empty(), "the Clair dashboard has no queries");
    let mut named: Vec<(String, String)> = Vec::new();
    for expr in &queries {
        for name in dashboards::metric_names(
            expr,
            &["clair_", "claircore_", "pgxpool_", "process_", "go_"],
        ) {
            named.push((name, expr.clone()));
        }
    }
    // Scraped every 5 s: the last requests' series appear within a few scrapes.
    let mut missing = Vec::new();
    for _ in 0..20 {
        let scraped = series_names(prometheus).await?;
        missing = named
            .iter()
            .filter(|(name, _)| !scraped.contains(name))
            .cloned()
            .collect();
        if missing.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    ensure!(
        missing.is_empty(),
        "the Clair dashboard queries metrics Prometheus has not scraped: {missing:?}"
    );
    for expr in queries {
        let query = expr.replace("$namespace", ns);
        let answer = prometheus_query(prometheus, &query).await?;
        ensure!(
            answer["status"] == "success",
            "the Clair dashboard's query {query} fails: {answer}"
        );
    }
    Ok(())
}

/// Every metric name Prometheus holds series of.
async fn series_names(prometheus: &str) -> anyhow::Result<Vec<String>> {
    let (status, body) = crate::fixtures::request(
        "GET",
        format!("{prometheus}/api/v1/label/__name__/values"),
        None,
        None,
    )
    .await?;
    ensure!(status == 200, "Prometheus answered {status}: {body}");
    let names: Value = serde_json::from_str(&body)?;
    Ok(names["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect())
}

async fn prometheus_query(prometheus: &str, query: &str) -> anyhow::Result<Value> {
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", query)
        .finish();
    let (status, text) = crate::fixtures::request(
        "GET",
        format!("{prometheus}/api/v1/query?{query}"),
        None,
        None,
    )
    .await?;
    ensure!(
        status == 200 || status == 400 || status == 422,
        "Prometheus answered {status}: {text}"
    );
    Ok(serde_json::from_str(&text)?)
}

/// The harness's Prometheus, beside the real node.
pub(crate) fn prometheus_url(env: &TestEnv) -> anyhow::Result<String> {
    Ok(env
        .plane
        .addons()
        .context("the real node runs no metrics pipeline")?
        .prometheus_url()
        .to_string())
}

/// The value of an instant query that returns one sample, if any.
pub(crate) async fn prometheus_value(prometheus: &str, query: &str) -> anyhow::Result<Option<f64>> {
    let body = prometheus_query(prometheus, query).await?;
    ensure!(
        body["status"] == "success",
        "the query {query} fails: {body}"
    );
    Ok(body["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok()))
}
