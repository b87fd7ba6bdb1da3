//! Types shared by the four custom resources: config references, autoscaling, pod overrides,
//! phases and status.

use std::collections::BTreeMap;

use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscalerBehavior, MetricSpec};
use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, ResourceRequirements, Toleration,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A key of a ConfigMap or of a Secret in the resource's own namespace. Exactly one of
/// `configMap` and `secret` is set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.configMap) != has(self.secret)")
    .message("set exactly one of configMap or secret"))]
pub struct ConfigSource {
    /// A key of a ConfigMap in the same namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<KeyReference>,
    /// A key of a Secret in the same namespace. Use a Secret when the config holds
    /// connection strings or keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<KeyReference>,
}

/// A Kubernetes object name (a DNS-1123 subdomain), as the apiserver requires of every
/// ConfigMap and Secret. The operator puts the names it reads into request paths and its
/// metrics; anything else (`x/y`, quotes) is refused where it is written.
pub const NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A namespace's name (an RFC 1123 label).
pub const LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A ConfigMap or Secret key, as the apiserver requires of every key.
pub const KEY_PATTERN: &str = r"^[-._a-zA-Z0-9]+$";

/// A named object's key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct KeyReference {
    /// Name of the ConfigMap or Secret.
    #[schemars(length(min = 1, max = 253), pattern(NAME_PATTERN))]
    pub name: String,
    /// Key within its `data`.
    #[schemars(length(min = 1, max = 253), pattern(KEY_PATTERN))]
    pub key: String,
}

impl ConfigSource {
    /// The referenced key, whichever kind of object holds it.
    pub fn key(&self) -> Option<&KeyReference> {
        self.config_map.as_ref().or(self.secret.as_ref())
    }

    /// `ConfigMap NAME` or `Secret NAME`, for messages.
    pub fn describe(&self) -> String {
        match (&self.config_map, &self.secret) {
            (Some(r), _) => format!("ConfigMap {}", r.name),
            (None, Some(r)) => format!("Secret {}", r.name),
            (None, None) => "a config source naming no object".to_string(),
        }
    }
}

/// Where a service's Clair config comes from: a root file plus drop-ins, merged as Clair
/// merges `config.yaml` with the files in `config.yaml.d/`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "has(self.root.configMap) ? self.root.configMap.key.matches('[.](yaml|json)$') : !has(self.root.secret) || self.root.secret.key.matches('[.](yaml|json)$')")
    .message("the root config key must end in .yaml or .json, as Clair requires")
    .field_path(".root"))]
#[x_kube(validation = Rule::new(
    "!has(self.dropins) || self.dropins.all(d, has(d.configMap) ? d.configMap.key.matches('[.](yaml|json)(-patch)?$') : !has(d.secret) || d.secret.key.matches('[.](yaml|json)(-patch)?$'))")
    .message("a drop-in key must end in .yaml or .json (a JSON Merge Patch) or .yaml-patch or .json-patch (a JSON Patch)")
    .field_path(".dropins"))]
pub struct ConfigSpec {
    /// The root config: a key ending in `.yaml` or `.json`. The operator reads it only to
    /// validate and hash it; it is not copied.
    pub root: ConfigSource,
    /// Drop-ins applied over the root, in order: `.yaml`/`.json` keys are JSON Merge Patches,
    /// `.yaml-patch`/`.json-patch` keys are JSON Patches (RFC 6902).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub dropins: Vec<ConfigSource>,
}

/// An autoscaler for the service: a HorizontalPodAutoscaler on resource metrics (`HPA`, the
/// default) or a KEDA ScaledObject on Clair's own metrics in Prometheus (`KEDA`). Without
/// it, `replicas` governs. One engine per service, never two at once.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.minReplicas) || self.minReplicas <= self.maxReplicas")
    .message("minReplicas must not exceed maxReplicas")
    .field_path(".minReplicas"))]
#[x_kube(validation = Rule::new("!has(self.engine) || self.engine != 'KEDA' || has(self.keda)")
    .message("engine KEDA needs keda.prometheusAddress: the Prometheus that scrapes this Clair")
    .field_path(".keda"))]
#[x_kube(validation = Rule::new("has(self.engine) && self.engine == 'KEDA' || !has(self.keda)")
    .message("keda is read only with engine: KEDA; set engine: KEDA or remove keda")
    .field_path(".keda"))]
