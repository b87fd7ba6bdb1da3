//! Each resource's phase, time in its phase and replicas, read from the controllers' caches
//! when Prometheus scrapes: the series always match what the cluster holds, and a deleted
//! resource's series disappear with it. Only the current phase has a series (value 1), so a
//! fleet of resources costs one phase series each.

use std::sync::RwLock;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use super::autoscaling::{Key, Tallies};
use crate::api::service::ClairService;
use crate::api::{Clair, Phase};

/// What a scrape reports of one resource.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub phase: Option<Phase>,
    pub phase_since: Option<Timestamp>,
    /// For the service kinds: the replicas asked for (none when an autoscaler decides),
    /// running and ready.
    pub replicas: Option<Replicas>,
    /// For a `Clair` whose CronJob runs the updaters: its last success, failed runs kept,
    /// and when data counts as stale.
    pub updaters: Option<UpdaterSample>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpdaterSample {
    pub last_success: Option<Timestamp>,
    pub failed_runs: i32,
    pub stale_after_seconds: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replicas {
    pub spec: Option<i32>,
    pub current: i32,
    pub ready: i32,
}

/// A resource kind the operator reconciles, as a scrape reports it.
pub trait Sampled: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static {
    fn sample(&self) -> Sample;
}

impl Sampled for Clair {
    fn sample(&self) -> Sample {
        let status = self.status.as_ref();
        Sample {
            kind: "Clair".to_string(),
            namespace: self.namespace().unwrap_or_default(),
            name: self.name_any(),
            phase: status.and_then(|s| s.phase),
            phase_since: status.and_then(|s| s.phase_since.as_ref()).map(|t| t.0),
            replicas: None,
            updaters: status
                .and_then(|s| s.updaters.as_ref())
                .map(|u| UpdaterSample {
                    last_success: u.last_success_time.as_ref().map(|t| t.0),
                    failed_runs: u.failed_runs,
                    stale_after_seconds: u.stale_after_seconds,
                }),
        }
    }
}

impl<K> Sampled for K
where
    K: ClairService + kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    fn sample(&self) -> Sample {
        let status = self.service_status();
        let spec = self.service_spec();
        Sample {
            kind: K::kind(&()).into_owned(),
            namespace: self.namespace().unwrap_or_default(),
            name: self.name_any(),
            phase: status.and_then(|s| s.phase),
            phase_since: status.and_then(|s| s.phase_since.as_ref()).map(|t| t.0),
            replicas: Some(Replicas {
                spec: spec.autoscaling.is_none().then_some(spec.replicas),
                current: status.map_or(0, |s| s.replicas),
                ready: status.map_or(0, |s| s.ready_replicas),
            }),
            updaters: None,
        }
    }
}

type Sampler = Box<dyn Fn() -> Vec<Sample> + Send + Sync>;

/// The caches to sample: one per controller (per namespace, in namespace scope), and the
/// autoscalers' tallies, reported for the resources the caches still hold.
#[derive(Default)]
pub struct Resources {
    samplers: RwLock<Vec<Sampler>>,
    pub autoscalers: Tallies,
    /// Each `Clair`'s database connections, by engine: what its pools may open at most
    /// against the engine's `max_connections`.
    budgets: std::sync::Mutex<std::collections::BTreeMap<Key, Vec<EngineBudget>>>,
}

/// One engine's connection budget. `engine` is a label that leaks nothing of the
/// connection string: the managed engine's name, or `external-N` in the order of the hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineBudget {
    pub engine: String,
    pub demand: u32,
    pub limit: Option<u32>,
}

impl std::fmt::Debug for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resources").finish_non_exhaustive()
    }
}

impl Resources {
    /// Samples `store` at every scrape from now on.
    pub fn watch<K: Sampled>(&self, store: Store<K>) {
        let sampler: Sampler = Box::new(move || store.state().iter().map(|k| k.sample()).collect());
        if let Ok(mut samplers) = self.samplers.write() {
            samplers.push(sampler);
        }
    }

    /// Records `key`'s connection budgets, as its last reconcile computed them.
    pub fn set_budgets(&self, key: Key, budgets: Vec<EngineBudget>) {
        if let Ok(mut all) = self.budgets.lock() {
            all.insert(key, budgets);
        }
    }

