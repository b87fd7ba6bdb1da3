//! Reads only: the config a service resource references and the state of its Deployment,
//! turned into the observations the machine takes.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, MetricSpec, MetricStatus};

use crate::api::{
    AutoscalingEngine, ConfigSource, ServiceKind, ServiceSpec, ServiceStatus, TracingSpec,
};
use crate::clairconfig::{self, Document};
use crate::controller::capabilities::OptionalApi;
use crate::controller::error::ObserveError;
use crate::controller::observer::Observer;
use crate::images;
use crate::machine::observation::{ConfigObservation, DatabaseObservation};
use crate::machine::service::ServiceSnapshot;
use crate::render::autoscaling::{autoscaler_name, engine};
use crate::render::service::ConfigSnapshot;
use crate::render::traces;
use crate::sources::ObjectSource;

use super::workload::{DeploymentState, workload};

/// Everything one reconcile read about a service resource.
pub struct Observed {
    pub config: ConfigObservation,
    /// The validated, merged config, when it is valid.
    pub snapshot: Option<ConfigSnapshot>,
    /// The Deployment, when it exists: what the phase is decided from.
    pub deployment: Option<DeploymentState>,
    /// Whether the cluster serves ServiceMonitors.
    pub service_monitors: bool,
    /// Whether the cluster serves KEDA's ScaledObjects.
    pub scaled_objects: bool,
    /// The HorizontalPodAutoscaler that scales the service (the operator's, or KEDA's for
    /// the ScaledObject), when the spec asks for one and it exists.
    pub autoscaler: Option<HorizontalPodAutoscaler>,
    /// KEDA's HorizontalPodAutoscaler still exists while the spec asks for the operator's
    /// own (an engine switch under way): the operator's waits until KEDA's is gone, so that
    /// two autoscalers never scale one Deployment.
    pub engine_switching: bool,
}

/// Reads the config and the Deployment. `None` while the deployment controller has not
/// caught up with the last change (ours, most likely): its status describes the previous
/// spec, so it is judged once it has.
pub async fn observe(
    source: &impl Observer,
    kind: ServiceKind,
    namespace: &str,
    name: &str,
    spec: &ServiceSpec,
) -> Result<Option<Observed>, ObserveError> {
    // The Deployment first: while its status is stale nothing else is worth reading.
    let deployment = (source
        .deployment(kind.resource_kind(), namespace, name)
        .await)
        .map_err(ObserveError::reading(format!("Deployment {name}")))?;
    if deployment.as_ref().is_some_and(DeploymentState::is_stale) {
        return Ok(None);
    }
    let (config, snapshot) = match source
        .platform()
        .images
        .refusal(&images::service_images(spec))
    {
        Some(refusal) => (ConfigObservation::Invalid { message: refusal }, None),
        None => config(source, namespace, spec, kind).await?,
    };
    let scaled_objects = source.serves(OptionalApi::ScaledObject).await;
    let (config, snapshot) = match keda_refusal(spec, scaled_objects, source.platform()) {
        Some(message) => (ConfigObservation::Invalid { message }, None),
        None => (config, snapshot),
    };
    let read = |hpa: String| async move {
        (source
            .owned::<HorizontalPodAutoscaler>(namespace, &hpa)
            .await)
            .map_err(ObserveError::reading(format!(
                "HorizontalPodAutoscaler {hpa}"
            )))
    };
    let autoscaler = match autoscaler_name(name, spec.autoscaling.as_deref()) {
        Some(hpa) => read(hpa).await?,
        None => None,
    };
    let engine_switching = match spec.autoscaling.as_deref().map(engine) {
        Some(AutoscalingEngine::Hpa) if scaled_objects => {
            read(format!("keda-hpa-{name}")).await?.is_some()
        }
        _ => false,
    };
    Ok(Some(Observed {
        config,
        snapshot,
        deployment,
        service_monitors: source.serves(OptionalApi::ServiceMonitor).await,
        scaled_objects,
        autoscaler,
        engine_switching,
    }))
}

/// Why the spec cannot be served: it asks for KEDA where the cluster serves no KEDA, or
/// names a Prometheus address KEDA must not be given.
pub fn keda_refusal(
    spec: &ServiceSpec,
    scaled_objects: bool,
    platform: &crate::platform::Platform,
) -> Option<String> {
    let asks = spec
        .autoscaling
        .as_ref()
        .is_some_and(|a| engine(a) == AutoscalingEngine::Keda);
    (asks && !scaled_objects)
        .then(|| {
            "spec.autoscaling.engine: KEDA, but this cluster does not serve KEDA's \
             keda.sh/v1alpha1 ScaledObject: install KEDA, or use engine HPA"
                .to_string()
        })
        .or_else(|| platform.prometheus_refusal(spec.autoscaling.as_deref(), "spec"))
}

