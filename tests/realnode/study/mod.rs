//! The load study (`scripts/bench load`): a benchmark, not a test. On the real node, with
//! the metrics pipeline the autoscaling tests use, it puts each Clair service the operator
//! deployed under a step function of offered load, at one replica and then two, and records
//! per step what the clients saw (throughput, latency per class, 429s, failures) and what
//! Prometheus and metrics-server read (CPU, memory, in-flight requests, the 429 rate, the
//! database pool). Then the same indexer config as a bare host process (its throughput per
//! core against the pod's), and KEDA on the indexer through a step to twice one replica's
//! saturation and a scale-in under load. Prints Markdown tables, writes them with the raw
//! figures (JSON) and the plots (PNG) to the output folder.
//!
//! It lives beside the real-node tests because it needs their harness (the environment, the
//! fixtures, the Clair helpers); the load generator itself is `clair_testenv::load`.

mod bare;
mod figures;
mod plot;
mod report;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::Context;
use clair_testenv::load::{self, Class, LayerKind, LayerServer, Sample, Step, Target};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};

use crate::fixtures::FixtureServer;
use crate::scan::{
    START, airgapped_dropin, run_updaters_now, service_url, until_available, updaters_importing,
};
use crate::support::TestEnv;
use crate::support::clair::{create_clair, external_databases, external_spec, secret_text};
use figures::{Service, StepFigures};

/// What the command line asks of the study.
pub struct Request {
    /// Where its tables, figures and plots go.
    pub out: PathBuf,
    /// `--only=SERVICE[,SERVICE]`: those services' sweeps alone (no bare comparison, no
    /// KEDA run).
    pub only: Result<Option<Vec<Service>>, String>,
    /// `--replot`: the plots again from the folder's `study.json`, no cluster.
    pub replot: bool,
}

/// `--load-study [FOLDER] [--only=SERVICE,...] [--replot]` (indexer, matcher, notifier) on the real-node binary's
/// command line: the study instead of the tests, writing to FOLDER (default
/// `bench/results/load`).
pub fn requested() -> Option<Request> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == "--load-study")?;
    let out = args
        .get(at + 1)
        .filter(|a| !a.starts_with("--"))
        .map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/results/load"),
            PathBuf::from,
        );
    let only = args.iter().find_map(|a| a.strip_prefix("--only=")).map(|names| {
        names
            .split(',')
            .map(|name| {
                [Service::Indexer, Service::Matcher, Service::Notifier]
                    .into_iter()
                    .find(|s| s.name() == name)
                    .ok_or_else(|| {
                        format!("--only={names}: {name} is not a service (indexer, matcher or notifier)")
                    })
            })
            .collect::<Result<Vec<_>, _>>()
    });
    Some(Request {
        out,
        only: only.transpose(),
        replot: args.iter().any(|a| a == "--replot"),
    })
}

pub fn run(request: &Request) -> ExitCode {
    let out = request.out.as_path();
    let result = (|| {
        let only = request.only.clone().map_err(anyhow::Error::msg)?;
        std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
        plot::font().context("the plots' font")?;
        if request.replot {
            return report::replot(out);
        }
        let env = crate::start()?;
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(study(&env, out, only))
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("the load study failed: {e:?}");
            ExitCode::FAILURE
        }
    }
}

/// The vulnerability data imported through the updater CronJob: 100 vulnerabilities for
/// each of 300 Alpine packages (30,000 records), every layer's Alpine packages affected.
const VULNERABLE_PACKAGES: usize = 300;
const PER_PACKAGE: usize = 100;

/// A new manifest: Alpine (200 packages, each with vulnerabilities), Debian (300 packages)
/// and a Python tree (50), three layers.
fn typical_manifest(server: &LayerServer, seed: u64) -> load::Manifest {
    load::Manifest::of(vec![
        server.add(load::layer(LayerKind::Alpine { packages: 200 }, seed)),
        server.add(load::layer(LayerKind::Debian { packages: 300 }, seed)),
        server.add(load::layer(LayerKind::Python { packages: 50 }, seed)),
    ])
}

