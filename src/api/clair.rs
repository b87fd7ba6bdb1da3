//! `Clair`: the batteries-included entry point. It owns the generated config Secret, the
//! managed database when asked for, the routing object, the updater CronJob when asked for,
//! and the three service resources.

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Autoscaling, ConfigSource, KeyReference, Phase, PodOverrides, TracingSpec};

/// A Clair deployment: indexer, matcher and notifier as separate services, with their
/// database, routing and updaters.
// Each printcolumn(...) repeats `type_`; clippy takes that for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "clair.projectquay.io",
    version = "v1alpha1",
    kind = "Clair",
    namespaced,
    doc = "A Clair deployment: indexer, matcher and notifier as separate services, with their database, routing and updaters.",
    status = "ClairStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "clr",
    // What the operator names after the Clair must be valid: Services (DNS-1035 labels) and
    // pods whose labels hold their StatefulSet's or CronJob's name (63 characters at most).
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')")
        .message("metadata.name: a Clair's name begins with a letter and holds lowercase letters, digits and '-' only: it names Services"),
    validation = Rule::new("size(self.metadata.name) <= 43")
        .message("metadata.name: at most 43 characters, so that NAME-updaters and NAME-database fit the 63 characters of a pod label"),
    validation = Rule::new("!has(self.spec.database.managed) || !has(self.spec.database.managed.perService) || !self.spec.database.managed.perService || size(self.metadata.name) <= 34")
        .message("metadata.name: at most 34 characters with database.managed.perService, so that NAME-database-notifier fits the 63 characters of a pod label"),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Where the deployment stands; see docs/runbooks/<phase>.md"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Status of the Ready condition"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.image",
        priority = 1,
        description = "Clair image, when not the default"
    ),
    printcolumn(
        name = "Indexers",
        type_ = "integer",
        json_path = ".status.indexer.readyReplicas",
        priority = 1,
        description = "Ready indexer pods"
    ),
    printcolumn(
        name = "Matchers",
        type_ = "integer",
        json_path = ".status.matcher.readyReplicas",
        priority = 1,
        description = "Ready matcher pods"
    ),
    printcolumn(
        name = "Notifiers",
        type_ = "integer",
        json_path = ".status.notifier.readyReplicas",
        priority = 1,
        description = "Ready notifier pods"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!has(self.database.external) || (has(self.notifier) && has(self.notifier.enabled) && !self.notifier.enabled) || has(self.database.external.notifier)")
    .message("database.external.notifier is required while the notifier is enabled: name its connection string, or set notifier.enabled to false")
    .field_path(".database.external"))]
#[x_kube(validation = Rule::new(
    "!has(self.quay) || has(self.quay.endpoint) || (has(self.routing) && has(self.routing.host))")
    .message("quay needs one base URL that serves all three services: set routing.host, or quay.endpoint for an address of the cluster's ingress or gateway")
    .field_path(".quay"))]
#[x_kube(validation = Rule::new(
    "!has(self.matcher) || !has(self.matcher.autoscaling) || (has(self.updaters) && has(self.updaters.mode) && self.updaters.mode == 'CronJob')")
    .message("an autoscaled matcher needs updaters.mode: CronJob: with the matcher running the updaters, every pod the autoscaler adds starts a full updater run")
    .field_path(".updaters"))]
