//! `clair-operator render`: every object the operator would create for the given resources,
//! offline, for reviewing a change in a pull request the way `helm template` and
//! `kustomize build` are used.
//!
//! The controllers' own pipeline runs on what the files hold: the same observation types,
//! the same machines deciding from them (a first reconcile: nothing exists yet), the same
//! builders and the same config validation, so an invalid config fails with the message its
//! condition would show. What only a cluster can tell is taken as fine and said so: an
//! external database answers (its strings are read and parsed, never dialled), a managed
//! engine is ready. Generated credentials that the files do not hold are placeholders.
//! Owner references are left out: their UIDs exist only in a cluster, and an object applied
//! by hand with a made-up owner would be garbage-collected at once. Secrets whose values
//! are text show them as `stringData` (the same object once applied), so a config change
//! reads as one in a diff.

use std::collections::{BTreeMap, VecDeque};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use rustls::pki_types::CertificateDer;
use serde::Serialize;
use serde_json::Value;

use crate::api::Clair;
use crate::controller::capabilities::OptionalApi;
use crate::controller::clair::observe as clair_observe;
use crate::controller::clair::probes;
use crate::controller::error::ObserveError;
use crate::controller::observer::{Credential, Engine, Observer, ReadableKind};
use crate::controller::service::ServiceResource;
use crate::controller::service::observe as service_observe;
use crate::controller::{self, clair, service};
use crate::database::connstring::ConnSettings;
use crate::database::probe::{ProbeOptions, Probed};
use crate::machine::conditions::ConditionType;
use crate::machine::{ApplyPlan, Decision};
use crate::platform::Platform;
use crate::render::clair::ClairInput;
use crate::render::owned::{ClairObjects, Owned, ServiceObjects, Write};
use crate::render::pod::PodUsers;
use crate::render::service::ServiceInput;
use crate::sources::ObjectSource;
use crate::webhook::resources::{self, Fetched, Resource as Admitted};

/// A pre-shared key that is valid base64 of 32 bytes, as Clair requires, and says what it
/// is when decoded ("rendered offline: not a real key").
const PLACEHOLDER_PSK: &str = "cmVuZGVyZWQgb2ZmbGluZTogbm90IGEgcmVhbCBrZXk=";

/// What the cluster would otherwise tell.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The namespace of documents that name none.
    pub namespace: String,
    /// OpenShift: pods leave their user to the platform.
    pub users: PodUsers,
    /// The cluster serves OpenShift Routes, Gateway API HTTPRoutes, ServiceMonitors, KEDA's
    /// ScaledObjects, CloudNativePG's Clusters.
    pub routes: bool,
    pub http_routes: bool,
    /// Its HTTPRoute CRD keeps a rule's `timeouts` (Gateway API v1.2 and later).
    pub http_route_timeouts: bool,
    pub service_monitors: bool,
    pub scaled_objects: bool,
    pub postgres_clusters: bool,
    /// What tenants may name, as the operator would run with.
    pub platform: Platform,
}

/// Why nothing was rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("document {} ({what}): {message}", index + 1)]
    Input {
        index: usize,
        what: String,
        message: String,
    },
    /// The operator would not roll this resource out: its conditions say why.
    #[error("{object}: the operator would not roll it out:\n{conditions}")]
    Refused { object: String, conditions: String },
    #[error("{object}: {message}")]
    Object { object: String, message: String },
}

/// The objects, in the order the operator applies them, and the warnings its admission
/// webhook would give.
#[derive(Debug, Default)]
pub struct Rendered {
    pub objects: Vec<Value>,
    pub warnings: Vec<String>,
}

/// The ConfigMaps and Secrets given, by namespace and name: what the pipeline reads.
#[derive(Default)]
struct Files {
    config_maps: BTreeMap<(String, String), ConfigMap>,
    secrets: BTreeMap<(String, String), Secret>,
}

