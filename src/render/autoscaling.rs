//! The autoscaler of a service resource, one engine at a time: a HorizontalPodAutoscaler on
//! resource metrics (`HPA`), or a KEDA ScaledObject whose Prometheus triggers read Clair's
//! own signals (`KEDA`; KEDA then makes and owns the HorizontalPodAutoscaler,
//! `keda-hpa-NAME`). Either way the Deployment's replica count is the autoscaler's.

use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec,
    MetricTarget, ResourceMetricSource,
};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use super::service::{ServiceInput, metadata};
use super::sizing;
use crate::api::common::{Autoscaling, KedaAutoscaling};
use crate::api::{AutoscalingEngine, ServiceKind};

/// Average in-flight requests per pod KEDA keeps by default: the matcher's and notifier's,
/// and an indexer's without a CPU limit (docs/autoscaling.md says where each comes from).
/// With a limit, an indexer's is what the limit serves at saturation
/// ([`sizing::saturating_requests`]).
pub const DEFAULT_TARGET_IN_FLIGHT: i32 = 4;
/// Index requests refused with 429 per second per pod that call for another pod.
pub const DEFAULT_TARGET_REFUSALS: &str = "0.2";
const DEFAULT_POLLING_SECONDS: i32 = 15;

/// The engine `autoscaling` asks for.
pub fn engine(autoscaling: &Autoscaling) -> AutoscalingEngine {
    autoscaling.engine.unwrap_or_default()
}

/// The name of the HorizontalPodAutoscaler that scales the service: the operator's own, or
/// the one KEDA makes for the ScaledObject. `None` without autoscaling.
pub fn autoscaler_name(input_name: &str, autoscaling: Option<&Autoscaling>) -> Option<String> {
    Some(match engine(autoscaling?) {
        AutoscalingEngine::Hpa => input_name.to_string(),
        AutoscalingEngine::Keda => format!("keda-hpa-{input_name}"),
    })
}

/// The HorizontalPodAutoscaler, when `spec.autoscaling` asks for engine `HPA`.
pub fn autoscaler(input: &ServiceInput) -> Option<HorizontalPodAutoscaler> {
    let autoscaling = input.spec.autoscaling.as_ref()?;
    if engine(autoscaling) != AutoscalingEngine::Hpa {
        return None;
    }
    let utilization = |resource: &str, target: Option<i32>| {
        target.map(|percent| MetricSpec {
            type_: "Resource".to_string(),
            resource: Some(ResourceMetricSource {
                name: resource.to_string(),
                target: MetricTarget {
                    type_: "Utilization".to_string(),
                    average_utilization: Some(percent),
                    ..Default::default()
                },
            }),
            ..Default::default()
        })
    };
    let metrics: Vec<MetricSpec> =
        utilization("cpu", autoscaling.target_cpu_utilization_percentage)
            .into_iter()
            .chain(utilization(
                "memory",
                autoscaling.target_memory_utilization_percentage,
            ))
            .chain(autoscaling.metrics.iter().cloned())
            .collect();
    Some(HorizontalPodAutoscaler {
        metadata: metadata(input, input.name.to_string()),
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".to_string()),
                kind: "Deployment".to_string(),
                name: input.name.to_string(),
            },
            min_replicas: Some(autoscaling.min_replicas.unwrap_or(1)),
            max_replicas: autoscaling.max_replicas,
            metrics: (!metrics.is_empty()).then_some(metrics),
            behavior: autoscaling.behavior.clone(),
        }),
        ..Default::default()
    })
}

pub fn scaled_object_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
        "scaledobjects",
    )
}

/// The KEDA ScaledObject, when `spec.autoscaling` asks for engine `KEDA`.
pub fn scaled_object(input: &ServiceInput) -> Option<DynamicObject> {
    let autoscaling = input.spec.autoscaling.as_ref()?;
    let keda = match engine(autoscaling) {
        AutoscalingEngine::Keda => autoscaling.keda.as_ref()?,
        AutoscalingEngine::Hpa => return None,
    };
    let resource = scaled_object_resource();
    let mut object = DynamicObject::new(input.name, &resource);
    object.metadata = metadata(input, input.name.to_string());
    let mut spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": input.name},
        "pollingInterval": keda.polling_interval_seconds.unwrap_or(DEFAULT_POLLING_SECONDS),
        "minReplicaCount": autoscaling.min_replicas.unwrap_or(1),
        "maxReplicaCount": autoscaling.max_replicas,
        "triggers": triggers(input, keda),
    });
    if let Some(behavior) = &autoscaling.behavior {
        spec["advanced"] = json!({"horizontalPodAutoscalerConfig": {"behavior": behavior}});
    }
    object.data = json!({ "spec": spec });
    Some(object)
}

/// The series of the service's own pods: its namespace, and pods of its Deployment
/// (`NAME-TEMPLATEHASH-SUFFIX`; names are DNS labels, so nothing in them needs escaping).
fn pods(input: &ServiceInput) -> String {
    format!(
        r#"namespace="{}",pod=~"{}-[a-z0-9]+-[a-z0-9]+""#,
        input.namespace, input.name
    )
}

