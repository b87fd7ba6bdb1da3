//! Each resource's phase, time in its phase and replicas, read from the controllers' caches
//! when Prometheus scrapes: the series always match what the cluster holds, and a deleted
//! resource's series disappear with it. Only the current phase has a series (value 1), so a
//! fleet of resources costs one phase series each.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

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
    /// For a `Clair` whose notifier's deliveries are counted: whether they fail (its
    /// `NotificationsDelivered` condition False, or True).
    pub deliveries_failing: Option<bool>,
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
            deliveries_failing: status
                .into_iter()
                .flat_map(|s| &s.conditions)
                .find(|c| c.type_ == "NotificationsDelivered")
                .and_then(|c| match c.status.as_str() {
                    "True" => Some(false),
                    "False" => Some(true),
                    _ => None,
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
            deliveries_failing: None,
        }
    }
}

type Sampler = Box<dyn Fn() -> Vec<Sample> + Send + Sync>;

/// The caches to sample: one per controller (per namespace, in namespace scope), and the
/// autoscalers' tallies, reported for the resources the caches still hold.
#[derive(Default)]
pub struct Resources {
    samplers: RwLock<BTreeMap<u64, Sampler>>,
    next_sampler: std::sync::atomic::AtomicU64,
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

/// Keeps a store sampled; dropping it stops that.
pub struct Sampling {
    resources: Arc<Resources>,
    id: u64,
}

impl Drop for Sampling {
    fn drop(&mut self) {
        if let Ok(mut samplers) = self.resources.samplers.write() {
            samplers.remove(&self.id);
        }
    }
}

impl std::fmt::Debug for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resources").finish_non_exhaustive()
    }
}