impl ObjectSource for Files {
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ConfigMap>, kube::Error> {
        Ok(self
            .config_maps
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, kube::Error> {
        Ok(self
            .secrets
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }
}

/// The cluster `render` imagines: the files' ConfigMaps and Secrets, nothing owned yet (a
/// first reconcile), the optional APIs and images the options name.
struct Offline<'a> {
    files: &'a Files,
    options: &'a Options,
}

impl ObjectSource for Offline<'_> {
    fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ConfigMap>, kube::Error>> + Send {
        self.files.config_map(namespace, name)
    }
    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Secret>, kube::Error>> + Send {
        self.files.secret(namespace, name)
    }
}

impl Observer for Offline<'_> {
    async fn owned<K: ReadableKind>(
        &self,
        _namespace: &str,
        _name: &str,
    ) -> Result<Option<K>, kube::Error> {
        Ok(None)
    }

    async fn owned_list<K: ReadableKind>(
        &self,
        _namespace: &str,
        _selector: &str,
    ) -> Result<Vec<K>, kube::Error> {
        Ok(Vec::new())
    }

    /// Taken as ready: only a cluster can tell.
    async fn engine(&self, _namespace: &str, _name: &str) -> Result<Engine, ObserveError> {
        Ok(Engine {
            ready: true,
            pod_uid: None,
        })
    }

    /// Taken as serving, as [`Self::engine`].
    async fn postgres_cluster(&self, namespace: &str, name: &str) -> Result<Engine, ObserveError> {
        self.engine(namespace, name).await
    }