/// The in-flight series of the service's main handler.
fn in_flight(kind: ServiceKind) -> (&'static str, &'static str) {
    match kind {
        ServiceKind::Indexer => (
            "clair_http_indexerv1_in_flight_requests",
            "/indexer/api/v1/index_report",
        ),
        ServiceKind::Matcher => (
            "clair_http_matcherv1_in_flight_requests",
            "/matcher/api/v1/vulnerability_report/",
        ),
        ServiceKind::Notifier => (
            "clair_http_notificationv1_in_flight_requests",
            "/notifier/api/v1/notification/:id",
        ),
    }
}

/// The in-flight target when the spec sets none: for an indexer with a CPU limit, the
/// requests that limit serves at saturation (half what it admits: in-flight requests can
/// rise past the target before any is refused); else [`DEFAULT_TARGET_IN_FLIGHT`].
pub fn default_target_in_flight(input: &ServiceInput) -> i32 {
    match (input.kind, sizing::cpu_limit_millis(&input.spec.pod)) {
        (ServiceKind::Indexer, Some(millis)) => {
            i32::try_from(sizing::saturating_requests(millis)).unwrap_or(i32::MAX)
        }
        _ => DEFAULT_TARGET_IN_FLIGHT,
    }
}

/// A Prometheus address as KEDA is given it: an origin (scheme, host, port) and at most a
/// base path of plain characters. KEDA appends `/api/v1/query?query=...` to it as text, so
/// anything more (a query, a fragment, an encoded `?` or `#`) would replace the query KEDA
/// runs with one of the writer's. The rule is the CRDs' pattern
/// (`api::common::PROMETHEUS_ADDRESS`), with the field and the fix named (the webhook and the
/// controllers ask it).
pub fn prometheus_address(address: &str, field: &str) -> Result<String, String> {
    let example = "http://prometheus-operated.monitoring.svc:9090";
    crate::render::traces::base_url(
        address,
        field,
        example,
        "a proxy of the platform's (KEDA is given no credentials here)",
    )?;
    if !address_pattern().is_match(address) {
        return Err(format!(
            "{field}: only a scheme, host, port and a base path of letters, digits and -._~/ \
             are allowed (KEDA appends its own query to the address), for example {example}"
        ));
    }
    Ok(address.trim_end_matches('/').to_string())
}

/// The CRDs' pattern, compiled once.
fn address_pattern() -> &'static regex::Regex {
    static PATTERN: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(crate::api::common::PROMETHEUS_ADDRESS).expect("a valid pattern")
    });
    &PATTERN
}