    /// Every cached resource, now.
    pub fn samples(&self) -> Vec<Sample> {
        self.samplers
            .read()
            .map(|samplers| samplers.iter().flat_map(|s| s()).collect())
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    kind: String,
    namespace: String,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    kind: String,
    namespace: String,
    name: String,
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaLabels {
    kind: String,
    namespace: String,
    name: String,
    /// `spec`, `current` or `ready`.
    state: String,
}

impl Sample {
    fn labels(&self) -> ResourceLabels {
        ResourceLabels {
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

impl Collector for Resources {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let samples = self.samples();
        let now = Timestamp::now();

        let gauge = ConstGauge::new(1i64);
        let mut phases = encoder.encode_descriptor(
            "resource_phase",
            "The phase each resource is in (1); see docs/runbooks/PHASE.md",
            None,
            gauge.metric_type(),
        )?;
        for sample in &samples {
            let Some(phase) = sample.phase else { continue };
            let labels = PhaseLabels {
                kind: sample.kind.clone(),
                namespace: sample.namespace.clone(),
                name: sample.name.clone(),
                phase: phase.to_string(),
            };
            ConstGauge::new(1i64).encode(phases.encode_family(&labels)?)?;
        }

        let mut ages = encoder.encode_descriptor(
            "resource_phase_age",
            "How long each resource has been in its current phase",
            Some(&Unit::Seconds),
            gauge.metric_type(),
        )?;
        for sample in &samples {
            let Some(since) = sample.phase_since else {
                continue;
            };
            let seconds = now.duration_since(since).as_secs_f64().max(0.0);
            ConstGauge::new(seconds).encode(ages.encode_family(&sample.labels())?)?;
        }

        let mut replicas = encoder.encode_descriptor(
            "service_replicas",
            "Pods of each service: asked for in the spec (absent under an autoscaler), current and ready",
            None,
            gauge.metric_type(),
        )?;
        for sample in &samples {
            let Some(counts) = sample.replicas else {
                continue;
            };
            let states = [
                ("spec", counts.spec),
                ("current", Some(counts.current)),
                ("ready", Some(counts.ready)),
            ];
            for (state, value) in states {
                let Some(value) = value else { continue };
                let labels = ReplicaLabels {
                    kind: sample.kind.clone(),
                    namespace: sample.namespace.clone(),
                    name: sample.name.clone(),
                    state: state.to_string(),
                };
                ConstGauge::new(i64::from(value)).encode(replicas.encode_family(&labels)?)?;
            }
        }
        let mut age = encoder.encode_descriptor(
            "updater_last_success_age",
            "How old a Clair's vulnerability data is: time since its updater CronJob last succeeded",
            Some(&Unit::Seconds),
            gauge.metric_type(),
        )?;
        for sample in &samples {
            let Some(success) = sample.updaters.and_then(|u| u.last_success) else {
                continue;
            };
            let seconds = now.duration_since(success).as_secs_f64().max(0.0);
            ConstGauge::new(seconds).encode(age.encode_family(&sample.labels())?)?;
        }
        let mut failed = encoder.encode_descriptor(
            "updater_failed_runs",
            "Failed runs among the updater Jobs the CronJob keeps (its last three)",
            None,
            gauge.metric_type(),
        )?;
        for sample in &samples {
            let Some(updaters) = sample.updaters else {
                continue;
            };
            ConstGauge::new(i64::from(updaters.failed_runs))
                .encode(failed.encode_family(&sample.labels())?)?;
        }
        let mut stale = encoder.encode_descriptor(
            "updater_stale_after",
            "When a Clair's vulnerability data counts as stale (spec.updaters.staleAfterSeconds, or twice the schedule's interval)",
            Some(&Unit::Seconds),
            gauge.metric_type(),
        )?;
        for sample in &samples {
            let Some(seconds) = sample.updaters.and_then(|u| u.stale_after_seconds) else {
                continue;
            };
            ConstGauge::new(seconds).encode(stale.encode_family(&sample.labels())?)?;
        }
        let present: std::collections::HashSet<Key> = samples
            .iter()
            .map(|s| Key {
                kind: s.kind.clone(),
                namespace: s.namespace.clone(),
                name: s.name.clone(),
            })
            .collect();
        self.encode_budgets(&present, &mut encoder)?;
        encode_autoscalers(self, &present, &mut encoder)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabels {
    kind: String,
    namespace: String,
    name: String,
    engine: String,
    /// `demand` (pool × most replicas, summed over the services on the engine) or `limit`
    /// (`max_connections`).
    state: String,
}

impl Resources {
    fn encode_budgets(
        &self,
        present: &std::collections::HashSet<Key>,
        encoder: &mut DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let exists = |key: &Key| present.contains(key);
        let budgets: Vec<(Key, Vec<EngineBudget>)> = match self.budgets.lock() {
            Ok(mut all) => {
                all.retain(|key, _| exists(key));
                all.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
            }
            Err(_) => Vec::new(),
        };
        let mut family = encoder.encode_descriptor(
            "database_connections",
            "A Clair's database connections per engine: the most its pools may open (demand) against the engine's max_connections (limit)",
            None,
            ConstGauge::new(0i64).metric_type(),
        )?;
        for (key, engines) in &budgets {
            for engine in engines {
                for (state, value) in [("demand", Some(engine.demand)), ("limit", engine.limit)] {
                    let Some(value) = value else { continue };
                    let labels = BudgetLabels {
                        kind: key.kind.clone(),
                        namespace: key.namespace.clone(),
                        name: key.name.clone(),
                        engine: engine.engine.clone(),
                        state: state.to_string(),
                    };
                    ConstGauge::new(i64::from(value)).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AutoscalerLabels {
    kind: String,
    namespace: String,
    name: String,
    /// `desired`, `min` or `max` for replicas; `max` or `min` for time pinned.
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AutoscalerMetricLabels {
    kind: String,
    namespace: String,
    name: String,
    metric: String,
    /// `current` or `target`.
    value: String,
}

fn key_labels(key: &Key) -> ResourceLabels {
    ResourceLabels {
        kind: key.kind.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    }
}

fn with_state(key: &Key, state: &str) -> AutoscalerLabels {
    AutoscalerLabels {
        kind: key.kind.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        state: state.to_string(),
    }
}

/// The autoscalers of the resources `present`.
fn encode_autoscalers(
    resources: &Resources,
    present: &std::collections::HashSet<Key>,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    use prometheus_client::metrics::counter::ConstCounter;
    let exists = |key: &Key| present.contains(key);
    let tallies = resources.autoscalers.current(exists);
    let now = std::time::Instant::now();
    let gauge = ConstGauge::new(0i64).metric_type();
    let counter = ConstCounter::new(0u64).metric_type();

    let mut replicas = encoder.encode_descriptor(
        "autoscaler_replicas",
        "A service's autoscaler: the replicas it wants, and its minReplicas and maxReplicas",
        None,
        gauge,
    )?;
    for (key, tally) in &tallies {
        let reading = &tally.last;
        for (state, value) in [
            ("desired", reading.desired),
            ("min", reading.min),
            ("max", reading.max),
        ] {
            ConstGauge::new(i64::from(value))
                .encode(replicas.encode_family(&with_state(key, state))?)?;
        }
    }

    let mut metrics = encoder.encode_descriptor(
        "autoscaler_metric",
        "Each autoscaler metric's current value and target (utilization in percent where the autoscaler uses it)",
        None,
        gauge,
    )?;
    for (key, tally) in &tallies {
        for (metric, (current, target)) in &tally.last.metrics {
            for (value, number) in [("current", current), ("target", target)] {
                let Some(number) = number else { continue };
                let labels = AutoscalerMetricLabels {
                    kind: key.kind.clone(),
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                    metric: metric.clone(),
                    value: value.to_string(),
                };
                ConstGauge::new(*number).encode(metrics.encode_family(&labels)?)?;
            }
        }
    }

    type Count = fn(&super::autoscaling::Tally) -> u64;
    let counts: [(&str, &str, Count); 3] = [
        (
            "autoscaler_scale_ups",
            "Times the autoscaler asked for more replicas",
            |t| t.scale_ups,
        ),
        (
            "autoscaler_scale_downs",
            "Times the autoscaler asked for fewer replicas",
            |t| t.scale_downs,
        ),
        (
            "autoscaler_reversals",
            "Scalings the other way within 10 minutes of the last one (flapping)",
            |t| t.reversals,
        ),
    ];
    for (name, help, count) in counts {
        let mut family = encoder.encode_descriptor(name, help, None, counter)?;
        for (key, tally) in &tallies {
            ConstCounter::new(count(tally)).encode(family.encode_family(&key_labels(key))?)?;
        }
    }

    let mut pinned = encoder.encode_descriptor(
        "autoscaler_pinned",
        "Time the autoscaler wanted maxReplicas (state=max) or minReplicas (state=min)",
        Some(&Unit::Seconds),
        counter,
    )?;
    for (key, tally) in &tallies {
        let (at_max, at_min) = tally.pinned(now);
        for (state, time) in [("max", at_max), ("min", at_min)] {
            ConstCounter::new(time.as_secs_f64())
                .encode(pinned.encode_family(&with_state(key, state))?)?;
        }
    }

    let mut ready = encoder.encode_descriptor(
        "autoscaler_last_scale_up_ready",
        "How long the last scale-up took until as many pods were ready as it asked for",
        Some(&Unit::Seconds),
        gauge,
    )?;
    for (key, tally) in &tallies {
        let Some(took) = tally.last_scale_up_ready else {
            continue;
        };
        ConstGauge::new(took.as_secs_f64()).encode(ready.encode_family(&key_labels(key))?)?;
    }
    Ok(())
}