    /// Taken as answering, its `max_connections` unknown: the string is never dialled.
    fn database_check(
        &self,
        _key: probes::Key,
        _settings: &ConnSettings,
        _options: ProbeOptions,
        _trusted: &[CertificateDer<'static>],
    ) -> probes::Outcome {
        probes::Outcome::Checked(Ok(Probed {
            max_connections: None,
            undelivered: None,
        }))
    }

    /// A placeholder that says what it is.
    fn generate(&self, credential: Credential, key: &str) -> Result<String, controller::Error> {
        Ok(match credential {
            Credential::Psk => PLACEHOLDER_PSK.to_string(),
            Credential::Password => format!("rendered-offline-{key}"),
        })
    }

    async fn serves(&self, api: OptionalApi) -> bool {
        let options = self.options;
        match api {
            OptionalApi::ServiceMonitor => options.service_monitors,
            OptionalApi::Route => options.routes,
            OptionalApi::HttpRoute => options.http_routes,
            OptionalApi::HttpRouteTimeouts => options.http_route_timeouts,
            OptionalApi::SecurityContextConstraints => {
                options.users == PodUsers::AssignedByPlatform
            }
            OptionalApi::ScaledObject => options.scaled_objects,
            OptionalApi::PostgresCluster => options.postgres_clusters,
        }
    }

    fn platform(&self) -> &Platform {
        &self.options.platform
    }
}

impl Files {
    /// Adds the Secrets and ConfigMaps among `objects` (a Clair's, which its services read).
    fn add_rendered(&mut self, objects: &[Value]) -> Result<(), serde_json::Error> {
        for object in objects {
            let key = |o: &Value| {
                (
                    o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            };
            match object["kind"].as_str() {
                Some("Secret") => {
                    self.secrets
                        .insert(key(object), serde_json::from_value(object.clone())?);
                }
                Some("ConfigMap") => {
                    self.config_maps
                        .insert(key(object), serde_json::from_value(object.clone())?);
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Renders `documents` (ConfigMaps, Secrets, Clairs, Indexers, Matchers, Notifiers).
pub fn render(documents: Vec<Value>, options: &Options) -> Result<Rendered, RenderError> {
    let mut files = Files::default();
    let mut resources = Vec::new();
    for (index, mut document) in documents.into_iter().enumerate() {
        let kind = document["kind"].as_str().unwrap_or_default().to_string();
        let name = document["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let what = format!("{kind} {name}");
        let input_error = |message: String| RenderError::Input {
            index,
            what: what.clone(),
            message,
        };
        if name.is_empty() {
            return Err(input_error("metadata.name is missing".to_string()));
        }
        if document["metadata"]["namespace"].as_str().is_none() {
            document["metadata"]["namespace"] = Value::from(options.namespace.clone());
        }
        let namespace = document["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match kind.as_str() {
            "ConfigMap" => {
                let object =
                    crate::api::decode::named("ConfigMap", document).map_err(input_error)?;
                files.config_maps.insert((namespace, name), object);
            }
            "Secret" => {
                let object = crate::api::decode::named("Secret", document).map_err(input_error)?;
                files.secrets.insert((namespace, name), object);
            }
            "Clair" | "Indexer" | "Matcher" | "Notifier" => {
                let object: DynamicObject =
                    serde_json::from_value(document).map_err(|e| input_error(e.to_string()))?;
                let decoded = Admitted::decode(&object, &kind)
                    .map_err(input_error)?
                    .ok_or_else(|| input_error("not a kind render takes".to_string()))?;
                resources.push(decoded);
            }
            _ => {
                return Err(input_error(
                    "render takes Clair, Indexer, Matcher, Notifier, ConfigMap and Secret \
                     documents; leave others out"
                        .to_string(),
                ));
            }
        }
    }
    let mut rendered = Rendered::default();
    for resource in &resources {
        admit(resource, &files, options, &mut rendered.warnings)?;
    }
    // A Clair's service resources are rendered after its own objects, which they read.
    let mut queue = VecDeque::from(resources);
    while let Some(resource) = queue.pop_front() {
        let objects = match resource {
            Admitted::Clair(clair) => {
                let (objects, children) = clair_objects(&files, options, &clair)?;
                files
                    .add_rendered(&objects)
                    .map_err(|e| RenderError::Object {
                        object: format!("Clair {}", clair.name_any()),
                        message: e.to_string(),
                    })?;
                for child in children.into_iter().rev() {
                    queue.push_front(child);
                }
                objects
            }
            Admitted::Indexer(o) => service_objects(&files, options, &o)?,
            Admitted::Matcher(o) => service_objects(&files, options, &o)?,
            Admitted::Notifier(o) => service_objects(&files, options, &o)?,
        };
        rendered.objects.extend(objects);
    }
    for object in &mut rendered.objects {
        if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("ownerReferences");
        }
        readable_secret(object);
    }
    Ok(rendered)
}

/// The admission webhook's checks: a refusal fails the render, warnings are kept.
fn admit(
    resource: &Admitted,
    files: &Files,
    options: &Options,
    warnings: &mut Vec<String>,
) -> Result<(), RenderError> {
    let fetched = Fetched(
        resource
            .sources()
            .into_iter()
            .map(|source| {
                let namespace = resource.meta().namespace.clone().unwrap_or_default();
                let read = block_on(crate::sources::read_source(files, &namespace, &source));
                let text = match read {
                    Ok(Ok(document)) => Ok(document.text),
                    Ok(Err(missing)) => Err(missing),
                    Err(e) => Err(e.to_string()),
                };
                (source, text)
            })
            .collect(),
    );
    let verdict = resources::check(resource, &fetched, &options.platform);
    let object = format!(
        "{} {}",
        resource.kind(),
        resource.meta().name.clone().unwrap_or_default()
    );
    warnings.extend(verdict.warnings.iter().map(|w| format!("{object}: {w}")));
    match verdict.denied {
        Some(message) => Err(RenderError::Object { object, message }),
        None => Ok(()),
    }
}

/// The offline reads finish at once: they never wait on anything.
fn block_on<F: Future>(future: F) -> F::Output {
    futures::executor::block_on(future)
}

/// A resource made offline has no UID; its children's owner references need one (they are
/// left out of the output).
fn with_placeholder_uid<K: Resource + Clone>(object: &K) -> K {
    let mut object = object.clone();
    object.meta_mut().uid = Some(format!("render-{}", object.name_any()));
    object
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Fails unless the decision rolls everything out, naming the conditions that say why.
fn rolled_out(object: String, decision: &Decision) -> Result<(), RenderError> {
    if decision.apply == ApplyPlan::Everything {
        return Ok(());
    }
    Err(RenderError::Refused {
        object,
        conditions: failing(&decision.conditions).join("\n"),
    })
}

/// The conditions that hold a rollout back, as `kubectl describe` would list them.
fn failing(conditions: &[Condition]) -> Vec<String> {
    use ConditionType as T;
    let blocking_when_false = [
        T::ConfigValid,
        T::DatabaseReady,
        T::ConnectionsFit,
        T::RoutingReady,
    ]
    .map(T::as_str);
    let line = |c: &Condition| format!("  {} {} ({}): {}", c.type_, c.status, c.reason, c.message);
    let blocking: Vec<String> = conditions
        .iter()
        .filter(|c| {
            (c.status == "False" && blocking_when_false.contains(&c.type_.as_str()))
                || (c.type_ == T::Degraded.as_str() && c.status == "True")
        })
        .map(line)
        .collect();
    if blocking.is_empty() {
        conditions
            .iter()
            .filter(|c| c.status != "True")
            .map(line)
            .collect()
    } else {
        blocking
    }
}

/// Secrets with `stringData` where their values are text: the same object once applied,
/// and a rendered config a reviewer can read and diff. (Public for the test that compares
/// rendered objects with the cluster's.)
pub fn readable_secret(object: &mut Value) {
    use base64::Engine;
    if object["kind"] != "Secret" {
        return;
    }
    let Some(data) = object["data"].as_object() else {
        return;
    };
    let decoded: Option<serde_json::Map<String, Value>> = data
        .iter()
        .map(|(key, value)| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(value.as_str()?)
                .ok()?;
            Some((key.clone(), Value::from(String::from_utf8(bytes).ok()?)))
        })
        .collect();
    if let (Some(decoded), Some(map)) = (decoded, object.as_object_mut()) {
        map.remove("data");
        map.insert("stringData".to_string(), Value::Object(decoded));
    }
}

/// What a target cluster may serve beyond Kubernetes itself (`render --serves`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Served {
    /// OpenShift Routes.
    Route,
    /// Gateway API HTTPRoutes (before v1.2: a rule keeps no `timeouts`).
    Httproute,
    /// Gateway API v1.2 or later, whose HTTPRoutes keep a rule's `timeouts`: implies
    /// `httproute`.
    HttprouteTimeouts,
    /// Prometheus Operator ServiceMonitors.
    Servicemonitor,
    /// OpenShift's security context constraints: pods leave their user to the platform.
    Scc,
    /// KEDA's ScaledObject.
    Scaledobject,
    /// CloudNativePG's Cluster (and Database).
    Cloudnativepg,
}

impl Options {
    /// The options of a cluster serving `served`, rendering into `namespace` under `platform`.
    pub fn serving(served: &[Served], namespace: String, platform: Platform) -> Self {
        Self {
            namespace,
            users: if served.contains(&Served::Scc) {
                PodUsers::AssignedByPlatform
            } else {
                PodUsers::Numeric
            },
            routes: served.contains(&Served::Route),
            http_routes: served.contains(&Served::Httproute)
                || served.contains(&Served::HttprouteTimeouts),
            http_route_timeouts: served.contains(&Served::HttprouteTimeouts),
            service_monitors: served.contains(&Served::Servicemonitor),
            scaled_objects: served.contains(&Served::Scaledobject),
            postgres_clusters: served.contains(&Served::Cloudnativepg),
            platform,
        }
    }
}

/// How the rendered objects are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// YAML documents separated by `---`.
    Yaml,
    /// One JSON `List`.
    Json,
}

/// The documents of every file, in order (`-`: standard input).
pub fn read_files(files: &[std::path::PathBuf]) -> Result<Vec<Value>, String> {
    let mut all = Vec::new();
    for file in files {
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).map_err(|e| format!("standard input: {e}"))?
        } else {
            std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?
        };
        let parsed =
            documents(&text).map_err(|e| format!("{}: not YAML or JSON: {e}", file.display()))?;
        all.extend(parsed);
    }
    Ok(all)
}

/// The objects written as `format` says.
pub fn write(objects: &[Value], format: Format) -> Result<String, String> {
    match format {
        Format::Yaml => to_yaml(objects),
        Format::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
            Ok(serde_json::to_string_pretty(&list).map_err(|e| e.to_string())? + "\n")
        }
    }
}

/// The objects as YAML documents separated by `---`.
pub fn to_yaml(objects: &[Value]) -> Result<String, String> {
    let documents = objects
        .iter()
        .map(serde_saphyr::to_string)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    Ok(documents.join("---\n"))
}

/// The documents of a YAML or JSON text (several separated by `---`; the items of a `List`,
/// as `kubectl get -o yaml` prints).
pub fn documents(text: &str) -> Result<Vec<Value>, String> {
    let parsed: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| e.to_string())?;
    let mut documents = Vec::new();
    for document in parsed {
        match document["kind"].as_str() {
            Some("List") => {
                documents.extend(document["items"].as_array().cloned().unwrap_or_default())
            }
            _ if document.is_object() => documents.push(document),
            _ => {}
        }
    }
    Ok(documents)
}

fn values<T: Serialize + kube::Resource>(
    owned: &Owned<T>,
    into: &mut Vec<Value>,
) -> Result<(), serde_json::Error> {
    for write in owned.objects().values() {
        if let Write::Apply(object) | Write::CreateOnce(object) = write {
            into.push(serde_json::to_value(object)?);
        }
    }
    Ok(())
}

/// The objects of `owned` that are written (not kept as they are).
fn applied<T: Clone + kube::Resource>(owned: &Owned<T>) -> impl Iterator<Item = T> + '_ {
    owned.objects().values().filter_map(|write| match write {
        Write::Apply(o) | Write::CreateOnce(o) => Some(o.clone()),
        Write::Keep => None,
    })
}