#[x_kube(validation = Rule::new("!has(self.engine) || self.engine != 'KEDA' || !has(self.targetCPUUtilizationPercentage) && !has(self.targetMemoryUtilizationPercentage) && !has(self.metrics)")
    .message("engine KEDA scales on Clair's own signals (keda): CPU and memory targets and metrics belong to engine HPA; remove them or use engine HPA")
    .field_path(".engine"))]
pub struct Autoscaling {
    /// Which autoscaler: `HPA` (a HorizontalPodAutoscaler on CPU and memory, the default)
    /// or `KEDA` (a ScaledObject whose Prometheus triggers read Clair's in-flight requests
    /// and refusals; the cluster must serve KEDA's `keda.sh/v1alpha1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<AutoscalingEngine>,
    /// KEDA's triggers, with engine `KEDA`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keda: Option<KedaAutoscaling>,
    /// Fewest replicas the autoscaler keeps. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_replicas: Option<i32>,
    /// Most replicas the autoscaler may run. Bound it by what the database's
    /// `max_connections` can serve: each replica opens its own pool.
    #[schemars(range(min = 1))]
    pub max_replicas: i32,
    /// Target average CPU use, as a percentage of the CPU request.
    #[serde(
        default,
        rename = "targetCPUUtilizationPercentage",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1, max = 1000))]
    pub target_cpu_utilization_percentage: Option<i32>,
    /// Target average memory use, as a percentage of the memory request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub target_memory_utilization_percentage: Option<i32>,
    /// Further autoscaling/v2 metrics (for example a Clair request-rate metric through an
    /// adapter), added to the CPU and memory targets. At most 8.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub metrics: Vec<MetricSpec>,
    /// Scale-up and scale-down behaviour (stabilization windows, policies), as in
    /// autoscaling/v2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<HorizontalPodAutoscalerBehavior>,
}

/// The autoscaler engine of a service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AutoscalingEngine {
    /// A HorizontalPodAutoscaler the operator owns.
    #[default]
    #[serde(rename = "HPA")]
    Hpa,
    /// A KEDA ScaledObject the operator owns; KEDA owns the HorizontalPodAutoscaler it makes.
    #[serde(rename = "KEDA")]
    Keda,
}

/// The CRDs' pattern for `prometheusAddress`: a scheme, host, port and at most a base path of
/// plain characters (`render::autoscaling::prometheus_address` is the same rule, with the
/// field and the fix named).
pub const PROMETHEUS_ADDRESS: &str = r"^https?://[A-Za-z0-9.\-]+(:[0-9]+)?(/[A-Za-z0-9._~\-/]*)?$";

/// KEDA's Prometheus triggers for a service: the average in-flight requests per pod of the
/// service's main handler, and the rate of index requests refused with 429 (indexer only).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KedaAutoscaling {
    /// The Prometheus HTTP API that scrapes this Clair's pods (labels `namespace` and
    /// `pod`, as the Prometheus Operator's ServiceMonitor sets them), for example
    /// `http://prometheus-operated.monitoring.svc:9090`. KEDA queries it, not the pods.
    /// A scheme, host, port and at most a base path: KEDA appends its query to it.
    #[schemars(length(max = 256), pattern(PROMETHEUS_ADDRESS))]
    pub prometheus_address: String,
    /// Average in-flight requests per pod the autoscaler keeps (index requests for the
    /// indexer, vulnerability reports for the matcher, notification pages for the
    /// notifier). Default: see docs/autoscaling.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub target_in_flight: Option<i32>,
    /// Index requests refused with 429 per second, per pod, that call for another pod
    /// (indexer only). Default 0.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), pattern(r"^[0-9]+(\.[0-9]+)?$"))]
    pub target_refusals_per_second: Option<String>,
    /// How often KEDA queries Prometheus, in seconds. Default 15.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 5, max = 300))]
    pub polling_interval_seconds: Option<i32>,
}

/// The scratch volume mounted at `/var/tmp` and `/tmp`, where the indexer unpacks layers and
/// the scanners spool files. An `emptyDir`'s size is also the container's `ephemeral-storage`
/// request, unless `resources` names one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScratchVolume {
    /// Size of the volume. Default 10Gi; indexers of large images need more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Quantity>,
    /// StorageClass for a generic ephemeral volume. Without one, an `emptyDir` limited to
    /// `size` is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// Settings of the service's pods, passed through to the Deployment's pod template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.volumes) || self.volumes.all(v, !(v.name in ['config', 'scratch', 'tmp', 'import', 'export', 'ca-bundle']))")
    .message("volumes: the names config, scratch, tmp, import, export and ca-bundle are the operator's own; pick another name")
    .field_path(".volumes"))]
