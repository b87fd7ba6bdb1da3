//! What one step of load measured: client side (from the load generator's samples) and
//! server side (Prometheus's scrapes of the service's pods, metrics-server's working set).

use std::time::Duration;

use clair_testenv::load::{Class, Sample};
use serde::{Deserialize, Serialize};

use crate::support::TestEnv;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Service {
    Indexer,
    Matcher,
    Notifier,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Self::Indexer => "indexer",
            Self::Matcher => "matcher",
            Self::Notifier => "notifier",
        }
    }

    /// The API name in Clair's HTTP series (`clair_http_<api>_...`).
    fn api(self) -> &'static str {
        match self {
            Self::Indexer => "indexerv1",
            Self::Matcher => "matcherv1",
            Self::Notifier => "notificationv1",
        }
    }
}

/// The figures of one step.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepFigures {
    pub service: Service,
    pub replicas: i32,
    #[serde(serialize_with = "class_name", deserialize_with = "class_of")]
    pub class: Class,
    pub clients: usize,
    /// Set for a step whose manifests are not the typical ones.
    pub label: Option<String>,
    pub seconds: f64,
    pub requests: usize,
    /// Answered, not refused: 2xx and 4xx other than 429.
    pub answered: usize,
    pub refused: usize,
    /// No answer, or a 5xx.
    pub failed: usize,
    /// Answered requests per second.
    pub throughput: f64,
    /// Of answered requests, seconds.
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub server: ServerFigures,
}

fn class_name<S: serde::Serializer>(class: &Class, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{class:?}"))
}

fn class_of<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Class, D::Error> {
    let name = String::deserialize(d)?;
    [
        Class::New,
        Class::Known,
        Class::Same,
        Class::Report,
        Class::Notification,
    ]
    .into_iter()
    .find(|c| format!("{c:?}") == name)
    .ok_or_else(|| serde::de::Error::custom(format!("no class {name}")))
}

impl StepFigures {
    pub fn of(
        service: Service,
        replicas: i32,
        class: Class,
        clients: usize,
        samples: &[Sample],
        took: Duration,
        server: ServerFigures,
    ) -> Self {
        let answered: Vec<&Sample> = samples.iter().filter(|s| answered(s.status)).collect();
        let refused = samples.iter().filter(|s| s.status == 429).count();
        let failed = samples.iter().filter(|s| failed(s.status)).count();
        let mut latencies: Vec<f64> = answered.iter().map(|s| s.latency.as_secs_f64()).collect();
        latencies.sort_by(f64::total_cmp);
        Self {
            service,
            replicas,
            class,
            clients,
            label: None,
            seconds: took.as_secs_f64(),
            requests: samples.len(),
            answered: answered.len(),
            refused,
            failed,
            throughput: answered.len() as f64 / took.as_secs_f64().max(1.0),
            p50: percentile(&latencies, 0.50),
            p99: percentile(&latencies, 0.99),
            server,
        }
    }

    /// The p99 of a step of new manifests.
    pub fn p99_new(&self) -> Option<f64> {
        (self.class == Class::New).then_some(self.p99).flatten()
    }

    /// A progress line for the study's log.
    pub fn line(&self) -> String {
        format!(
            "{} x{} {:?} {} clients: {} answered ({:.2}/s), {} refused, {} failed, p50 {} p99 {}, CPU {} cores",
            self.service.name(),
            self.replicas,
            self.class,
            self.clients,
            self.answered,
            self.throughput,
            self.refused,
            self.failed,
            seconds(self.p50),
            seconds(self.p99),
            figure(self.server.cpu_cores, 2),
        )
    }
}

pub fn answered(status: u16) -> bool {
    (200..500).contains(&status) && status != 429
}

pub fn failed(status: u16) -> bool {
    status == 0 || status >= 500
}

/// The `q` quantile of sorted `values` (nearest rank).
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

pub fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |v| format!("{v:.2} s"))
}

pub fn figure(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "–".to_string(), |v| format!("{v:.decimals$}"))
}