/// A `Clair`'s own objects, and the service resources among them.
fn clair_objects(
    files: &Files,
    options: &Options,
    clair: &Clair,
) -> Result<(Vec<Value>, Vec<Admitted>), RenderError> {
    let clair = with_placeholder_uid(clair);
    let (name, namespace) = (clair.name_any(), clair.namespace().unwrap_or_default());
    let object = format!("Clair {name}");
    let fail = |message: String| RenderError::Object {
        object: object.clone(),
        message,
    };
    let input = ClairInput {
        name: &name,
        namespace: &namespace,
        owner: clair
            .controller_owner_ref(&())
            .ok_or_else(|| fail("no owner reference".to_string()))?,
        spec: &clair.spec,
        users: options.users,
    };
    let offline = Offline { files, options };
    let observed = block_on(clair_observe::observe(&offline, &input, &clair))
        .map_err(|e| fail(e.to_string()))?;
    let plan = clair::plan::plan(&input, &observed, 1, None, &now());
    rolled_out(object.clone(), &plan.decision)?;
    let ClairObjects {
        secrets,
        config_maps,
        services,
        stateful_sets,
        network_policies,
        jobs,
        indexers,
        matchers,
        notifiers,
        cron_jobs,
        ingresses,
        routes,
        http_routes,
        postgres_clusters,
        postgres_databases,
    } = plan.objects;
    let mut out = Vec::new();
    let written = (|| {
        values(&secrets, &mut out)?;
        values(&config_maps, &mut out)?;
        values(&services, &mut out)?;
        values(&stateful_sets, &mut out)?;
        values(&network_policies, &mut out)?;
        values(&postgres_clusters, &mut out)?;
        values(&postgres_databases, &mut out)?;
        values(&jobs, &mut out)?;
        values(&indexers, &mut out)?;
        values(&matchers, &mut out)?;
        values(&notifiers, &mut out)?;
        values(&cron_jobs, &mut out)?;
        values(&ingresses, &mut out)?;
        values(&routes, &mut out)?;
        values(&http_routes, &mut out)
    })();
    written.map_err(|e| fail(e.to_string()))?;
    let children = (applied(&indexers).map(Admitted::Indexer))
        .chain(applied(&matchers).map(Admitted::Matcher))
        .chain(applied(&notifiers).map(Admitted::Notifier))
        .collect();
    Ok((out, children))
}