pub struct ClairSpec {
    /// The Clair image of every service, unless a service names its own. Default
    /// `quay.io/projectquay/clair:4.9.0`. A change of Clair version runs the
    /// `clairctl admin pre/post` upgrade steps around the roll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// User config layered over the generated config, in order, with Clair's drop-in rules:
    /// `.yaml`/`.json` keys are JSON Merge Patches, `.yaml-patch`/`.json-patch` keys are JSON
    /// Patches. Use them for notifier delivery, updater sets, tracing and the like.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub dropins: Vec<ConfigSource>,
    /// The PostgreSQL databases of the three services: `managed` by the operator or
    /// `external` (for example a cloud database).
    pub database: DatabaseSpec,
    /// The indexer service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indexer: Option<Box<ServiceOverrides>>,
    /// The matcher service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<Box<ServiceOverrides>>,
    /// The notifier service, which may be switched off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notifier: Option<Box<NotifierOverrides>>,
    /// Settings of every pod this Clair runs: the three services, the updater CronJob and
    /// the upgrade Jobs (a mirror's pull secret, a private CA, a proxy, scheduling). A
    /// service's own `pod` settings win field by field; labels, annotations, variables and
    /// volumes merge, the service's winning. Resources and scratch apply to the services.
    /// The `caBundle` is also what the operator trusts when it checks an external database
    /// with `sslmode=verify-ca` or `verify-full`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Box<PodOverrides>>,
    /// How clients outside the cluster reach Clair's API. Unset: no routing object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingSpec>,
    /// Who runs the vulnerability updaters. Unset: the matcher runs them (Clair's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updaters: Option<UpdatersSpec>,
    /// How long one upgrade step (`clairctl admin pre` or `post`) may run before it counts as
    /// failed (`UpgradeFailed`, the roll stopped) instead of holding the `Clair` in
    /// `Upgrading` forever. Default 21600 (six hours: a step may migrate a large database).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60))]
    pub upgrade_step_timeout_seconds: Option<i64>,
    /// Send every service's traces to an OTLP collector; each reports itself as
    /// `clairv4/indexer`, `clairv4/matcher` or `clairv4/notifier`. Unset: no traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingSpec>,
    /// Wire this Clair to a Quay (docs/quay.md): the notifier delivers to Quay, Quay's key
    /// signs the requests both ways, and a Secret `<name>-quay` holds Quay's side of the
    /// config, ready to merge into its config bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quay: Option<QuaySpec>,
    /// Let only who needs them reach this Clair's services, with a NetworkPolicy over their
    /// pods (enforced where the cluster's network plugin enforces policies): the Clair's own
    /// pods (the notifier and matcher call the indexer), the pods of `clients` and `routers`
    /// on the API port, and those of `monitoring` on the introspection port. Unset: no
    /// policy, anyone may reach them (docs/security.md, "Network policies").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<ServicesNetworkPolicy>,
}

/// Who may reach a Clair's services besides its own pods: namespaces by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicesNetworkPolicy {
    /// Namespaces whose pods call the API directly: Quay's (`quay`), or this one's own when
    /// Quay runs beside Clair.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(length(min = 1, max = 63), pattern(crate::api::common::LABEL_PATTERN))
    )]
    pub clients: Vec<String>,
    /// Namespaces of the router, ingress controller or gateway that routes to the API
    /// (`openshift-ingress`, `ingress-nginx`), for `spec.routing`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(length(min = 1, max = 63), pattern(crate::api::common::LABEL_PATTERN))
    )]
    pub routers: Vec<String>,
    /// Namespaces whose Prometheus scrapes the introspection port. Default `monitoring`,
    /// `openshift-monitoring` and `openshift-user-workload-monitoring`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 16),
        inner(length(min = 1, max = 63), pattern(crate::api::common::LABEL_PATTERN))
    )]
    pub monitoring: Option<Vec<String>>,
}

/// The namespaces a Prometheus usually runs in: kube-prometheus's and OpenShift's.
pub const MONITORING_NAMESPACES: [&str; 3] = [
    "monitoring",
    "openshift-monitoring",
    "openshift-user-workload-monitoring",
];

impl ServicesNetworkPolicy {
    /// The namespaces that may scrape the introspection port.
    pub fn monitoring(&self) -> Vec<String> {
        match &self.monitoring {
            Some(namespaces) => namespaces.clone(),
            None => MONITORING_NAMESPACES.map(String::from).to_vec(),
        }
    }
}

impl ClairSpec {
    /// What the spec sets for one of its services (`spec.indexer`, `spec.matcher`, the
    /// notifier's service settings).
    pub fn overrides(&self, role: super::ServiceKind) -> Option<&ServiceOverrides> {
        match role {
            super::ServiceKind::Indexer => self.indexer.as_deref(),
            super::ServiceKind::Matcher => self.matcher.as_deref(),
            super::ServiceKind::Notifier => self.notifier.as_ref().map(|n| &n.service),
        }
    }
}

/// A Quay that uses this Clair.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.url.matches('^https?://[^/?#@]+(/[^?#]*)?$')")
    .message("quay.url: Quay's base URL, http:// or https:// with a host, for example https://quay.example.com")
    .field_path(".url"))]
#[x_kube(validation = Rule::new("!has(self.endpoint) || self.endpoint.matches('^https?://[^/?#@]+/?$')")
    .message("quay.endpoint: a base URL with no path (Quay joins /indexer/..., /matcher/... and /notifier/... onto its root and drops any path), for example https://clair.example.com")
    .field_path(".endpoint"))]