/// One large layer: 160 files of 1 MiB (the fetch and decompress path).
fn large_manifest(server: &LayerServer, seed: u64) -> load::Manifest {
    load::Manifest::of(vec![server.add(load::layer(
        LayerKind::Bulk {
            count: 160,
            bytes: 1 << 20,
        },
        seed,
    ))])
}

const INDEXER_CLIENTS: [usize; 5] = [1, 2, 4, 8, 16];
const MATCHER_CLIENTS: [usize; 3] = [1, 4, 16];
const NOTIFIER_CLIENTS: [usize; 2] = [1, 8];
const STEP: Duration = Duration::from_secs(40);
const SHORT_STEP: Duration = Duration::from_secs(30);

async fn study(env: &TestEnv, out: &Path, only: Option<Vec<Service>>) -> anyhow::Result<()> {
    let started = Instant::now();
    let prometheus = crate::autoscaling::prometheus_url(env)?;
    let export = load::alpine_vulnerabilities(VULNERABLE_PACKAGES, PER_PACKAGE);
    let mut steps: Vec<StepFigures> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for replicas in [1, 2] {
        let ns = env.namespace(&format!("load-r{replicas}")).await?;
        let result = sweep(
            env,
            &ns,
            replicas,
            &export,
            &prometheus,
            only.as_deref(),
            &mut steps,
            &mut notes,
        )
        .await;
        // The rest of the study runs even when one sweep fails; its failure is reported.
        if let Err(e) = &result {
            notes.push(format!("the sweep at {replicas} replica(s) failed: {e:#}"));
            eprintln!("{e:?}");
        }
        crate::autoscaling::release(env, &ns).await?;
        report::write(out, &steps, &[], None, &notes)?;
    }
    if only.is_some() {
        plot::all(out, &steps, &[], None)?;
        println!("{}", std::fs::read_to_string(out.join("study.md"))?);
        return Ok(());
    }
    let bare = match bare_comparison(env, &export).await {
        Ok(bare) => bare,
        Err(e) => {
            notes.push(format!("the bare host-process comparison failed: {e:#}"));
            Vec::new()
        }
    };
    report::write(out, &steps, &bare, None, &notes)?;
    let keda = match keda_run(env, &prometheus, &steps).await {
        Ok(keda) => Some(keda),
        Err(e) => {
            notes.push(format!("the KEDA run failed: {e:#}"));
            None
        }
    };
    notes.push(format!(
        "the study took {:.0} min",
        started.elapsed().as_secs_f64() / 60.0
    ));
    report::write(out, &steps, &bare, keda.as_ref(), &notes)?;
    plot::all(out, &steps, &bare, keda.as_ref())?;
    println!("{}", std::fs::read_to_string(out.join("study.md"))?);
    Ok(())
}

/// A Clair in `ns` with `replicas` of each service (small pods), `indexer` merged into the
/// indexer's spec, the vulnerability data imported; its fixture server.
async fn study_clair(
    env: &TestEnv,
    ns: &str,
    replicas: i32,
    indexer: Value,
    export: &str,
) -> anyhow::Result<(Client, FixtureServer)> {
    let client = env.client().await?;
    external_databases(env, &client, ns).await?;
    let server = FixtureServer::for_scans_with(&[], export.to_string()).await?;
    airgapped_dropin(&client, ns, &server).await?;
    let mut spec = external_spec();
    for service in ["indexer", "matcher", "notifier"] {
        spec[service] = json!({"replicas": replicas, "pod": crate::autoscaling::small_pod()});
    }
    if let (Some(spec), Some(extra)) = (spec["indexer"].as_object_mut(), indexer.as_object()) {
        spec.extend(extra.clone());
    }
    spec["updaters"] = updaters_importing(&server);
    create_clair(&client, ns, "clair", spec).await?;
    until_available(env, &client, ns, START, "clair Available on the real node").await?;
    run_updaters_now(env, &client, ns).await?;
    Ok((client, server))
}

