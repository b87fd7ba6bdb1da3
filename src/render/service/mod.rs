//! The objects a service resource (`Indexer`, `Matcher`, `Notifier`) owns: its config
//! snapshot Secret, Deployment (`deployment.rs`), Service, PodDisruptionBudget and, where the
//! cluster serves it, a ServiceMonitor (the autoscaler is `render::autoscaling`'s).

mod deployment;
pub use deployment::{default_memory_limit, deployment};

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, Service, ServicePort, ServiceSpec as KubeServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use super::pod::PodUsers;
use crate::api::labels;
use crate::api::{DEFAULT_IMAGE, ServiceKind, ServiceSpec};

pub const API_PORT: i32 = 6060;
pub const INTROSPECTION_PORT: i32 = 8089;
/// Where the config snapshot is mounted; Clair reads `CLAIR_CONF`.
pub const CONFIG_DIR: &str = "/config";
pub const CONFIG_FILE: &str = "config.json";
/// The pod-template annotation carrying the config hash, so a new config rolls the pods.
pub const CONFIG_HASH: &str = "clair.projectquay.io/config-hash";
/// The Deployment annotation carrying a hash of the pod template the operator applied: a
/// service's reconcile tells from its watch whether the template it wants is the one
/// running, without reading the template.
pub const TEMPLATE_HASH: &str = "clair.projectquay.io/template-hash";
/// The label on config snapshot Secrets carrying the hash.
pub const SNAPSHOT_HASH: &str = "clair.projectquay.io/config-hash";
const DEFAULT_SCRATCH: &str = "10Gi";
/// How long a stopping pod keeps serving before Clair is told to stop: long enough for
/// kube-proxy and ingress controllers to take it out of the endpoints.
pub const PRE_STOP_SECONDS: i64 = 15;
/// How long Clair drains in-flight requests after SIGTERM (fixed in Clair 4.9).
const CLAIR_DRAIN_SECONDS: i64 = 10;

/// What the builders need to know about one service resource.
pub struct ServiceInput<'a> {
    /// `indexer`, `matcher` or `notifier`: `CLAIR_MODE` and the component label.
    pub kind: ServiceKind,
    pub name: &'a str,
    pub namespace: &'a str,
    /// The controller owner reference to the resource.
    pub owner: OwnerReference,
    pub spec: &'a ServiceSpec,
    /// The running Deployment's replica count, if any: kept as it is while an autoscaler
    /// owns the count.
    pub current_replicas: Option<i32>,
    /// Whether the pods name their user or the platform assigns one.
    pub users: PodUsers,
}

/// A validated, merged config, frozen into an immutable Secret that the pods mount. The
/// pods never read the user's ConfigMap directly: an invalid edit to it cannot reach a
/// running or restarting pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigSnapshot {
    pub hash: String,
    /// The merged config as JSON (Clair reads `.json` files whose first byte is `{`).
    pub json: String,
}

impl ConfigSnapshot {
    /// The Secret's name: the resource's name and the config hash.
    pub fn secret_name(&self, resource: &str) -> String {
        snapshot_name(resource, &self.hash)
    }
}

/// The Clair image of a service resource: `spec.image`, else the default.
pub fn image(spec: &ServiceSpec) -> String {
    spec.image
        .clone()
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string())
}

pub fn snapshot_name(resource: &str, hash: &str) -> String {
    format!("{resource}-config-{}", &hash[..hash.len().min(10)])
}

/// `http://NAME.NAMESPACE.svc:6060`: the address other Clair services use.
pub fn url(name: &str, namespace: &str) -> String {
    format!("http://{name}.{namespace}.svc:{API_PORT}")
}

pub(super) fn metadata(input: &ServiceInput, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(input.namespace.to_string()),
        labels: Some(labels::all(input.name, input.kind.as_str())),
        owner_references: Some(vec![input.owner.clone()]),
        ..Default::default()
    }
}