/// What the service's pods reported over a step's window, summed or maxed over its pods;
/// `None` where a series is missing (the notifier has no pool series).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerFigures {
    /// CPU used, cores (rate of `process_cpu_seconds_total`, summed over pods).
    pub cpu_cores: Option<f64>,
    /// CPU seconds used over the window, summed over pods.
    pub cpu_seconds: Option<f64>,
    /// The largest resident set of one pod over the window, MiB.
    pub rss_peak_mib: Option<f64>,
    /// The largest working set of one pod at the step's end (metrics-server), MiB.
    pub working_set_mib: Option<f64>,
    /// The most requests in flight at once, summed over pods (5 s resolution).
    pub in_flight_max: Option<f64>,
    /// The mean requests in flight, summed over pods.
    pub in_flight_mean: Option<f64>,
    /// 429s per second (`clair_http_concurrencylimited_total`).
    pub limited_per_second: Option<f64>,
    /// The server's own p99 of the step's handler, seconds.
    pub server_p99: Option<f64>,
    /// The most pool connections acquired at once, summed over pods.
    pub pool_acquired_max: Option<f64>,
    /// The pools' size, summed over pods.
    pub pool_max: Option<f64>,
    /// Acquires that had to wait for a connection, over the window.
    pub pool_waits: Option<f64>,
    /// The Go heap in use at its largest over the window, MiB, one pod.
    pub heap_peak_mib: Option<f64>,
    /// The whole machine's busy cores over the step (`/proc/stat`): everything shares two.
    pub machine_cores: Option<f64>,
    /// PostgreSQL's cores over the step (its processes alive at both ends, `/proc`).
    pub postgres_cores: Option<f64>,
}

/// A process's command name and its user and system CPU seconds so far (`/proc/PID/stat`:
/// utime and stime are fields 14 and 15, after the name, which may hold spaces, in ticks
/// of 1/100 s).
pub fn process_cpu(pid: u32) -> Option<(String, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((name.to_string(), ticks / 100.0))
}

/// CPU seconds so far: the machine's busy time, and PostgreSQL's by process.
pub struct HostCpu {
    busy: f64,
    postgres: std::collections::HashMap<u32, f64>,
    at: std::time::Instant,
}

impl HostCpu {
    pub fn now() -> Self {
        let busy = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|stat| {
                let fields: Vec<f64> = stat
                    .lines()
                    .next()?
                    .split_whitespace()
                    .skip(1)
                    .filter_map(|f| f.parse().ok())
                    .collect();
                // user nice system idle iowait irq softirq steal, in ticks of 1/100 s.
                let total: f64 = fields.iter().take(8).sum();
                Some((total - fields.get(3)? - fields.get(4)?) / 100.0)
            })
            .unwrap_or(0.0);
        let mut postgres = std::collections::HashMap::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some((name, seconds)) = process_cpu(pid)
                && name == "postgres"
            {
                postgres.insert(pid, seconds);
            }
        }
        Self {
            busy,
            postgres,
            at: std::time::Instant::now(),
        }
    }

    /// (machine cores, PostgreSQL cores) since `earlier`.
    pub fn since(&self, earlier: &Self) -> (Option<f64>, Option<f64>) {
        let seconds = self.at.duration_since(earlier.at).as_secs_f64();
        if seconds <= 0.0 {
            return (None, None);
        }
        let postgres: f64 = self
            .postgres
            .iter()
            .filter_map(|(pid, now)| Some(now - earlier.postgres.get(pid)?))
            .sum();
        (
            Some((self.busy - earlier.busy) / seconds),
            Some(postgres / seconds),
        )
    }
}