async fn load_target(
    client: &Client,
    ns: &str,
    new_manifest: load::MakeManifest,
) -> anyhow::Result<Arc<Target>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    Ok(Arc::new(Target {
        indexer: service_url(client, ns, "clair-indexer").await?,
        matcher: Some(service_url(client, ns, "clair-matcher").await?),
        notifier: Some(service_url(client, ns, "clair-notifier").await?),
        psk: secret_text(&secrets.get("clair-psk").await?, "key")?,
        server: LayerServer::start().await?,
        new_manifest,
        request_timeout: Duration::from_secs(300),
        stop: Arc::new(AtomicBool::new(false)),
    }))
}

/// Each service's steps at `replicas` (or `only` one's), one service loaded at a time.
#[allow(clippy::too_many_arguments)]
async fn sweep(
    env: &TestEnv,
    ns: &str,
    replicas: i32,
    export: &str,
    prometheus: &str,
    only: Option<&[Service]>,
    steps: &mut Vec<StepFigures>,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    let (client, _server) = study_clair(env, ns, replicas, json!({}), export).await?;
    let records = env.postgres.sql_in(
        &format!("{}_matcher", ns.replace('-', "_")),
        "SELECT count(*) FROM vuln",
    )?;
    notes.push(format!(
        "{replicas} replica(s): {records} vulnerability records imported by the updater CronJob"
    ));
    let target = load_target(&client, ns, Arc::new(typical_manifest)).await?;
    let mut plan: Vec<(Service, Class, usize, Duration)> = INDEXER_CLIENTS
        .iter()
        .map(|&c| (Service::Indexer, Class::New, c, STEP))
        .collect();
    plan.push((Service::Indexer, Class::Known, 8, SHORT_STEP));
    plan.push((Service::Indexer, Class::Same, 8, SHORT_STEP));
    plan.extend(
        MATCHER_CLIENTS
            .iter()
            .map(|&c| (Service::Matcher, Class::Report, c, SHORT_STEP)),
    );
    plan.extend(
        NOTIFIER_CLIENTS
            .iter()
            .map(|&c| (Service::Notifier, Class::Notification, c, SHORT_STEP)),
    );
    plan.retain(|(service, ..)| only.is_none_or(|o| o.contains(service)));
    for (service, class, clients, duration) in plan {
        let figures = measured_step(
            env, ns, prometheus, &target, service, replicas, class, clients, duration,
        )
        .await?;
        eprintln!("{}", figures.line());
        steps.push(figures);
    }
    if only.is_some_and(|o| !o.contains(&Service::Indexer)) {
        return Ok(());
    }
    // The large layer: one client, a few requests.
    let large = load_target(&client, ns, Arc::new(large_manifest)).await?;
    let mut figures = measured_step(
        env,
        ns,
        prometheus,
        &large,
        Service::Indexer,
        replicas,
        Class::New,
        1,
        SHORT_STEP,
    )
    .await?;
    figures.label = Some("160 MiB layer".to_string());
    eprintln!("{}", figures.line());
    steps.push(figures);
    if replicas == 1 {
        for (label, manifest) in layer_kinds()? {
            let target = load_target(&client, ns, manifest).await?;
            let mut figures = measured_step(
                env,
                ns,
                prometheus,
                &target,
                Service::Indexer,
                replicas,
                Class::New,
                1,
                SHORT_STEP,
            )
            .await?;
            figures.label = Some(label.to_string());
            eprintln!("{}", figures.line());
            steps.push(figures);
        }
    }
    Ok(())
}