pub struct QuaySpec {
    /// Quay's base URL as Clair's notifier reaches it, for example
    /// `https://quay.example.com` or, in the cluster, `http://quay-app.quay.svc`:
    /// notifications are delivered to its `/secscan/notification`.
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// The base URL Quay is given for Clair (`SECURITY_SCANNER_V4_ENDPOINT`), which must
    /// route `/indexer/`, `/matcher/` and `/notifier/` to the services at its root. Default:
    /// the URL of `routing.host`. Set it when Quay reaches Clair through another address of
    /// the cluster's ingress or gateway (with `routing` and no `routing.host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub endpoint: Option<String>,
    /// The pre-shared key Quay already signs with (its `SECURITY_SCANNER_V4_PSK`, base64), in
    /// a Secret of this namespace. Unset: the operator's generated key (Secret `<name>-psk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psk: Option<KeyReference>,
}

/// Settings for one service of a `Clair`, copied into the service resource it owns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceOverrides {
    /// The service's image, overriding `spec.image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// Number of pods while `autoscaling` is unset. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Run an autoscaler (a HorizontalPodAutoscaler, or a KEDA ScaledObject) instead of a
    /// fixed replica count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
    /// Settings of the pods: resources, scratch volume, scheduling and environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodOverrides>,
}

/// The notifier's settings; `enabled: false` runs no notifier.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotifierOverrides {
    /// Run a notifier. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Settings shared with the other services.
    #[serde(flatten)]
    pub service: ServiceOverrides,
}

/// The databases. Exactly one of `managed` and `external` is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.managed) != has(self.external)")
    .message("set exactly one of database.managed or database.external"))]
#[x_kube(validation = Rule::new("has(self.managed) == has(oldSelf.managed)")
    .message("database.managed and database.external cannot be swapped on a running Clair: a managed database's data stays in its engines; create a new Clair and move the data"))]
pub struct DatabaseSpec {
    /// A PostgreSQL run by the operator: one engine with a database and a role per service,
    /// or one engine per service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed: Option<ManagedDatabase>,
    /// Databases run elsewhere: a connection string per service, read from Secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalDatabase>,
}

/// A PostgreSQL the operator runs: its own StatefulSet per engine, or a CloudNativePG
/// `Cluster` per engine where CloudNativePG is installed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "(has(self.perService) && self.perService) == (has(oldSelf.perService) && oldSelf.perService)"
).message(
    "database.managed.perService cannot change on a running Clair: the data lives in the engines \
     it has (and deleteClaims would delete it); create a new Clair and move the data"
).field_path(".perService"))]
#[x_kube(validation = Rule::new(
    "(has(self.engine) ? self.engine : 'BuiltIn') == (has(oldSelf.engine) ? oldSelf.engine : 'BuiltIn')"
).message(
    "database.managed.engine cannot change on a running Clair: the data lives in the engines it \
     has; create a new Clair on the other engine and move the data (docs/database.md)"
).field_path(".engine"))]
#[x_kube(validation = Rule::new(
    "!has(self.instances) || (has(self.engine) && self.engine == 'CloudNativePG')"
).message(
    "database.managed.instances needs engine CloudNativePG: the built-in engine runs one pod"
).field_path(".instances"))]
#[x_kube(validation = Rule::new(
    "!(has(self.networkPolicy) && self.networkPolicy) || !has(self.engine) || self.engine == 'BuiltIn'"
).message(
    "database.managed.networkPolicy is for the built-in engine: CloudNativePG's pods must reach \
     each other and its operator, so write that policy with CloudNativePG's labels"
).field_path(".networkPolicy"))]
pub struct ManagedDatabase {
    /// What runs the engines: `BuiltIn` (a StatefulSet of one PostgreSQL pod per engine,
    /// written by this operator) or `CloudNativePG` (a CloudNativePG `Cluster` per engine,
    /// with replicas and failover; the cluster must serve `postgresql.cnpg.io/v1`). Fixed
    /// once the `Clair` exists. Default `BuiltIn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<DatabaseEngine>,
    /// PostgreSQL instances of each CloudNativePG cluster: one primary and the rest hot
    /// standbys it fails over to. Default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 9))]
    pub instances: Option<i32>,
    /// The PostgreSQL image. Default `docker.io/library/postgres:17` for the built-in engine,
    /// `ghcr.io/cloudnative-pg/postgresql:17` (an operand image: PostgreSQL and what
    /// CloudNativePG's instance manager needs) for CloudNativePG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// Run one engine per service instead of one shared engine, for high volume. Fixed once
    /// the `Clair` exists: changing it would leave the data in the engines it had.
    #[serde(default)]
    pub per_service: bool,
    /// The engine's data volume (per engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<DatabaseStorage>,
    /// CPU and memory of the engine's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// The engine's `max_connections`. Default 200. Pool sizes times maximum replicas of
    /// every service are checked against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 10000))]
    pub max_connections: Option<i32>,
    /// Delete the data volumes when the `Clair` is deleted. Default false: data outlives the
    /// resource.
    #[serde(default)]
    pub delete_claims: bool,
    /// Let only this `Clair`'s services, updaters and upgrade steps reach the engines, with a
    /// NetworkPolicy (enforced where the cluster's network plugin enforces policies).
    /// Default false.
    #[serde(default)]
    pub network_policy: bool,
}