/// What the tuning metrics take from an autoscaler: its bounds, what it wants, and each
/// metric's current value against its target; `ready`: the pods ready now.
pub fn autoscaler_reading(
    autoscaler: &HorizontalPodAutoscaler,
    ready: i32,
) -> Option<crate::metrics::autoscaling::Reading> {
    let spec = autoscaler.spec.as_ref()?;
    let status = autoscaler.status.as_ref()?;
    let mut metrics: BTreeMap<String, (Option<f64>, Option<f64>)> = BTreeMap::new();
    // The names come from the tenant's spec: label-safe and bounded in length and number.
    for metric in spec.metrics.iter().flatten().take(MAX_TUNING_METRICS) {
        if let Some((name, target)) = metric_target(metric) {
            metrics.entry(label_safe(&name)).or_default().1 = target;
        }
    }
    for metric in status.current_metrics.iter().flatten() {
        if let Some((name, current)) = metric_current(metric)
            && let Some(entry) = metrics.get_mut(&label_safe(&name))
        {
            entry.0 = current;
        }
    }
    Some(crate::metrics::autoscaling::Reading {
        min: spec.min_replicas.unwrap_or(1),
        max: spec.max_replicas,
        desired: status.desired_replicas,
        ready,
        metrics,
    })
}

/// The autoscaler metrics reported per service (a spec may list more).
const MAX_TUNING_METRICS: usize = 8;

/// A metric name as a label value: letters, digits and `_:./-` only, at most 63 characters,
/// so a name a tenant chose cannot break or forge the exposition.
fn label_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_:./-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect()
}

/// A number from an autoscaler's target or current value: utilization in percent where it
/// has one, else the average or total value. The same fields on `MetricTarget` and
/// `MetricValueStatus`.
macro_rules! number {
    ($value:expr) => {{
        let value = $value;
        value
            .average_utilization
            .map(f64::from)
            .or_else(|| value.average_value.as_ref().and_then(|q| quantity(&q.0)))
            .or_else(|| value.value.as_ref().and_then(|q| quantity(&q.0)))
    }};
}

/// A metric's name and the number in its `$field` (`target` of a `MetricSpec`, `current`
/// of a `MetricStatus`): the two types carry the same five sources.
macro_rules! named_number {
    ($metric:expr, $field:ident) => {{
        let metric = $metric;
        if let Some(r) = &metric.resource {
            Some((r.name.clone(), number!(&r.$field)))
        } else if let Some(c) = &metric.container_resource {
            Some((format!("{}/{}", c.container, c.name), number!(&c.$field)))
        } else if let Some(p) = &metric.pods {
            Some((p.metric.name.clone(), number!(&p.$field)))
        } else if let Some(o) = &metric.object {
            Some((o.metric.name.clone(), number!(&o.$field)))
        } else {
            metric
                .external
                .as_ref()
                .map(|e| (e.metric.name.clone(), number!(&e.$field)))
        }
    }};
}

/// A metric's name and target.
fn metric_target(metric: &MetricSpec) -> Option<(String, Option<f64>)> {
    named_number!(metric, target)
}

/// A metric's name and current value, as [`metric_target`] names and measures it.
fn metric_current(metric: &MetricStatus) -> Option<(String, Option<f64>)> {
    named_number!(metric, current)
}

/// A Kubernetes quantity (`250m`, `1.5`, `2Ki`, `3G`) as a number; `None` when unreadable.
fn quantity(text: &str) -> Option<f64> {
    const SUFFIXES: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let text = text.trim();
    for (suffix, scale) in SUFFIXES {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|n| n * scale);
        }
    }
    text.parse().ok()
}

impl Observed {
    /// The running Deployment's replica count.
    pub fn current_replicas(&self) -> Option<i32> {
        self.deployment.as_ref()?.spec_replicas
    }

    /// What the machine takes. `desired`: the Deployment this reconcile would apply; a pod
    /// template that differs from the running one starts a rollout with this reconcile.
    pub fn snapshot(
        &self,
        kind: ServiceKind,
        generation: i64,
        spec: &ServiceSpec,
        status: Option<&ServiceStatus>,
        desired: Option<&Deployment>,
    ) -> ServiceSnapshot {
        let template_pending = match (desired, &self.deployment) {
            (Some(desired), Some(current)) => current.template_differs(desired),
            _ => false,
        };
        ServiceSnapshot {
            generation,
            kind,
            config: self.config.clone(),
            database: DatabaseObservation::NotChecked {
                message: format!(
                    "a bare {kind} resource does not check its database; a Clair resource does"
                ),
            },
            workload: workload(
                self.deployment.as_ref(),
                spec.replicas,
                spec.autoscaling.is_some(),
                status.map_or(0, |s| s.ready_replicas),
                template_pending,
            ),
        }
    }
}