/// A service resource's objects, as its first reconcile would apply them.
fn service_objects<K: ServiceResource>(
    files: &Files,
    options: &Options,
    object: &K,
) -> Result<Vec<Value>, RenderError> {
    let object = with_placeholder_uid(object);
    let (name, namespace) = (object.name_any(), object.namespace().unwrap_or_default());
    let described = format!("{} {name}", K::kind(&()));
    let fail = |message: String| RenderError::Object {
        object: described.clone(),
        message,
    };
    let spec = object.service_spec();
    let offline = Offline { files, options };
    let observed = block_on(service_observe::observe(
        &offline,
        K::KIND,
        &namespace,
        &name,
        spec,
    ))
    .map_err(|e| fail(e.to_string()))?
    .ok_or_else(|| fail("no Deployment exists offline, yet its status was stale".to_string()))?;
    let input = ServiceInput {
        kind: K::KIND,
        name: &name,
        namespace: &namespace,
        owner: object
            .controller_owner_ref(&())
            .ok_or_else(|| fail("no owner reference".to_string()))?,
        spec,
        current_replicas: observed.current_replicas(),
        users: options.users,
    };
    let plan = service::plan::plan(&input, &observed, 1, None, &now());
    rolled_out(described.clone(), &plan.decision)?;
    let ServiceObjects {
        secrets,
        deployments,
        services,
        disruption_budgets,
        autoscalers,
        service_monitors,
        scaled_objects,
    } = plan.objects;
    let mut out = Vec::new();
    let written = (|| {
        values(&secrets, &mut out)?;
        values(&deployments, &mut out)?;
        values(&services, &mut out)?;
        values(&disruption_budgets, &mut out)?;
        values(&autoscalers, &mut out)?;
        values(&service_monitors, &mut out)?;
        values(&scaled_objects, &mut out)
    })();
    written.map_err(|e| fail(e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            namespace: "default".to_string(),
            ..Default::default()
        }
    }

    fn rendered(text: &str) -> Result<Rendered, RenderError> {
        render(documents(text).expect("parses"), &options())
    }

    /// `examples/NAME.yaml` rendered is `tests/golden/render/NAME.yaml`; with
    /// `UPDATE_GOLDEN=1` the golden file is rewritten (review the diff).
    fn golden(name: &str) {
        let root = env!("CARGO_MANIFEST_DIR");
        let example = std::fs::read_to_string(format!("{root}/examples/{name}.yaml")).unwrap();
        let output = to_yaml(&rendered(&example).unwrap().objects).unwrap();
        let path = format!("{root}/tests/golden/render/{name}.yaml");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(format!("{root}/tests/golden/render")).unwrap();
            std::fs::write(&path, &output).unwrap();
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{path}: {e} (UPDATE_GOLDEN=1 cargo test offline writes it)")
        });
        assert!(
            output == expected,
            "render of examples/{name}.yaml differs from {path}; if the change is meant, \
             rerun with UPDATE_GOLDEN=1 and review the diff"
        );
    }

    #[test]
    fn the_clair_example_renders_as_its_golden_file() {
        golden("clair");
    }

    #[test]
    fn the_services_example_renders_as_its_golden_file() {
        golden("services");
    }

    #[test]
    fn a_clair_renders_its_services_objects_after_its_own() {
        let example = include_str!("../examples/clair.yaml");
        let kinds: Vec<(String, String)> = rendered(example)
            .unwrap()
            .objects
            .iter()
            .map(|o| {
                let name = o["metadata"]["name"].as_str().unwrap_or_default();
                (
                    o["kind"].as_str().unwrap_or_default().to_string(),
                    name.to_string(),
                )
            })
            .collect();
        let position = |kind: &str, name: &str| {
            kinds
                .iter()
                .position(|(k, n)| k == kind && n == name)
                .unwrap_or_else(|| panic!("no {kind} {name} in {kinds:?}"))
        };
        assert!(position("Secret", "clair-config") < position("Indexer", "clair-indexer"));
        assert!(position("Indexer", "clair-indexer") < position("Deployment", "clair-indexer"));
        position("Deployment", "clair-matcher");
        position("HorizontalPodAutoscaler", "clair-indexer");
        position("Deployment", "clair-notifier");
        position("Ingress", "clair");
        position("CronJob", "clair-updaters");
        // Never an owner reference with a made-up UID.
        let text = to_yaml(&rendered(example).unwrap().objects).unwrap();
        assert!(!text.contains("ownerReferences"));
    }

    #[test]
    fn an_invalid_config_fails_with_the_message_of_its_condition() {
        let services = include_str!("../examples/services.yaml");
        let bad = services.replace("log_level: info", "log_level: loud");
        assert_ne!(bad, services, "the example changed: pick another edit");
        let error = rendered(&bad).unwrap_err().to_string();
        // The condition the service would carry, built by the machine from the same check.
        let (observation, _) = service_observe::judge(
            &crate::clairconfig::Document {
                name: "x".to_string(),
                key: "config.yaml".to_string(),
                text: "log_level: loud\n".to_string(),
                secret: false,
            },
            &[],
            crate::api::ServiceKind::Indexer,
        );
        let condition = crate::machine::observation::config_condition("indexer", &observation);
        let message = condition.message.split(';').next().unwrap().to_string();
        assert!(
            error.contains("ConfigValid False (ConfigInvalid)"),
            "{error}"
        );
        assert!(error.contains(&message), "{error}\nlacks {message}");
    }

    #[test]
    fn a_missing_dropin_names_the_field() {
        let example = include_str!("../examples/clair.yaml");
        let error = rendered(&example.replace("overrides.yaml: |", "other.yaml: |"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("spec.dropins[0]: ConfigMap clair-overrides has no key overrides.yaml"),
            "{error}"
        );
    }

    #[test]
    fn a_managed_database_renders_its_engines_with_placeholder_passwords() {
        let text = r#"
apiVersion: clair.projectquay.io/v1alpha1
kind: Clair
metadata: {name: c, namespace: team}
spec:
  database: {managed: {}}
  notifier: {enabled: false}
"#;
        let output = rendered(text).unwrap();
        let kinds: Vec<&str> = output
            .objects
            .iter()
            .filter_map(|o| o["kind"].as_str())
            .collect();
        assert!(kinds.contains(&"StatefulSet"), "{kinds:?}");
        assert!(!kinds.contains(&"Notifier"), "{kinds:?}");
        let yaml = to_yaml(&output.objects).unwrap();
        assert!(
            yaml.contains("rendered-offline-"),
            "placeholders are marked"
        );
    }

    #[test]
    fn a_database_on_cloudnative_pg_renders_clusters_where_it_is_served() {
        let text = r#"
apiVersion: clair.projectquay.io/v1alpha1
kind: Clair
metadata: {name: c, namespace: team}
spec:
  database: {managed: {engine: CloudNativePG, perService: true}}
  notifier: {enabled: false}
"#;
        let served = Options::serving(&[Served::Cloudnativepg], "team".into(), Default::default());
        let with: Vec<String> = render(documents(text).expect("parses"), &served)
            .unwrap()
            .objects
            .iter()
            .filter_map(|o| o["kind"].as_str().map(String::from))
            .collect();
        assert_eq!(
            with.iter().filter(|k| *k == "Cluster").count(),
            3,
            "{with:?}"
        );
        assert_eq!(
            with.iter().filter(|k| *k == "Database").count(),
            3,
            "{with:?}"
        );
        assert!(!with.iter().any(|k| k == "StatefulSet"), "{with:?}");
        // Not served: the Clair waits, and says what to install.
        let refused = render(documents(text).expect("parses"), &options())
            .unwrap_err()
            .to_string();
        assert!(refused.contains("install CloudNativePG"), "{refused}");
    }

    #[test]
    fn a_psk_secret_given_is_used_instead_of_the_placeholder() {
        let example = include_str!("../examples/clair.yaml");
        let key = "Z2l2ZW4gaW4gdGhlIGZpbGVzOiB0aGUgcmVhbCBrZXkh";
        let text = format!(
            "{example}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: clair-psk}}\nstringData: {{key: {key}}}\n"
        );
        let yaml = to_yaml(&rendered(&text).unwrap().objects).unwrap();
        assert!(yaml.contains(key), "the given key is rendered");
        assert!(!yaml.contains(PLACEHOLDER_PSK), "no placeholder beside it");
    }

    #[test]
    fn what_render_cannot_take_is_refused_by_document() {
        let error = rendered("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("document 1 (Pod p)"), "{error}");
        let example = include_str!("../examples/clair.yaml");
        let error = rendered(&example.replace(
            "minReplicas: 2, maxReplicas: 6",
            "minReplicas: two, maxReplicas: 6",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("spec.indexer.autoscaling.minReplicas"),
            "{error}"
        );
    }

    #[test]
    fn an_image_outside_the_allowed_ones_is_refused() {
        let example = include_str!("../examples/clair.yaml");
        let options = Options {
            platform: Platform {
                images: crate::images::ImagePolicy::new(["registry.example/".to_string()]),
                ..Default::default()
            },
            ..options()
        };
        let error = render(documents(example).unwrap(), &options).unwrap_err();
        assert!(
            error.to_string().contains("quay.io/projectquay/clair"),
            "{error}"
        );
    }
}