/// KEDA's Prometheus triggers: in-flight requests per pod, and for the indexer the 429s
/// its concurrency limit answers (which never show as in flight). `or vector(0)`: no series
/// yet (no request since the pods started) reads as no load, not as an error.
fn triggers(input: &ServiceInput, keda: &KedaAutoscaling) -> Vec<Value> {
    let target = keda
        .target_in_flight
        .unwrap_or_else(|| default_target_in_flight(input));
    let pods = pods(input);
    let (series, handler) = in_flight(input.kind);
    let trigger = |name: &str, query: String, threshold: String| {
        json!({
            "type": "prometheus",
            "name": name,
            "metricType": "AverageValue",
            "metadata": {
                // Refused before anything is rendered (`platform::Platform`): what
                // could not be checked is sent nowhere.
                "serverAddress": prometheus_address(&keda.prometheus_address, "")
                    .unwrap_or_default(),
                "query": query,
                "threshold": threshold,
            },
        })
    };
    let mut triggers = vec![trigger(
        "in-flight",
        format!(r#"sum({series}{{{pods},handler="{handler}"}}) or vector(0)"#),
        target.to_string(),
    )];
    if input.kind == ServiceKind::Indexer {
        triggers.push(trigger(
            "refused",
            format!(r#"sum(rate(clair_http_concurrencylimited_total{{{pods}}}[1m])) or vector(0)"#),
            keda.target_refusals_per_second
                .clone()
                .unwrap_or_else(|| DEFAULT_TARGET_REFUSALS.to_string()),
        ));
    }
    triggers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::service::tests::{input, spec};

    fn keda() -> Autoscaling {
        Autoscaling {
            engine: Some(AutoscalingEngine::Keda),
            keda: Some(KedaAutoscaling {
                prometheus_address: "http://prometheus.monitoring.svc:9090".into(),
                ..Default::default()
            }),
            min_replicas: Some(1),
            max_replicas: 3,
            ..Default::default()
        }
    }

    #[test]
    fn a_prometheus_address_is_an_origin_and_a_base_path() {
        let field = "spec.autoscaling.keda.prometheusAddress";
        let pattern = regex::Regex::new(crate::api::common::PROMETHEUS_ADDRESS).unwrap();
        for good in [
            "http://prometheus-operated.monitoring.svc:9090",
            "https://thanos.example.com/",
            "http://prometheus:9090/prometheus",
        ] {
            assert_eq!(
                prometheus_address(good, field).as_deref(),
                Ok(good.trim_end_matches('/')),
                "{good}"
            );
            assert!(pattern.is_match(good), "the CRD's pattern refuses {good}");
        }
        // The attack of issue 54: KEDA's own query turned into a fragment never sent.
        let attack = "http://prometheus-k8s.monitoring.svc:9090/api/v1/query?query=count(kube_secret_info%7Bnamespace%3D%22victim%22%7D)#";
        for bad in [
            attack,
            "http://prometheus:9090/#",
            "http://prometheus:9090/?",
            "http://prometheus:9090/%3Fquery=up%23",
            "http://user:pass@prometheus:9090",
            "http://prometheus:9090/a b",
            "ftp://prometheus:9090",
            "http://:9090",
        ] {
            let refused = prometheus_address(bad, field).unwrap_err();
            assert!(refused.starts_with(field), "{bad}: {refused}");
            assert!(!pattern.is_match(bad), "the CRD's pattern allows {bad}");
        }
    }

    #[test]
    fn a_refused_address_reaches_no_scaled_object() {
        let mut spec = spec();
        let mut autoscaling = keda();
        autoscaling.keda.as_mut().unwrap().prometheus_address =
            "http://p:9090/api/v1/query?query=up#".into();
        assert!(
            prometheus_address(&autoscaling.keda.as_ref().unwrap().prometheus_address, "").is_err()
        );
        spec.autoscaling = Some(Box::new(autoscaling));
        let rendered = serde_json::to_string(&scaled_object(&input(&spec))).unwrap();
        assert!(rendered.contains("serverAddress"), "{rendered}");
        assert!(!rendered.contains("query=up"), "{rendered}");
    }

    #[test]
    fn one_engine_at_a_time() {
        let mut spec = spec();
        spec.autoscaling = Some(Box::new(keda()));
        let keda = input(&spec);
        assert!(autoscaler(&keda).is_none());
        assert!(scaled_object(&keda).is_some());
        assert_eq!(
            autoscaler_name("m", spec.autoscaling.as_deref()).as_deref(),
            Some("keda-hpa-m")
        );
        let mut spec = spec.clone();
        spec.autoscaling = Some(Box::new(Autoscaling {
            max_replicas: 3,
            target_cpu_utilization_percentage: Some(80),
            ..Default::default()
        }));
        let hpa = input(&spec);
        assert!(autoscaler(&hpa).is_some());
        assert!(scaled_object(&hpa).is_none());
        assert_eq!(
            autoscaler_name("m", spec.autoscaling.as_deref()).as_deref(),
            Some("m")
        );
        assert_eq!(autoscaler_name("m", None), None);
    }

    #[test]
    fn the_scaled_object_targets_the_deployment_with_prometheus_triggers_on_its_own_pods() {
        let mut spec = spec();
        spec.autoscaling = Some(Box::new(keda()));
        let mut input = input(&spec);
        input.kind = ServiceKind::Indexer;
        let object = scaled_object(&input).expect("a ScaledObject");
        let spec = &object.data["spec"];
        assert_eq!(spec["scaleTargetRef"]["name"], input.name);
        assert_eq!(
            (
                spec["minReplicaCount"].as_i64(),
                spec["maxReplicaCount"].as_i64()
            ),
            (Some(1), Some(3))
        );
        let triggers = spec["triggers"].as_array().expect("triggers");
        let queries: Vec<&str> = triggers
            .iter()
            .map(|t| t["metadata"]["query"].as_str().unwrap_or_default())
            .collect();
        let own = format!(
            r#"namespace="{}",pod=~"{}-[a-z0-9]+-[a-z0-9]+""#,
            input.namespace, input.name
        );
        assert!(queries.iter().all(|q| q.contains(&own)), "{queries:?}");
        // The indexer's 429s too; a matcher has in-flight requests only.
        assert_eq!(triggers.len(), 2);
        input.kind = ServiceKind::Matcher;
        let matcher = scaled_object(&input).expect("a ScaledObject");
        assert_eq!(
            matcher.data["spec"]["triggers"].as_array().map(Vec::len),
            Some(1)
        );
        assert!(triggers.iter().all(|t| t["metricType"] == "AverageValue"));
        assert!(object.metadata.owner_references.is_some());
    }

    #[test]
    fn an_indexers_default_in_flight_target_follows_its_cpu_limit() {
        let mut spec = spec();
        spec.autoscaling = Some(Box::new(keda()));
        let mut input = input(&spec);
        input.kind = ServiceKind::Indexer;
        assert_eq!(
            default_target_in_flight(&input),
            4,
            "no limit: the constant"
        );
        let mut limited = spec.clone();
        *limited.pod = crate::render::sizing::tests::cpu_limited("500m");
        input.spec = &limited;
        assert_eq!(
            default_target_in_flight(&input),
            2,
            "what 500m serves at saturation"
        );
        let object = scaled_object(&input).expect("a ScaledObject");
        assert_eq!(
            object.data["spec"]["triggers"][0]["metadata"]["threshold"],
            "2"
        );
        input.kind = ServiceKind::Matcher;
        assert_eq!(
            default_target_in_flight(&input),
            4,
            "the matcher's constant"
        );
    }
}