/// Manifests of one layer each, one kind a manifest, for what each kind costs to index: the
/// three of the typical manifest alone, a RHEL layer (an RPM database of 200 packages that
/// rpm wrote) and a Go binary with build information (metrics-server's, 68 MiB).
fn layer_kinds() -> anyhow::Result<Vec<(&'static str, load::MakeManifest)>> {
    fn one(make: impl Fn(u64) -> Vec<u8> + Send + Sync + 'static) -> load::MakeManifest {
        Arc::new(move |server: &LayerServer, seed| load::Manifest::of(vec![server.add(make(seed))]))
    }
    let rpmdb = std::fs::read(clair_testenv::rpm_database(200)?)?;
    let binary = std::fs::read(clair_testenv::metrics_server_binary()?)?;
    Ok(vec![
        (
            "Alpine layer (200)",
            one(|seed| load::layer(LayerKind::Alpine { packages: 200 }, seed)),
        ),
        (
            "Debian layer (300)",
            one(|seed| load::layer(LayerKind::Debian { packages: 300 }, seed)),
        ),
        (
            "Python layer (50)",
            one(|seed| load::layer(LayerKind::Python { packages: 50 }, seed)),
        ),
        (
            "RHEL layer (200)",
            one(move |seed| load::rhel_layer(&rpmdb, seed)),
        ),
        (
            "Go binary (68 MiB)",
            one(move |seed| load::file_layer("usr/local/bin/metrics-server", &binary, seed)),
        ),
    ])
}

