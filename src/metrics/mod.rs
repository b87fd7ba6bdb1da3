//! The operator's Prometheus metrics, served as OpenMetrics text at `/metrics` beside the
//! health endpoints ([`server`]): what the controllers, the applier, the webhooks and the API
//! client count, and each resource's phase and replicas read from the controllers' caches at
//! scrape time ([`resources`]), so a deleted resource's series go with it. Names, units and
//! help: `docs/metrics.md`.

pub mod access;
pub mod autoscaling;
pub mod certificate;
pub mod client;
pub mod health;
pub mod resources;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// What the operator's parts report into: the metrics and the health checks.
#[derive(Clone, Debug)]
pub struct Telemetry {
    pub metrics: Arc<Metrics>,
    pub health: Arc<health::Health>,
}

impl Telemetry {
    pub fn new() -> Self {
        Self {
            metrics: Metrics::new(),
            health: health::Health::new(),
        }
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::new()
    }
}

/// A histogram family whose buckets are set once for all its series.
pub type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub kind: String,
    /// `success` or `error`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
    /// What failed: `ObserveFailed`, `ApplyFailed`, `StatusWriteFailed`, ...
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    pub kind: String,
    pub from: String,
    pub to: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApplyLabels {
    /// The kind of the owned object written.
    pub kind: String,
    /// `created`, `changed` or `unchanged`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `get`, `list`, `watch`, `create`, `patch`, `update`, `delete`.
    pub verb: String,
    /// The resource (plural, with `/subresource`), or `discovery`.
    pub resource: String,
    /// The HTTP status, or `error` when no answer came.
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// `ok`, or why the database is not ready (the `DatabaseReady` condition's reason).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// `config`, `resources` or `template`.
    pub webhook: String,
    /// `allowed`, `denied`, or `error` (a request the webhook could not read).
    pub verdict: String,
}

/// What the webhook server refused unanswered, as counted in `webhook_refusals_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "lowercase")]
pub enum Refusal {
    /// A connection over its peer's or the server's bound (`webhook::limits`).
    Connections,
    /// A request whose body is over the largest review.
    Body,
    /// A request that passed its deadline (its body sent too slowly, or its turn too long
    /// in coming).
    Deadline,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    /// What was over its bound ([`Refusal`]), or why a scrape was refused
    /// ([`access::Refused`]).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: String,
}

/// Every metric the operator records, and the registry that serves them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_duration: HistogramFamily<KindLabels>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub transitions: Family<TransitionLabels, Counter>,
    pub applies: Family<ApplyLabels, Counter>,
    pub api_requests: Family<RequestLabels, Counter>,
    pub database_probe_duration: HistogramFamily<ProbeLabels>,
    pub admissions: Family<AdmissionLabels, Counter>,
    pub admission_duration: HistogramFamily<WebhookLabels>,
    /// Connections and requests the webhook server refused unanswered, by bound.
    pub webhook_refusals: Family<RefusalLabels, Counter>,
    /// Scrapes of `/metrics` refused, by why (`access::Refused`).
    pub scrape_refusals: Family<RefusalLabels, Counter>,
    /// The operator's own resources it cannot read (stored under an older schema, or a
    /// free-form part that does not fit), by kind.
    pub unreadable: Family<KindLabels, prometheus_client::metrics::gauge::Gauge>,
    /// 1 while this replica runs the controllers (it holds the leader's Lease).
    pub leader: prometheus_client::metrics::gauge::Gauge,
    /// The resources the controllers cache, sampled at scrape time.
    pub resources: Arc<resources::Resources>,
}

/// Buckets from 5 ms to about 20 s: reconciles, probes and admissions all fit.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 13))
}

/// A counter family registered as `name` (`_total` is added).
fn counter<L>(registry: &mut Registry, name: &str, help: &str) -> Family<L, Counter>
where
    L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
{
    let family = Family::default();
    registry.register(name, help, family.clone());
    family
}

