//! The controllers: observe (reads) → decide (the machine, pure) → render (pure builders) →
//! apply (server-side apply, skipped when unchanged; unwanted owned objects deleted) →
//! status (one write, only when it changed) and an Event on each transition.

pub mod apply;
pub mod capabilities;
pub mod clair;
pub mod credentials;
pub mod database;
pub mod observe;
pub mod service;
pub mod templates;
pub mod upgrade;

use std::sync::Arc;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

pub use crate::api::labels::FIELD_MANAGER;

/// Errors of one reconcile; each has a reason for logs and metrics.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot serialize an object: {0}")]
    Serialize(serde_json::Error),
    #[error("the resource has no {0}")]
    MissingField(&'static str),
    #[error("the operating system gave no random bytes: {0}")]
    Random(String),
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "ApiError",
            Error::Serialize(_) => "SerializeError",
            Error::MissingField(_) => "MissingField",
            Error::Random(_) => "RandomUnavailable",
        }
    }
}

/// The objects of `store` in `namespace` that `matches` selects, as requests to reconcile:
/// how a change to a ConfigMap or Secret reaches the resources that use it.
fn related<K>(
    store: &kube::runtime::reflector::Store<K>,
    namespace: Option<&str>,
    matches: impl Fn(&K) -> bool,
) -> Vec<kube::runtime::reflector::ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter(|k| k.meta().namespace.as_deref() == namespace)
        .filter(|k| matches(k.as_ref()))
        .map(|k| kube::runtime::reflector::ObjectRef::from_obj(k.as_ref()))
        .collect()
}

/// Now, as `metav1.Time` holds it: second precision, so what the operator writes equals
/// what the apiserver gives back.
fn now() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    use k8s_openapi::jiff::Timestamp;
    let now = Timestamp::now();
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Timestamp::from_second(now.as_second()).unwrap_or(now),
    )
}

/// Writes `status` into `name`'s status subresource (server-side apply, our field manager).
async fn write_status<K>(
    api: &kube::Api<K>,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &kube::api::PatchParams::apply(FIELD_MANAGER).force(),
        &kube::api::Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Records the Event of a phase transition on `object`.
async fn publish_transition(
    context: &Context,
    event: &crate::machine::EventSpec,
    transition: Option<(crate::api::Phase, crate::api::Phase)>,
    object: &k8s_openapi::api::core::v1::ObjectReference,
) {
    use kube::runtime::events::{Event, EventType};
    let published = context
        .recorder
        .publish(
            &Event {
                type_: if event.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: event.reason.as_str().to_string(),
                note: Some(event.note.clone()),
                // The recorder folds Events with the same action and reason into one
                // series; naming the edge keeps each kind of transition visible.
                action: match transition {
                    Some((from, to)) => format!("{from}To{to}"),
                    None => "Reconcile".to_string(),
                },
                secondary: None,
            },
            object,
        )
        .await;
    if let Err(e) = published {
        tracing::warn!(object = ?object.name, error = %e, "cannot record the transition Event");
    }
}

/// Whether a config source names the ConfigMap `name`.
fn names_config_map(source: &crate::api::ConfigSource, name: &str) -> bool {
    source.config_map.as_ref().is_some_and(|r| r.name == name)
}

/// Whether a config source names the Secret `name`.
fn names_secret(source: &crate::api::ConfigSource, name: &str) -> bool {
    source.secret.as_ref().is_some_and(|r| r.name == name)
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub capabilities: capabilities::Capabilities,
}

impl Context {
    pub fn new(client: Client) -> Arc<Self> {
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_string(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Arc::new(Self {
            recorder: Recorder::new(client.clone(), reporter),
            capabilities: capabilities::Capabilities::new(client.clone()),
            client,
        })
    }
}

/// Runs the controllers (`Clair`, the three service kinds, and template re-rendering) until
/// `shutdown` resolves.
pub async fn run(
    client: Client,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let context = Context::new(client);
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    futures::join!(
        clair::run(context.clone(), shutdown.clone()),
        service::run::<crate::api::Indexer>(context.clone(), shutdown.clone()),
        service::run::<crate::api::Matcher>(context.clone(), shutdown.clone()),
        service::run::<crate::api::Notifier>(context.clone(), shutdown.clone()),
        templates::run::<k8s_openapi::api::core::v1::ConfigMap>(context.clone(), shutdown.clone()),
        templates::run::<k8s_openapi::api::core::v1::Secret>(context, shutdown),
    );
}