/// One step of load on `service`, and its figures.
#[allow(clippy::too_many_arguments)]
async fn measured_step(
    env: &TestEnv,
    ns: &str,
    prometheus: &str,
    target: &Arc<Target>,
    service: Service,
    replicas: i32,
    class: Class,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<StepFigures> {
    let began = Instant::now();
    let host_before = figures::HostCpu::now();
    let samples = load::run(
        Arc::clone(target),
        &[Step {
            clients,
            duration,
            class,
        }],
        20_000,
    )
    .await;
    let took = began.elapsed();
    let (machine, postgres) = figures::HostCpu::now().since(&host_before);
    anyhow::ensure!(
        !samples.is_empty(),
        "{} {class:?} with {clients} clients sent no request",
        service.name()
    );
    // Two scrapes past the step's end, so that its last seconds are in Prometheus.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let window = took + Duration::from_secs(10);
    let mut server =
        figures::ServerFigures::read(env, prometheus, ns, service, window, Duration::ZERO).await;
    server.machine_cores = machine;
    server.postgres_cores = postgres;
    // Over the step itself: the window read from Prometheus is 10 s longer (scrape lag),
    // and its tail is idle.
    server.cpu_cores = server.cpu_seconds.map(|c| c / took.as_secs_f64().max(1.0));
    Ok(StepFigures::of(
        service, replicas, class, clients, &samples, took, server,
    ))
}

/// The same indexer config as a bare host process beside the pods, and the operator's
/// indexer at one replica, each swept through the same steps in the same run.
async fn bare_comparison(env: &TestEnv, export: &str) -> anyhow::Result<Vec<bare::Comparison>> {
    let ns = env.namespace("load-bare").await?;
    let result = async {
        let (client, _server) = study_clair(env, &ns, 1, json!({}), export).await?;
        let pod_target = load_target(&client, &ns, Arc::new(typical_manifest)).await?;
        let mut indexer = bare::Indexer::start(env, &client, &ns).await?;
        let mut bare_target = load_target(&client, &ns, Arc::new(typical_manifest)).await?;
        Arc::get_mut(&mut bare_target)
            .context("a target just made")?
            .indexer = indexer.url();
        let mut rows = Vec::new();
        for clients in [1, 2, 4, 8] {
            let pod = bare::sweep_step(env, &ns, &pod_target, None, clients, STEP).await?;
            let host =
                bare::sweep_step(env, &ns, &bare_target, Some(&indexer), clients, STEP).await?;
            let row = bare::Comparison { clients, pod, host };
            eprintln!("{}", row.line());
            rows.push(row);
        }
        indexer.stop();
        Ok(rows)
    }
    .await;
    crate::autoscaling::release(env, &ns).await?;
    result
}

/// KEDA on the indexer (one to three replicas) through a step to twice one replica's
/// saturation, then a step down that scales it in while the load goes on. The in-flight
/// target is what one pod holds at saturation (the study's finding: the clients at which
/// its throughput stops growing).
pub struct KedaRun {
    pub saturating_clients: usize,
    /// The clients of the step down.
    pub down_clients: usize,
    pub samples: Vec<Sample>,
    /// (seconds from the start, desired replicas, ready pods).
    pub replicas: Vec<(f64, i32, i32)>,
    /// When the scale-out settled (at its most replicas for 30 s), from the start.
    pub settled_at: Option<f64>,
    /// When the load stepped down.
    pub stepped_down_at: f64,
    /// When the first pod was removed under load.
    pub scaled_in_at: Option<f64>,
    /// The single-replica unsaturated p99 of new manifests (the sweep's two-client step).
    pub baseline_p99: Option<f64>,
}

async fn keda_run(
    env: &TestEnv,
    prometheus: &str,
    steps: &[StepFigures],
) -> anyhow::Result<KedaRun> {
    // One replica's saturation: the fewest clients past which its throughput grows by
    // less than a tenth (the concurrency limit refuses the rest).
    let one: Vec<&StepFigures> = steps
        .iter()
        .filter(|s| {
            s.service == Service::Indexer
                && s.replicas == 1
                && s.class == Class::New
                && s.label.is_none()
        })
        .collect();
    let saturation = one
        .windows(2)
        .find(|w| w[1].throughput < w[0].throughput * 1.1)
        .map_or(8, |w| w[0].clients);
    let baseline_p99 = one
        .iter()
        .find(|s| s.clients == 2)
        .and_then(|s| s.p99_new());
    let ns = env.namespace("load-keda").await?;
    let result = async {
        let autoscaling = json!({
            "engine": "KEDA",
            "minReplicas": 1, "maxReplicas": 3,
            "keda": {"prometheusAddress": prometheus, "pollingIntervalSeconds": 5, "targetInFlight": saturation},
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0},
                "scaleDown": {"stabilizationWindowSeconds": 60, "policies": [{"type": "Pods", "value": 1, "periodSeconds": 30}]},
            },
        });
        let export = load::alpine_vulnerabilities(10, 1);
        let (client, _server) =
            study_clair(env, &ns, 1, json!({"autoscaling": autoscaling}), &export).await?;
        let target = load_target(&client, &ns, Arc::new(typical_manifest)).await?;
        let clients = saturation * 2;
        let down_clients = (saturation / 2).max(1);
        let up = Duration::from_secs(300);
        let down = Duration::from_secs(240);
        let start = Instant::now();
        let load = {
            let target = Arc::clone(&target);
            let steps = [
                Step {
                    clients,
                    duration: up,
                    class: Class::New,
                },
                Step {
                    clients: down_clients,
                    duration: down,
                    class: Class::New,
                },
            ];
            tokio::spawn(async move { load::run(target, &steps, 50_000).await })
        };
        let mut replicas = Vec::new();
        let keda_hpa = "keda-hpa-clair-indexer";
        while start.elapsed() < up + down {
            let hpa = crate::autoscaling::hpa(&client, &ns, keda_hpa).await?;
            let desired = hpa.as_ref().map_or(0, crate::autoscaling::desired);
            let ready = crate::autoscaling::ready_pods(&client, &ns).await?;
            replicas.push((start.elapsed().as_secs_f64(), desired, ready));
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let samples = load.await?;
        let stepped_down_at = up.as_secs_f64();
        let most = replicas
            .iter()
            .filter(|r| r.0 < stepped_down_at)
            .map(|r| r.2)
            .max()
            .unwrap_or(0);
        let reached = replicas
            .iter()
            .find(|r| r.2 == most && r.0 < stepped_down_at)
            .map(|r| r.0);
        let settled_at = reached.map(|t| t + 30.0).filter(|t| *t < stepped_down_at);
        let scaled_in_at = replicas
            .iter()
            .find(|r| r.0 >= stepped_down_at && r.2 < most)
            .map(|r| r.0);
        Ok(KedaRun {
            saturating_clients: clients,
            down_clients,
            samples,
            replicas,
            settled_at,
            stepped_down_at,
            scaled_in_at,
            baseline_p99,
        })
    }
    .await;
    crate::autoscaling::release(env, &ns).await?;
    result
}