/// A histogram family of durations in seconds, registered as `name` (`_seconds` is added).
fn histogram<L>(registry: &mut Registry, name: &str, help: &str) -> HistogramFamily<L>
where
    L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
{
    let family: HistogramFamily<L> = Family::new_with_constructor(latency);
    registry.register_with_unit(name, help, Unit::Seconds, family.clone());
    family
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::with_prefix("clair_operator");
        let reconciles = counter(
            &mut registry,
            "reconciles",
            "Reconciles by kind and result (success, error)",
        );
        let reconcile_duration = histogram(
            &mut registry,
            "reconcile_duration",
            "Time one reconcile took, from reading the resource to writing its status",
        );
        let reconcile_errors = counter(
            &mut registry,
            "reconcile_errors",
            "Failed reconciles by kind and what failed",
        );
        let transitions = counter(
            &mut registry,
            "phase_transitions",
            "Phase transitions by kind, from and to",
        );
        let applies = counter(
            &mut registry,
            "applies",
            "Owned objects written or found current, by object kind and outcome (created, changed, unchanged, deleted)",
        );
        let api_requests = counter(
            &mut registry,
            "api_requests",
            "Requests the operator made to the Kubernetes API, by verb, resource and HTTP status",
        );
        let database_probe_duration = histogram(
            &mut registry,
            "database_probe_duration",
            "Time one database check took (connect, version, max_connections), by result",
        );
        let admissions = counter(
            &mut registry,
            "webhook_admissions",
            "Admission reviews answered, by webhook and verdict",
        );
        let admission_duration = histogram(
            &mut registry,
            "webhook_admission_duration",
            "Time the webhook took to answer an admission review",
        );
        let webhook_refusals = counter(
            &mut registry,
            "webhook_refusals",
            "Connections and requests the webhook server refused unanswered, by the bound they passed (connections, body, deadline)",
        );
        // Every bound's series exists from the start, at zero.
        for refusal in <Refusal as strum::IntoEnumIterator>::iter() {
            let _ = webhook_refusals.get_or_create(&RefusalLabels {
                reason: refusal.to_string(),
            });
        }
        let scrape_refusals = counter(
            &mut registry,
            "metrics_scrape_refusals",
            "Scrapes of /metrics refused, by why (unauthenticated, forbidden, unavailable: the token could not be reviewed)",
        );
        for refused in <access::Refused as strum::IntoEnumIterator>::iter() {
            let _ = scrape_refusals.get_or_create(&RefusalLabels {
                reason: refused.to_string(),
            });
        }
        let unreadable = Family::default();
        registry.register(
            "unreadable_resources",
            "Resources of the operator's kinds it cannot decode, by kind: they are not reconciled until fixed (a Warning Event SpecUnreadable names the field)",
            unreadable.clone(),
        );
        let leader = prometheus_client::metrics::gauge::Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader's Lease and runs the controllers",
            leader.clone(),
        );
        let resources = Arc::new(resources::Resources::default());
        registry.register_collector(Box::new(resources.clone()));
        Arc::new(Self {
            registry,
            reconciles,
            reconcile_duration,
            reconcile_errors,
            transitions,
            applies,
            api_requests,
            database_probe_duration,
            admissions,
            admission_duration,
            webhook_refusals,
            scrape_refusals,
            unreadable,
            leader,
            resources,
        })
    }

    /// Everything, as OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// Creates the reconcile series of `kinds` at zero, errors by each of `reasons`
    /// included: they exist before anything happened, as Prometheus advises.
    pub fn expect_reconciles(&self, kinds: &[&str], reasons: &[&str]) {
        for kind in kinds {
            for result in ["success", "error"] {
                let _ = self.reconciles.get_or_create(&ReconcileLabels {
                    kind: kind.to_string(),
                    result: result.to_string(),
                });
            }
            let _ = self.unreadable.get_or_create(&KindLabels {
                kind: kind.to_string(),
            });
            for reason in reasons {
                let _ = self.reconcile_errors.get_or_create(&ErrorLabels {
                    kind: kind.to_string(),
                    reason: reason.to_string(),
                });
            }
        }
    }

    /// One reconcile of `kind` finished after `took`; `error` names what failed.
    pub fn reconciled(&self, kind: &str, took: Duration, error: Option<&str>) {
        let result = if error.is_some() { "error" } else { "success" };
        self.reconciles
            .get_or_create(&ReconcileLabels {
                kind: kind.to_string(),
                result: result.to_string(),
            })
            .inc();
        self.reconcile_duration
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .observe(took.as_secs_f64());
        if let Some(reason) = error {
            self.reconcile_errors
                .get_or_create(&ErrorLabels {
                    kind: kind.to_string(),
                    reason: reason.to_string(),
                })
                .inc();
        }
    }

    pub fn transition(&self, kind: &str, from: &str, to: &str) {
        self.transitions
            .get_or_create(&TransitionLabels {
                kind: kind.to_string(),
                from: from.to_string(),
                to: to.to_string(),
            })
            .inc();
    }

    pub fn applied(&self, kind: &str, outcome: &str) {
        self.applies
            .get_or_create(&ApplyLabels {
                kind: kind.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub fn database_probed(&self, result: &str, took: Duration) {
        self.database_probe_duration
            .get_or_create(&ProbeLabels {
                result: result.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// One connection or request the webhook server refused before answering it.
    pub fn refused(&self, refusal: Refusal) {
        self.webhook_refusals
            .get_or_create(&RefusalLabels {
                reason: refusal.to_string(),
            })
            .inc();
    }

    pub fn admitted(&self, webhook: &str, verdict: &str, took: Duration) {
        self.admissions
            .get_or_create(&AdmissionLabels {
                webhook: webhook.to_string(),
                verdict: verdict.to_string(),
            })
            .inc();
        self.admission_duration
            .get_or_create(&WebhookLabels {
                webhook: webhook.to_string(),
            })
            .observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_appear_in_the_text_with_their_labels() {
        let metrics = Metrics::new();
        metrics.reconciled("Clair", Duration::from_millis(30), None);
        metrics.reconciled("Clair", Duration::from_millis(30), Some("ApplyFailed"));
        metrics.transition("Clair", "Pending", "ConfigValid");
        let text = metrics.encode();
        assert!(
            text.contains(r#"clair_operator_reconciles_total{kind="Clair",result="success"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"clair_operator_reconcile_errors_total{kind="Clair",reason="ApplyFailed"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"clair_operator_reconcile_duration_seconds_count{kind="Clair"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"clair_operator_phase_transitions_total{kind="Clair",from="Pending",to="ConfigValid"} 1"#), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