impl Resources {
    /// Samples `store` at every scrape, for as long as the guard lives (a controller stopped
    /// by a replica that no longer leads leaves no stale series).
    pub fn watch<K: Sampled>(self: &Arc<Self>, store: Store<K>) -> Sampling {
        let sampler: Sampler = Box::new(move || store.state().iter().map(|k| k.sample()).collect());
        let id = self
            .next_sampler
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut samplers) = self.samplers.write() {
            samplers.insert(id, sampler);
        }
        Sampling {
            resources: self.clone(),
            id,
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
            .map(|samplers| samplers.values().flat_map(|s| s()).collect())
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

/// One family: its descriptor, then a series for each `(labels, value)`.
fn family<L, M>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    series: impl IntoIterator<Item = (L, M)>,
) -> Result<(), std::fmt::Error>
where
    L: EncodeLabelSet,
    M: EncodeMetric + prometheus_client::metrics::TypedMetric,
{
    let mut family = encoder.encode_descriptor(name, help, unit, M::TYPE)?;
    for (labels, metric) in series {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for Resources {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let samples = self.samples();
        let now = Timestamp::now();

        let age =
            |since: Timestamp| ConstGauge::new(now.duration_since(since).as_secs_f64().max(0.0));
        family(
            &mut encoder,
            "resource_phase",
            "The phase each resource is in (1); see docs/runbooks/PHASE.md",
            None,
            samples.iter().filter_map(|sample| {
                let labels = PhaseLabels {
                    kind: sample.kind.clone(),
                    namespace: sample.namespace.clone(),
                    name: sample.name.clone(),
                    phase: sample.phase?.to_string(),
                };
                Some((labels, ConstGauge::new(1i64)))
            }),
        )?;
        family(
            &mut encoder,
            "resource_phase_age",
            "How long each resource has been in its current phase",
            Some(&Unit::Seconds),
            samples
                .iter()
                .filter_map(|s| Some((s.labels(), age(s.phase_since?)))),
        )?;
        family(
            &mut encoder,
            "service_replicas",
            "Pods of each service: asked for in the spec (absent under an autoscaler), current and ready",
            None,
            samples.iter().flat_map(|sample| {
                let counts = sample.replicas;
                [
                    ("spec", counts.and_then(|c| c.spec)),
                    ("current", counts.map(|c| c.current)),
                    ("ready", counts.map(|c| c.ready)),
                ]
                .into_iter()
                .filter_map(move |(state, value)| {
                    let labels = ReplicaLabels {
                        kind: sample.kind.clone(),
                        namespace: sample.namespace.clone(),
                        name: sample.name.clone(),
                        state: state.to_string(),
                    };
                    Some((labels, ConstGauge::new(i64::from(value?))))
                })
            }),
        )?;
        family(
            &mut encoder,
            "updater_last_success_age",
            "How old a Clair's vulnerability data is: time since its updater CronJob last succeeded",
            Some(&Unit::Seconds),
            samples
                .iter()
                .filter_map(|s| Some((s.labels(), age(s.updaters?.last_success?)))),
        )?;
        family(
            &mut encoder,
            "updater_failed_runs",
            "Failed runs among the updater Jobs the CronJob keeps (its last three)",
            None,
            samples.iter().filter_map(|s| {
                Some((
                    s.labels(),
                    ConstGauge::new(i64::from(s.updaters?.failed_runs)),
                ))
            }),
        )?;
        family(
            &mut encoder,
            "updater_stale_after",
            "When a Clair's vulnerability data counts as stale (spec.updaters.staleAfterSeconds, or twice the schedule's interval)",
            Some(&Unit::Seconds),
            samples.iter().filter_map(|s| {
                Some((
                    s.labels(),
                    ConstGauge::new(s.updaters?.stale_after_seconds?),
                ))
            }),
        )?;
        family(
            &mut encoder,
            "notifications_failing",
            "1 while a Clair's notifier has notifications it could not deliver for two delivery intervals (NotificationsDelivered False), 0 while it delivers; absent where not counted",
            None,
            samples.iter().filter_map(|s| {
                Some((
                    s.labels(),
                    ConstGauge::new(i64::from(s.deliveries_failing?)),
                ))
            }),
        )?;
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
        let series = budgets.iter().flat_map(|(key, engines)| {
            engines.iter().flat_map(move |engine| {
                [("demand", Some(engine.demand)), ("limit", engine.limit)]
                    .into_iter()
                    .filter_map(move |(state, value)| {
                        let labels = BudgetLabels {
                            kind: key.kind.clone(),
                            namespace: key.namespace.clone(),
                            name: key.name.clone(),
                            engine: engine.engine.clone(),
                            state: state.to_string(),
                        };
                        Some((labels, ConstGauge::new(i64::from(value?))))
                    })
            })
        });
        family(
            encoder,
            "database_connections",
            "A Clair's database connections per engine: the most its pools may open (demand) against the engine's max_connections (limit)",
            None,
            series,
        )?;
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

    family(
        encoder,
        "autoscaler_replicas",
        "A service's autoscaler: the replicas it wants, and its minReplicas and maxReplicas",
        None,
        tallies.iter().flat_map(|(key, tally)| {
            let reading = &tally.last;
            [
                ("desired", reading.desired),
                ("min", reading.min),
                ("max", reading.max),
            ]
            .map(|(state, value)| (with_state(key, state), ConstGauge::new(i64::from(value))))
        }),
    )?;
    family(
        encoder,
        "autoscaler_metric",
        "Each autoscaler metric's current value and target (utilization in percent where the autoscaler uses it)",
        None,
        tallies.iter().flat_map(|(key, tally)| {
            tally
                .last
                .metrics
                .iter()
                .flat_map(move |(metric, (current, target))| {
                    [("current", current), ("target", target)]
                        .into_iter()
                        .filter_map(move |(value, number)| {
                            let labels = AutoscalerMetricLabels {
                                kind: key.kind.clone(),
                                namespace: key.namespace.clone(),
                                name: key.name.clone(),
                                metric: metric.clone(),
                                value: value.to_string(),
                            };
                            Some((labels, ConstGauge::new((*number)?)))
                        })
                })
        }),
    )?;
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
        family(
            encoder,
            name,
            help,
            None,
            tallies
                .iter()
                .map(|(key, tally)| (key_labels(key), ConstCounter::new(count(tally)))),
        )?;
    }
    family(
        encoder,
        "autoscaler_pinned",
        "Time the autoscaler wanted maxReplicas (state=max) or minReplicas (state=min)",
        Some(&Unit::Seconds),
        tallies.iter().flat_map(|(key, tally)| {
            let (at_max, at_min) = tally.pinned(now);
            [("max", at_max), ("min", at_min)].map(|(state, time)| {
                (
                    with_state(key, state),
                    ConstCounter::new(time.as_secs_f64()),
                )
            })
        }),
    )?;
    family(
        encoder,
        "autoscaler_last_scale_up_ready",
        "How long the last scale-up took until as many pods were ready as it asked for",
        Some(&Unit::Seconds),
        tallies.iter().filter_map(|(key, tally)| {
            let took = tally.last_scale_up_ready?;
            Some((key_labels(key), ConstGauge::new(took.as_secs_f64())))
        }),
    )?;
    Ok(())
}