#[x_kube(validation = Rule::new("!has(self.volumeMounts) || self.volumeMounts.all(m, !(m.mountPath in ['/config', '/var/tmp', '/tmp', '/import', '/export', '/var/run/certs']))")
    .message("volumeMounts: /config, /var/tmp, /tmp, /import, /export and /var/run/certs are the operator's own mount paths; mount elsewhere (extra CAs go in caBundle)")
    .field_path(".volumeMounts"))]
#[x_kube(validation = Rule::new("!has(self.env) || self.env.all(e, !has(e.value) || size(e.value) <= 2048)")
    .message("env: a value is at most 2048 characters; keep a larger one in a ConfigMap or Secret and use valueFrom")
    .field_path(".env"))]
#[x_kube(validation = Rule::new("!has(self.labels) || self.labels.all(k, size(k) <= 317 && size(self.labels[k]) <= 63)")
    .message("labels: a key is at most 317 characters and a value at most 63, as Kubernetes allows on a pod")
    .field_path(".labels"))]
#[x_kube(validation = Rule::new("!has(self.nodeSelector) || self.nodeSelector.all(k, size(k) <= 317 && size(self.nodeSelector[k]) <= 63)")
    .message("nodeSelector: a key is at most 317 characters and a value at most 63, as node labels are")
    .field_path(".nodeSelector"))]
#[x_kube(validation = Rule::new("!has(self.annotations) || self.annotations.all(k, size(k) <= 317 && size(self.annotations[k]) <= 2048)")
    .message("annotations: a key is at most 317 characters and a value at most 2048")
    .field_path(".annotations"))]
pub struct PodOverrides {
    /// CPU and memory requests and limits of the Clair container. Unset: requests of 100m
    /// and 256Mi and a memory limit (2Gi; 4Gi for a matcher).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// The scratch volume at `/var/tmp` and `/tmp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch: Option<ScratchVolume>,
    /// Node labels the pods must be scheduled on (at most 16).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16))]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the pods tolerate (at most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub tolerations: Vec<Toleration>,
    /// Node and pod affinity rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// How pods spread across zones and nodes (at most 8 constraints).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// Extra environment variables of the Clair container (for example `GOMAXPROCS` or
    /// proxy settings). `CLAIR_MODE` and `CLAIR_CONF` are set by the operator. At most 32,
    /// each value at most 2048 characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub env: Vec<EnvVar>,
    /// Secrets with the credentials to pull the image (a private or mirrored registry), at
    /// most 8.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// The ServiceAccount the pods run as (for a registry or policy bound to it); its token
    /// is not mounted. Default: the namespace's `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
    /// The pods' PriorityClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
    /// Extra labels on the pods (for cost allocation, mesh or policy selectors). The
    /// operator's own `app.kubernetes.io/*` labels take precedence. At most 32.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations on the pods (a service mesh's, a log shipper's): at most 32, each
    /// value at most 2048 characters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub annotations: BTreeMap<String, String>,
    /// Extra CA certificates Clair trusts, for a registry, proxy or vulnerability source
    /// behind a private CA: every key of this ConfigMap or Secret (PEM) is mounted in
    /// `/var/run/certs`, one of the folders of Clair's `SSL_CERT_DIR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
    /// An HTTP(S) proxy for what Clair fetches (the indexer's layers, the matcher's
    /// vulnerability data, the notifier's deliveries). The cluster's own names (`localhost`,
    /// `.svc`, `.cluster.local`) are always added to `NO_PROXY`, so the services keep
    /// reaching each other directly. A proxy URL with a password is readable by whoever
    /// reads this resource: give it through `env` with `valueFrom.secretKeyRef` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxySettings>,
    /// Extra volumes of the pods (a mirror's credentials, a plugin's files), as a pod spec
    /// writes them (`kubectl explain pod.spec.volumes`); mount them with `volumeMounts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "volumes_schema")]
    pub volumes: Vec<Volume>,
    /// Where the Clair container mounts `volumes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub volume_mounts: Vec<VolumeMount>,
}

