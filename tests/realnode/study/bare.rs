//! The operator's indexer against the same Clair as a bare host process: the config the
//! operator rendered (read from the indexer's config snapshot Secret), the same binary, the
//! same database and layers, the same memory limit (GOMEMLIMIT as Clair sets it from the
//! pod's); only the listen addresses moved to loopback. Throughput per CPU-second says what
//! the pod settings (CPU limit, read-only root, scratch volume, kube-proxy) cost.

use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clair_testenv::Process;
use clair_testenv::load::{self, Class, Step, Target};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::figures::{self, ServerFigures, Service};
use crate::support::TestEnv;

pub struct Indexer {
    process: Process,
    port: u16,
}

impl Indexer {
    pub async fn start(env: &TestEnv, client: &Client, ns: &str) -> anyhow::Result<Self> {
        let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
            .get("clair-indexer")
            .await?;
        let snapshot = deployment
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.volumes)
            .into_iter()
            .flatten()
            .find(|v| v.name == "config")
            .and_then(|v| v.secret)
            .and_then(|s| s.secret_name)
            .context("the indexer's config volume")?;
        let secret = Api::<Secret>::namespaced(client.clone(), ns)
            .get(&snapshot)
            .await?;
        let text = crate::support::clair::secret_text(&secret, "config.json")?;
        let mut config: Value = serde_json::from_str(&text).context("the indexer's config.json")?;
        let port = free_port()?;
        let introspection = free_port()?;
        config["http_listen_addr"] = format!("127.0.0.1:{port}").into();
        config["introspection_addr"] = format!("127.0.0.1:{introspection}").into();
        let dir = env.plane.dir().join("bare-indexer");
        std::fs::create_dir_all(dir.join("tmp"))?;
        let path = dir.join("config.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&config)?)?;
        let binary = clair_testenv::clair_binaries()?.join("clair");
        let mut command = Command::new(&binary);
        command
            .env("CLAIR_CONF", &path)
            .env("CLAIR_MODE", "indexer")
            .env("TMPDIR", dir.join("tmp"))
            // What Clair sets from the pod's 1 GiB limit (95 %).
            .env("GOMEMLIMIT", format!("{}", (1u64 << 30) * 95 / 100));
        let process = Process::spawn_command("bare-indexer", command, &dir)?;
        let indexer = Self { process, port };
        let ready = format!("http://127.0.0.1:{introspection}/readyz");
        let began = Instant::now();
        loop {
            let answer = crate::fixtures::request("GET", ready.clone(), None, None).await;
            if matches!(answer, Ok((200, _))) {
                return Ok(indexer);
            }
            ensure!(
                began.elapsed() < Duration::from_secs(120),
                "the bare indexer was not ready within 120 s: {}",
                indexer.process.tail(20)
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// User and system CPU seconds so far, and the peak resident set (MiB).
    fn usage(&self) -> anyhow::Result<(f64, f64)> {
        let pid = self.process.id();
        let (_, cpu) = figures::process_cpu(pid).context("the bare indexer's /proc stat")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let peak_kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        Ok((cpu, peak_kib / 1024.0))
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One side of a comparison step.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Side {
    pub answered: usize,
    pub refused: usize,
    pub failed: usize,
    pub seconds: f64,
    pub cpu_seconds: Option<f64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub peak_mib: Option<f64>,
}

impl Side {
    pub fn throughput(&self) -> f64 {
        self.answered as f64 / self.seconds.max(1.0)
    }

    /// Manifests indexed per CPU-second.
    pub fn per_cpu_second(&self) -> Option<f64> {
        self.cpu_seconds
            .filter(|c| *c > 0.0)
            .map(|c| self.answered as f64 / c)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Comparison {
    pub clients: usize,
    pub pod: Side,
    pub host: Side,
}

impl Comparison {
    /// The pod's manifests per CPU-second over the bare process's.
    pub fn ratio(&self) -> Option<f64> {
        Some(self.pod.per_cpu_second()? / self.host.per_cpu_second()?)
    }

    pub fn line(&self) -> String {
        format!(
            "bare comparison, {} clients: pod {:.2}/s ({} per CPU-s), host {:.2}/s ({} per CPU-s), ratio {}",
            self.clients,
            self.pod.throughput(),
            figures::figure(self.pod.per_cpu_second(), 2),
            self.host.throughput(),
            figures::figure(self.host.per_cpu_second(), 2),
            figures::figure(self.ratio(), 2),
        )
    }
}

/// `clients` clients of new manifests on `target` for `duration`: on the bare `host`
/// process (its CPU from `/proc`), or on the pods (their CPU from Prometheus).
pub async fn sweep_step(
    env: &TestEnv,
    ns: &str,
    target: &Arc<Target>,
    host: Option<&Indexer>,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Side> {
    let before = host.map(Indexer::usage).transpose()?;
    let began = Instant::now();
    let samples = load::run(
        Arc::clone(target),
        &[Step {
            clients,
            duration,
            class: Class::New,
        }],
        20_000,
    )
    .await;
    let took = began.elapsed();
    let (cpu_seconds, peak_mib) = match (host, before) {
        (Some(host), Some((cpu_before, _))) => {
            let (cpu, peak) = host.usage()?;
            (Some(cpu - cpu_before), Some(peak))
        }
        _ => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            let prometheus = crate::autoscaling::prometheus_url(env)?;
            let server = ServerFigures::read(
                env,
                &prometheus,
                ns,
                Service::Indexer,
                took + Duration::from_secs(10),
                Duration::ZERO,
            )
            .await;
            (server.cpu_seconds, server.rss_peak_mib)
        }
    };
    let step = figures::StepFigures::of(
        Service::Indexer,
        1,
        Class::New,
        clients,
        &samples,
        took,
        ServerFigures::default(),
    );
    Ok(Side {
        answered: step.answered,
        refused: step.refused,
        failed: step.failed,
        seconds: step.seconds,
        cpu_seconds,
        p50: step.p50,
        p99: step.p99,
        peak_mib,
    })
}
