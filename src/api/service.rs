//! `Indexer`, `Matcher` and `Notifier`: one Clair service each, with the same spec. Each owns
//! its Deployment, Service, HorizontalPodAutoscaler, PodDisruptionBudget and ServiceMonitor.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Autoscaling, ConfigSpec, PodOverrides, ServiceStatus, TracingSpec};

/// What the three service kinds share.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// The Clair container image. Default `quay.io/projectquay/clair:4.9.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// The Clair config: a root key and ordered drop-ins, read from ConfigMaps or Secrets in
    /// this namespace. A change rolls the pods; an invalid config is never rolled out.
    pub config: ConfigSpec,
    /// Number of pods while `autoscaling` is unset (`kubectl scale` writes it).
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// Run a HorizontalPodAutoscaler instead of a fixed replica count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Box<Autoscaling>>,
    /// Settings of the pods: resources, scratch volume, scheduling and environment.
    #[serde(default, skip_serializing_if = "is_default")]
    pub pod: Box<PodOverrides>,
    /// Send Clair's traces to an OTLP collector (rendered as Clair's `trace` section, before
    /// the config's drop-ins). Unset: no traces leave the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingSpec>,
}

fn default_replicas() -> i32 {
    1
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Which Clair service: the one name of a service kind everywhere (the API, the config
/// rules, the machines, the builders and the CLI). `indexer`, `matcher`, `notifier`: the
/// `CLAIR_MODE` the service runs in.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "lowercase")]
pub enum ServiceKind {
    Indexer,
    Matcher,
    Notifier,
}

impl ServiceKind {
    /// `indexer`, `matcher` or `notifier`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The kind of its resource: `Indexer`, `Matcher` or `Notifier`.
    pub fn resource_kind(self) -> &'static str {
        match self {
            ServiceKind::Indexer => "Indexer",
            ServiceKind::Matcher => "Matcher",
            ServiceKind::Notifier => "Notifier",
        }
    }
}

/// Access to the shared spec, so one controller serves the three kinds.
pub trait ClairService {
    /// The service this kind runs.
    const KIND: ServiceKind;
    /// The shared part of the spec.
    fn service_spec(&self) -> &ServiceSpec;
    /// The status, once written.
    fn service_status(&self) -> Option<&ServiceStatus>;
    /// A new resource named `name` with `spec` (how a `Clair` creates its services).
    fn with_spec(name: &str, spec: ServiceSpec) -> Self;
}

/// Declares one service kind: the spec wraps [`ServiceSpec`], so the schema and the Rust
/// type are the same for all three, while each kind keeps its own name and short name.
macro_rules! service_kind {
    ($spec:ident, $kind:tt, $root:ident, $short:tt, $service:ident, $doc:tt) => {
        #[doc = $doc]
        // Each printcolumn(...) repeats `type_`; clippy takes that for a duplicated attribute.
        #[allow(clippy::duplicated_attributes)]
        #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[kube(
            group = "clair.projectquay.io",
            version = "v1alpha1",
            kind = $kind,
            namespaced,
            doc = $doc,
            status = "ServiceStatus",
            derive = "PartialEq",
            derive = "Default",
            // It names its Deployment and Service (a DNS-1035 label).
            validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63")
                .message("metadata.name: begins with a letter, holds lowercase letters, digits and '-' only, at most 63 characters: it names the service's Service"),
            shortname = $short,
            scale(
                spec_replicas_path = ".spec.replicas",
                status_replicas_path = ".status.replicas",
                label_selector_path = ".status.selector"
            ),
            printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase",
                description = "Where the service stands; see docs/runbooks/<phase>.md"),
            printcolumn(name = "Ready", type_ = "string",
                json_path = ".status.conditions[?(@.type==\"Ready\")].status",
                description = "Status of the Ready condition"),
            printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas",
                description = "Pods of the service"),
            printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
            printcolumn(name = "Image", type_ = "string", json_path = ".spec.image", priority = 1,
                description = "Clair image, when not the default"),
            printcolumn(name = "URL", type_ = "string", json_path = ".status.url", priority = 1,
                description = "In-cluster URL of the service")
        )]
        pub struct $spec {
            #[serde(flatten)]
            pub service: ServiceSpec,
        }

        impl ClairService for $root {
            const KIND: ServiceKind = ServiceKind::$service;
            fn service_spec(&self) -> &ServiceSpec {
                &self.spec.service
            }
            fn service_status(&self) -> Option<&ServiceStatus> {
                self.status.as_ref()
            }
            fn with_spec(name: &str, spec: ServiceSpec) -> Self {
                $root::new(name, $spec { service: spec })
            }
        }
    };
}

service_kind!(
    IndexerSpec,
    "Indexer",
    Indexer,
    "cidx",
    Indexer,
    "A Clair indexer: fetches image layers and records what they contain."
);
service_kind!(
    MatcherSpec,
    "Matcher",
    Matcher,
    "cmat",
    Matcher,
    "A Clair matcher: matches index reports against vulnerability data and runs updaters."
);
service_kind!(
    NotifierSpec,
    "Notifier",
    Notifier,
    "cnot",
    Notifier,
    "A Clair notifier: tells subscribers when new vulnerabilities affect indexed manifests."
);