/// What runs a managed database's engines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DatabaseEngine {
    /// A StatefulSet of one PostgreSQL pod per engine, written by this operator.
    #[default]
    BuiltIn,
    /// A CloudNativePG `Cluster` per engine (`postgresql.cnpg.io/v1`).
    #[serde(rename = "CloudNativePG")]
    CloudNativePg,
}

impl ManagedDatabase {
    /// The engine kind, `BuiltIn` when unset.
    pub fn engine(&self) -> DatabaseEngine {
        self.engine.unwrap_or_default()
    }
}

/// The data volume of a managed engine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseStorage {
    /// Size of the PersistentVolumeClaim. Default 50Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Quantity>,
    /// StorageClass of the claim; the cluster default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// Connection strings of databases run elsewhere, each a key of a Secret in this namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalDatabase {
    /// The indexer's connection string (`postgresql://...` or `key=value` form).
    pub indexer: KeyReference,
    /// The matcher's connection string.
    pub matcher: KeyReference,
    /// The notifier's connection string; required while the notifier is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notifier: Option<KeyReference>,
}

/// Which kind of object routes outside traffic to the services.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RoutingKind {
    /// The best the cluster serves: an OpenShift Route, else a Gateway API HTTPRoute when a
    /// gateway is named, else an Ingress.
    #[default]
    Auto,
    /// A networking.k8s.io/v1 Ingress.
    Ingress,
    /// An OpenShift route.openshift.io/v1 Route.
    Route,
    /// A Gateway API gateway.networking.k8s.io/v1 HTTPRoute.
    #[serde(rename = "HTTPRoute")]
    HttpRoute,
    /// No routing object.
    None,
}

/// Routing of Clair's API paths (`/indexer/`, `/matcher/`, `/notifier/`) to the services.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.kind) || self.kind != 'HTTPRoute' || has(self.gateway)")
    .message("routing.gateway is required when routing.kind is HTTPRoute: name the Gateway to attach to")
    .field_path(".gateway"))]
pub struct RoutingSpec {
    /// The object to create. Default `Auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<RoutingKind>,
    /// Host name clients use, for example `clair.example.com`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub host: Option<String>,
    /// A `kubernetes.io/tls` Secret with the certificate served for `host`. TLS is
    /// terminated at the router; unset serves plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(crate::api::common::NAME_PATTERN))]
    pub tls_secret_name: Option<String>,
    /// IngressClass of the Ingress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_class_name: Option<String>,
    /// The Gateway an HTTPRoute attaches to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayReference>,
}

/// A Gateway API parent reference.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayReference {
    /// Name of the Gateway.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the Gateway; this namespace when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The Gateway listener to attach to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// Who runs the updaters that fetch vulnerability data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum UpdaterMode {
    /// The matcher runs them in its own pods (Clair's default).
    #[default]
    Matcher,
    /// A CronJob runs them with `clairctl`, with its own resources and schedule; the
    /// matcher gets `disable_updaters: true`.
    CronJob,
    /// For air-gapped clusters: a CronJob runs the updaters with `clairctl export-updaters`
    /// into `updaters.export` (a file on a PersistentVolumeClaim), which a Clair in the
    /// disconnected cluster imports (`updaters.import`). This Clair's matcher keeps running
    /// its own updaters; `UpdatersReady` reports the export's runs.
    Export,
}

/// The updaters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.mode) || !(self.mode in ['CronJob', 'Export']) || has(self.schedule)")
    .message("updaters.schedule is required when updaters.mode is CronJob or Export, for example \"0 */6 * * *\"")
    .field_path(".schedule"))]