pub fn config_secret(input: &ServiceInput, snapshot: &ConfigSnapshot) -> Secret {
    let mut meta = metadata(input, snapshot.secret_name(input.name));
    if let Some(labels) = meta.labels.as_mut() {
        labels.insert(SNAPSHOT_HASH.to_string(), snapshot.hash.clone());
    }
    Secret {
        metadata: meta,
        immutable: Some(true),
        data: Some(BTreeMap::from([(
            CONFIG_FILE.to_string(),
            ByteString(snapshot.json.clone().into_bytes()),
        )])),
        type_: Some("Opaque".to_string()),
        ..Default::default()
    }
}

pub fn service(input: &ServiceInput) -> Service {
    let port = |name: &str, number: i32| ServicePort {
        name: Some(name.to_string()),
        port: number,
        target_port: Some(IntOrString::String(name.to_string())),
        protocol: Some("TCP".to_string()),
        ..Default::default()
    };
    Service {
        metadata: metadata(input, input.name.to_string()),
        spec: Some(KubeServiceSpec {
            selector: Some(labels::selector(input.name, input.kind.as_str())),
            ports: Some(vec![
                port("api", API_PORT),
                port("introspection", INTROSPECTION_PORT),
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// At most one pod of the service down at a time through voluntary disruptions (drains).
pub fn disruption_budget(input: &ServiceInput) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: metadata(input, input.name.to_string()),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(labels::selector(input.name, input.kind.as_str())),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The fewest ready pods that are not degraded, for `wanted` replicas: one less than wanted
/// (the budget's one voluntary disruption), and never none while any is wanted.
pub fn min_available(wanted: i32) -> i32 {
    if wanted <= 0 { 0 } else { (wanted - 1).max(1) }
}

/// `monitoring.coreos.com/v1` ServiceMonitor scraping the introspection port.
pub fn service_monitor_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("monitoring.coreos.com", "v1", "ServiceMonitor"),
        "servicemonitors",
    )
}

pub fn service_monitor(input: &ServiceInput) -> DynamicObject {
    let resource = service_monitor_resource();
    let mut object = DynamicObject::new(input.name, &resource);
    object.metadata = metadata(input, input.name.to_string());
    object.data = json!({
        "spec": {
            "selector": {"matchLabels": labels::selector(input.name, input.kind.as_str())},
            "endpoints": [{"port": "introspection", "path": "/metrics"}]
        }
    });
    object
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::common::{ConfigSource, ConfigSpec, KeyReference};

    pub(crate) fn spec() -> ServiceSpec {
        ServiceSpec {
            image: None,
            config: ConfigSpec {
                root: ConfigSource {
                    config_map: Some(KeyReference {
                        name: "c".into(),
                        key: "config.yaml".into(),
                    }),
                    secret: None,
                },
                dropins: vec![],
            },
            replicas: 2,
            autoscaling: None,
            pod: Default::default(),
            tracing: None,
        }
    }

    pub(crate) fn input(spec: &ServiceSpec) -> ServiceInput<'_> {
        ServiceInput {
            kind: ServiceKind::Matcher,
            name: "m",
            namespace: "ns",
            owner: OwnerReference {
                api_version: "clair.projectquay.io/v1alpha1".into(),
                kind: "Matcher".into(),
                name: "m".into(),
                uid: "u-1".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            spec,
            current_replicas: None,
            users: PodUsers::Numeric,
        }
    }

    #[test]
    fn snapshots_are_immutable_and_named_by_hash() {
        let spec = spec();
        let snapshot = ConfigSnapshot {
            hash: "0123456789abcdef".into(),
            json: "{}".into(),
        };
        let secret = config_secret(&input(&spec), &snapshot);
        assert_eq!(secret.metadata.name.as_deref(), Some("m-config-0123456789"));
        assert_eq!(secret.immutable, Some(true));
        assert_eq!(url("m", "ns"), "http://m.ns.svc:6060");
        assert_eq!(
            (
                min_available(0),
                min_available(1),
                min_available(2),
                min_available(5)
            ),
            (0, 1, 1, 4)
        );
    }
}