impl ServerFigures {
    /// Reads the figures of `service` in `ns` over the `window` that ended `ago`.
    pub async fn read(
        env: &TestEnv,
        prometheus: &str,
        ns: &str,
        service: Service,
        window: Duration,
        ago: Duration,
    ) -> Self {
        let pods = format!(r#"namespace="{ns}",pod=~"clair-{}-.*""#, service.name());
        let w = format!("{}s", window.as_secs().max(10));
        let offset = if ago.is_zero() {
            String::new()
        } else {
            format!(" offset {}s", ago.as_secs())
        };
        let api = service.api();
        let handler = match service {
            Service::Indexer => r#",handler="/indexer/api/v1/index_report""#,
            Service::Matcher => r#",handler="/matcher/api/v1/vulnerability_report/""#,
            Service::Notifier => "",
        };
        let value = |query: String| async move {
            crate::autoscaling::prometheus_value(prometheus, &query)
                .await
                .ok()
                .flatten()
                .filter(|v| v.is_finite())
        };
        Self {
            cpu_cores: value(format!(
                "sum(rate(process_cpu_seconds_total{{{pods}}}[{w}]{offset}))"
            ))
            .await,
            cpu_seconds: value(format!(
                "sum(increase(process_cpu_seconds_total{{{pods}}}[{w}]{offset}))"
            ))
            .await,
            rss_peak_mib: value(format!(
                "max(max_over_time(process_resident_memory_bytes{{{pods}}}[{w}]{offset})) / 1048576"
            ))
            .await,
            working_set_mib: working_set(env, ns, service),
            in_flight_max: value(format!(
                "max_over_time(sum(clair_http_{api}_in_flight_requests{{{pods}{handler}}})[{w}:5s]{offset})"
            ))
            .await,
            in_flight_mean: value(format!(
                "avg_over_time(sum(clair_http_{api}_in_flight_requests{{{pods}{handler}}})[{w}:5s]{offset})"
            ))
            .await,
            limited_per_second: value(format!(
                "sum(rate(clair_http_concurrencylimited_total{{{pods}}}[{w}]{offset}))"
            ))
            .await,
            server_p99: value(format!(
                "histogram_quantile(0.99, sum by (le) (rate(clair_http_{api}_request_duration_seconds_bucket{{{pods}{handler}}}[{w}]{offset})))"
            ))
            .await,
            pool_acquired_max: value(format!(
                "max_over_time(sum(pgxpool_acquired_conns{{{pods}}})[{w}:5s]{offset})"
            ))
            .await,
            pool_max: value(format!(
                "sum(max_over_time(pgxpool_max_conns{{{pods}}}[{w}]{offset}))"
            ))
            .await,
            pool_waits: value(format!(
                "sum(increase(pgxpool_empty_acquire{{{pods}}}[{w}]{offset}))"
            ))
            .await,
            heap_peak_mib: value(format!(
                "max(max_over_time(go_memstats_heap_inuse_bytes{{{pods}}}[{w}]{offset})) / 1048576"
            ))
            .await,
            machine_cores: None,
            postgres_cores: None,
        }
    }
}

/// The largest working set of the service's pods now, MiB, as metrics-server reads it from
/// the kubelet.
fn working_set(env: &TestEnv, ns: &str, service: Service) -> Option<f64> {
    let text = env
        .kubectl_ok(
            ns,
            &[
                "get",
                "--raw",
                &format!("/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods"),
            ],
        )
        .ok()?;
    let list: serde_json::Value = serde_json::from_str(&text).ok()?;
    let prefix = format!("clair-{}-", service.name());
    list["items"]
        .as_array()?
        .iter()
        .filter(|pod| {
            pod["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .flat_map(|pod| pod["containers"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["usage"]["memory"].as_str().and_then(mebibytes))
        .reduce(f64::max)
}

/// `123456Ki`, `12Mi`, `1Gi` or bytes, in MiB.
pub fn mebibytes(quantity: &str) -> Option<f64> {
    let (number, scale) = [("Ki", 1.0 / 1024.0), ("Mi", 1.0), ("Gi", 1024.0)]
        .iter()
        .find_map(|(suffix, scale)| quantity.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((quantity, 1.0 / 1048576.0));
    number.parse::<f64>().ok().map(|n| n * scale)
}