/// Reads one config source; `Ok(Err(what))` names what is missing. Every reconcile reads
/// its sources through this, so a failed read names the object.
pub async fn read(
    objects: &impl ObjectSource,
    namespace: &str,
    source: &ConfigSource,
) -> Result<Result<Document, String>, ObserveError> {
    crate::sources::read_source(objects, namespace, source)
        .await
        .map_err(ObserveError::reading(source.describe()))
}

/// The config of a service: missing, invalid (with the field and reason), or valid with
/// the snapshot the pods get. The `trace` section of `spec.tracing` comes before the
/// config's own drop-ins.
pub async fn config(
    objects: &impl ObjectSource,
    namespace: &str,
    spec: &ServiceSpec,
    mode: ServiceKind,
) -> Result<(ConfigObservation, Option<ConfigSnapshot>), ObserveError> {
    let config = &spec.config;
    let root = match read(objects, namespace, &config.root).await? {
        Ok(document) => document,
        Err(what) => return Ok((ConfigObservation::Missing { what }, None)),
    };
    let mut dropins = Vec::with_capacity(config.dropins.len() + 1);
    if let Some(tracing) = &spec.tracing {
        match tracing_dropin(objects, namespace, tracing, &root.key).await? {
            Ok(document) => dropins.push(document),
            Err(problem) => return Ok((problem, None)),
        }
    }
    for source in &config.dropins {
        match read(objects, namespace, source).await? {
            Ok(document) => dropins.push(document),
            Err(what) => return Ok((ConfigObservation::Missing { what }, None)),
        }
    }
    Ok(judge(&root, &dropins, mode))
}

/// The generated drop-in holding Clair's `trace` section for `tracing`, in the format of
/// the root key `root_key`, its headers read from their Secret; or why there is none.
pub async fn tracing_dropin(
    objects: &impl ObjectSource,
    namespace: &str,
    tracing: &TracingSpec,
    root_key: &str,
) -> Result<Result<Document, ConfigObservation>, ObserveError> {
    let exporter = match traces::exporter(tracing) {
        Ok(exporter) => exporter,
        Err(message) => return Ok(Err(ConfigObservation::Invalid { message })),
    };
    let headers = match &tracing.headers_secret {
        None => BTreeMap::new(),
        Some(name) => {
            let secret = objects
                .secret(namespace, name)
                .await
                .map_err(ObserveError::reading(format!("Secret {name}")))?;
            let Some(secret) = secret else {
                return Ok(Err(ConfigObservation::Missing {
                    what: format!("Secret {name} (spec.tracing.headersSecret) does not exist"),
                }));
            };
            match traces::headers(name, &secret.data.unwrap_or_default()) {
                Ok(headers) => headers,
                Err(message) => return Ok(Err(ConfigObservation::Invalid { message })),
            }
        }
    };
    // JSON is YAML too: the text reads in either format, the key says which.
    let format = if root_key.ends_with(".json") {
        "json"
    } else {
        "yaml"
    };
    Ok(Ok(Document {
        name: "the trace section of spec.tracing".to_string(),
        key: format!("tracing.{format}"),
        text: traces::section(&exporter, &headers).to_string(),
        secret: tracing.headers_secret.is_some(),
    }))
}

/// Merges and validates documents already read.
pub fn judge(
    root: &Document,
    dropins: &[Document],
    mode: ServiceKind,
) -> (ConfigObservation, Option<ConfigSnapshot>) {
    let checked = clairconfig::check(root, dropins, mode);
    let errors = checked.errors();
    match checked.config {
        Some(config) if errors.is_empty() => {
            let hash = clairconfig::hash(&config);
            (
                ConfigObservation::Valid { hash: hash.clone() },
                Some(ConfigSnapshot {
                    hash,
                    json: config.to_string(),
                }),
            )
        }
        _ => (
            ConfigObservation::Invalid {
                message: errors.join("; "),
            },
            None,
        ),
    }
}

/// The config hash the Deployment's pod template carries, if any.
pub fn running_hash(deployment: Option<&DeploymentState>) -> Option<String> {
    deployment?.config_hash.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_numbers() {
        assert_eq!(quantity("250m"), Some(0.25));
        assert_eq!(quantity("2Ki"), Some(2048.0));
        assert_eq!(quantity("1.5"), Some(1.5));
        assert_eq!(quantity("3G"), Some(3e9));
        assert_eq!(quantity("lots"), None);
        assert_eq!(quantity("500u"), Some(0.0005));
    }

    #[test]
    fn tenant_metric_names_cannot_break_the_exposition() {
        assert_eq!(label_safe("requests_per_second"), "requests_per_second");
        assert_eq!(label_safe("x\"} 1\nforged{a=\"b"), "x___1_forged_a__b");
        assert_eq!(label_safe(&"a".repeat(500)).len(), 63);
    }
}