/// Volumes as the core API defines them, their sources checked by the apiserver when the
/// operator applies the pods: a copy of the whole Volume schema would add ~130 KB to the CRD
/// for every place pod settings appear.
fn volumes_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 16,
        "items": {
            "description": "A volume (core/v1 Volume): a name and one source, for example {name: mirror-auth, secret: {secretName: mirror-auth}}.",
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 63}
            },
            "x-kubernetes-preserve-unknown-fields": true
        }
    })
}

impl PodOverrides {
    /// These settings over `defaults` (a `Clair`'s `spec.pod` under a service's own), field
    /// by field: a field set here wins; labels, annotations and node selectors merge key by
    /// key; variables, volumes and mounts merge by name (mounts by path), these winning.
    pub fn over(self, defaults: &PodOverrides) -> PodOverrides {
        fn maps(
            mine: BTreeMap<String, String>,
            defaults: &BTreeMap<String, String>,
        ) -> BTreeMap<String, String> {
            let mut merged = defaults.clone();
            merged.extend(mine);
            merged
        }
        fn by<T: Clone, K: PartialEq>(
            mine: Vec<T>,
            defaults: &[T],
            key: impl Fn(&T) -> K,
        ) -> Vec<T> {
            let mut merged: Vec<T> = defaults
                .iter()
                .filter(|d| !mine.iter().any(|m| key(m) == key(d)))
                .cloned()
                .collect();
            merged.extend(mine);
            merged
        }
        fn list<T: Clone>(mine: Vec<T>, defaults: &[T]) -> Vec<T> {
            if mine.is_empty() {
                defaults.to_vec()
            } else {
                mine
            }
        }
        PodOverrides {
            resources: self.resources.or_else(|| defaults.resources.clone()),
            scratch: self.scratch.or_else(|| defaults.scratch.clone()),
            node_selector: maps(self.node_selector, &defaults.node_selector),
            tolerations: list(self.tolerations, &defaults.tolerations),
            affinity: self.affinity.or_else(|| defaults.affinity.clone()),
            topology_spread_constraints: list(
                self.topology_spread_constraints,
                &defaults.topology_spread_constraints,
            ),
            env: by(self.env, &defaults.env, |e| e.name.clone()),
            image_pull_secrets: list(self.image_pull_secrets, &defaults.image_pull_secrets),
            service_account_name: self
                .service_account_name
                .or_else(|| defaults.service_account_name.clone()),
            priority_class_name: self
                .priority_class_name
                .or_else(|| defaults.priority_class_name.clone()),
            labels: maps(self.labels, &defaults.labels),
            annotations: maps(self.annotations, &defaults.annotations),
            ca_bundle: self.ca_bundle.or_else(|| defaults.ca_bundle.clone()),
            proxy: self.proxy.or_else(|| defaults.proxy.clone()),
            volumes: by(self.volumes, &defaults.volumes, |v| v.name.clone()),
            volume_mounts: by(self.volume_mounts, &defaults.volume_mounts, |m| {
                m.mount_path.clone()
            }),
        }
    }
}

/// Proxy settings, as Go's `net/http` reads them from the environment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxySettings {
    /// `HTTP_PROXY`, for example `http://proxy.example:3128`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_proxy: Option<String>,
    /// `HTTPS_PROXY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https_proxy: Option<String>,
    /// `NO_PROXY`: comma-separated hosts, domains (`.example`) and CIDRs reached directly,
    /// besides the cluster's own names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_proxy: Option<String>,
}

/// A ConfigMap or a Secret of CA certificates in the resource's namespace. Exactly one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.configMap) != has(self.secret)")
    .message("set exactly one of configMap or secret"))]
pub struct CaBundle {
    /// Name of a ConfigMap whose keys are PEM certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(NAME_PATTERN))]
    pub config_map: Option<String>,
    /// Name of a Secret whose keys are PEM certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(NAME_PATTERN))]
    pub secret: Option<String>,
}