#[x_kube(validation = Rule::new("(has(self.mode) && self.mode == 'Export') == has(self.export)")
    .message("updaters.export is set exactly when updaters.mode is Export: name the claim and file the export goes to")
    .field_path(".export"))]
#[x_kube(validation = Rule::new("!has(self.export) || !has(self.import)")
    .message("updaters.export and updaters.import exclude each other: a Clair either exports vulnerability data or imports it")
    .field_path(".import"))]
pub struct UpdatersSpec {
    /// Who runs the updaters. Default `Matcher`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<UpdaterMode>,
    /// Cron schedule of the CronJob, for example `0 */6 * * *`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub schedule: Option<String>,
    /// CPU and memory of the CronJob's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// For air-gapped clusters: import vulnerability data exported elsewhere
    /// (`clairctl export-updaters`) instead of fetching it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import: Option<UpdaterImport>,
    /// With `mode: Export`: the claim and file each run writes the export to (replaced
    /// whole when the run succeeds, so a reader never sees half a file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<ClaimFile>,
    /// With `mode: CronJob`: vulnerability data older than this many seconds turns
    /// `UpdatersReady` False (`VulnerabilityDataStale`), the phase unchanged. Default: twice
    /// the time between two runs of the schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60))]
    pub stale_after_seconds: Option<i64>,
}

/// An export of updater data to import. Exactly one of `url` and `persistentVolumeClaim`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.url) != has(self.persistentVolumeClaim)")
    .message("set exactly one of url or persistentVolumeClaim"))]
pub struct UpdaterImport {
    /// An HTTP(S) URL serving the export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A file on a PersistentVolumeClaim in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<ClaimFile>,
}

/// A file on a PersistentVolumeClaim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimFile {
    /// Name of the claim.
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: String,
    /// Path of the export within the claim, for example `updates.json.zst`.
    #[schemars(length(min = 1))]
    pub path: String,
}

/// Status of a `Clair`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClairStatus {
    /// Where the deployment stands; see `docs/runbooks/<phase>.md`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// When it entered its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_since: Option<Time>,
    /// `Ready`, `ConfigValid`, `DatabaseReady`, `Progressing`, `Scaling`, `Degraded`, one
    /// per service (`IndexerReady`, `MatcherReady`, `NotifierReady`), `ConnectionsFit`,
    /// `RoutingReady`, `Upgrading`, `UpdatersReady` and, with a notifier,
    /// `NotificationsDelivered`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Name of the generated config Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_secret: Option<String>,
    /// The Clair version the services run (from the image tag), for upgrade steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The indexer resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indexer: Option<ChildStatus>,
    /// The matcher resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<ChildStatus>,
    /// The notifier resource, when enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notifier: Option<ChildStatus>,
    /// URL clients outside the cluster use, when routing is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The updater CronJob's runs, when it runs the updaters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updaters: Option<UpdatersStatus>,
    /// What a Quay is given, with `spec.quay`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quay: Option<QuayStatus>,
}

/// Quay's side of `spec.quay`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuayStatus {
    /// `SECURITY_SCANNER_V4_ENDPOINT`: the base URL serving all three services.
    pub endpoint: String,
    /// The Secret whose `config.yaml` holds Quay's keys (the endpoint, the PSK, the two
    /// features), ready to merge into Quay's config bundle.
    pub config_secret: String,
    /// Where the notifier delivers: Quay's `/secscan/notification`.
    pub notification_url: String,
}

/// How the updater CronJob's runs went, as far as the cluster still records them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatersStatus {
    /// When a run last succeeded: how old the vulnerability data is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_time: Option<Time>,
    /// When a run last failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_time: Option<Time>,
    /// Why it failed: its Job and the Job's failure message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_message: Option<String>,
    /// Failed runs among the Jobs the CronJob keeps (its last three).
    #[serde(default)]
    pub failed_runs: i32,
    /// Data older than this counts as stale (`spec.updaters.staleAfterSeconds`, or twice the
    /// schedule's interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_after_seconds: Option<i64>,
}

/// A service resource owned by a `Clair`, as last observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildStatus {
    /// Name of the resource.
    pub name: String,
    /// Its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Its ready pods.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Its in-cluster URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A step of a move to a new Clair version: `clairctl admin pre` before the services roll,
/// `clairctl admin post` once they run the new version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum UpgradeStep {
    Pre,
    Post,
}