/// Where Clair sends its traces: an OpenTelemetry collector that takes OTLP (Jaeger, Tempo,
/// the OpenTelemetry Collector). Each service reports itself as `clairv4/<service>`. See
/// docs/metrics.md.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TracingSpec {
    /// The collector's OTLP address, a URL: `http://` (no TLS) or `https://` (TLS, trusted
    /// through the system roots and `pod.caBundle`), a host and a port, for example
    /// `http://jaeger-collector.observability:4318` (HTTP) or `:4317` (gRPC). Over HTTP a
    /// path is a prefix (`/v1/traces` is appended, as to `OTEL_EXPORTER_OTLP_ENDPOINT`);
    /// over gRPC there is none.
    #[schemars(length(min = 1, max = 512), pattern(r"^https?://[^\s]+$"))]
    pub endpoint: String,
    /// `http` (OTLP over HTTP with protobuf) or `grpc`. Default `http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<OtlpProtocol>,
    /// The fraction of requests traced, a decimal from `0` to `1` (for example `0.05`). Clair
    /// 4.9 reads no caller's trace context: each request is sampled on its own (all of them
    /// at `log_level: debug`). Default `0.1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), pattern(r"^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$"))]
    pub sampling_ratio: Option<String>,
    /// A Secret in this namespace whose keys are header names and whose values are sent with
    /// every export (a tenant ID, an API key), so credentials stay out of the resource. An
    /// edit rolls the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(NAME_PATTERN))]
    pub headers_secret: Option<String>,
}

/// The OTLP transport.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum OtlpProtocol {
    /// OTLP over HTTP, protobuf-encoded (port 4318 by convention).
    #[default]
    Http,
    /// OTLP over gRPC (port 4317 by convention).
    Grpc,
}

/// Where a resource stands, for people and runbooks (`docs/runbooks/<Phase>.md`). The
/// conditions are the contract; the phase is their summary.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::Display,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
pub enum Phase {
    /// Observed, nothing checked yet.
    #[default]
    Pending,
    /// The config is present and valid.
    ConfigValid,
    /// The database answers with the service's credentials.
    DatabaseReady,
    /// A rollout is in progress.
    Deploying,
    /// Every wanted replica is ready: the healthy steady state.
    Available,
    /// The replica count is moving (spec or autoscaler).
    Scaling,
    /// A `Clair` moves to a new Clair version: `clairctl admin pre`, the services' roll,
    /// then `clairctl admin post`. Services never enter it.
    Upgrading,
    /// Something that was working is not: see the `Degraded` condition.
    Degraded,
}

impl Phase {
    /// The name on the wire and in runbook file names.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Status of an `Indexer`, `Matcher` or `Notifier`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    /// Where the service stands; see `docs/runbooks/<phase>.md`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// When it entered its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_since: Option<Time>,
    /// `Ready`, `ConfigValid`, `DatabaseReady`, `Progressing`, `Scaling` and `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods of the service's Deployment (read by the scale subresource).
    #[serde(default)]
    pub replicas: i32,
    /// Pods passing their readiness probe.
    #[serde(default)]
    pub ready_replicas: i32,
    /// The pods' label selector, serialized (read by the scale subresource and autoscalers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Hash of the merged config the running pods were given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// In-cluster URL of the service's API, for example
    /// `http://NAME.NAMESPACE.svc:6060`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_services_pod_settings_win_over_the_clairs_field_by_field() {
        let env = |name: &str, value: &str| EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        };
        let defaults = PodOverrides {
            priority_class_name: Some("scanners".into()),
            service_account_name: Some("clair".into()),
            labels: [("team", "sec"), ("cost", "a")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
            env: vec![env("GOMAXPROCS", "2"), env("TZ", "UTC")],
            ..Default::default()
        };
        let mine = PodOverrides {
            priority_class_name: Some("matchers".into()),
            labels: [("team".to_string(), "matching".to_string())].into(),
            env: vec![env("GOMAXPROCS", "4")],
            ..Default::default()
        };
        let merged = mine.over(&defaults);
        assert_eq!(merged.priority_class_name.as_deref(), Some("matchers"));
        assert_eq!(merged.service_account_name.as_deref(), Some("clair"));
        assert_eq!(merged.labels["team"], "matching");
        assert_eq!(merged.labels["cost"], "a");
        let vars: Vec<(String, String)> = merged
            .env
            .iter()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            vars,
            [
                ("TZ".into(), "UTC".into()),
                ("GOMAXPROCS".into(), "4".into())
            ]
        );
        // Nothing set anywhere: nothing set.
        assert_eq!(
            PodOverrides::default().over(&PodOverrides::default()),
            PodOverrides::default()
        );
    }
}
