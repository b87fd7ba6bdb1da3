//! What the controllers watch, and where. Their own resources come in full (they are cached
//! and reconciled); everything else only as metadata: a trigger needs a name, labels and
//! owner references, never the data of a tenant's Secret. So 2,000 unrelated Secrets of
//! 50 KiB cost the operator their names, not 100 MB of traffic and parsing; referenced
//! objects are read by name when a reconcile needs them.

use kube::api::{Api, PartialObjectMeta};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, Resource};

use crate::api::labels;

/// Where a set of controllers looks: the whole cluster, or one namespace (`--namespaces`
/// runs one set per namespace, each with namespaced requests only, so Roles suffice).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Cluster,
    Namespace(String),
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Cluster => f.write_str("cluster-wide"),
            Scope::Namespace(namespace) => write!(f, "namespace {namespace}"),
        }
    }
}

impl Scope {
    /// Whether an object in `namespace` is in this scope.
    pub fn holds(&self, namespace: Option<&str>) -> bool {
        match self {
            Scope::Cluster => true,
            Scope::Namespace(own) => namespace == Some(own.as_str()),
        }
    }

    /// One scope per namespace, or the cluster when none is named.
    pub fn of(namespaces: &[String]) -> Vec<Scope> {
        if namespaces.is_empty() {
            vec![Scope::Cluster]
        } else {
            namespaces.iter().cloned().map(Scope::Namespace).collect()
        }
    }

    /// The API of kind `K` in this scope.
    pub fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match self {
            Scope::Cluster => Api::all(client.clone()),
            Scope::Namespace(namespace) => Api::namespaced(client.clone(), namespace),
        }
    }
}

/// A kind the controllers watch: namespaced, decodable, sent between tasks.
pub trait WatchedKind:
    Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + 'static
{
}

impl<K> WatchedKind for K where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static
{
}

/// The objects of kind `K`, metadata only (kube asks the apiserver for
/// `PartialObjectMetadata` when the type is [`PartialObjectMeta`]).
pub fn metadata<K>(client: &Client, scope: &Scope) -> Api<PartialObjectMeta<K>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    scope.api::<PartialObjectMeta<K>>(client)
}

/// As [`metadata`], for the kind of an owned field (`ClairObjects`, `ServiceObjects`): the
/// controllers' watch lists are written over their families' fields, destructured in full,
/// so a new owned kind does not compile until its watch (or why it has none) is written.
pub fn of<K>(
    _field: &crate::render::owned::Owned<K>,
    client: &Client,
    scope: &Scope,
) -> Api<PartialObjectMeta<K>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    metadata::<K>(client, scope)
}

/// As [`of`], as a stream for `Controller::owns_stream` or `watches_stream`: the watch
/// records on the way what it shows of the objects an `owner_kind` controls
/// ([`super::owned`]), so the applier need not list them, and (ConfigMaps and Secrets)
/// drops from [`super::contents`] what changed.
pub fn owned_by<K>(
    context: &super::Context,
    owner_kind: &str,
    _field: &crate::render::owned::Owned<K>,
    client: &Client,
    scope: &Scope,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static + use<K>
where
    K: WatchedKind,
{
    use kube::runtime::WatchStreamExt;
    let events = tapped(
        context,
        owner_kind,
        scope,
        metadata::<K>(client, scope),
        config,
    );
    context
        .contents
        .tap::<K, _>(super::contents::Kind::of(&K::kind(&())), events)
        .touched_objects()
}

/// The watch of `api` in `scope`, recording on the way what it shows of the objects an
/// `owner_kind` controls.
fn tapped<O>(
    context: &super::Context,
    owner_kind: &str,
    scope: &Scope,
    api: Api<O>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<watcher::Event<O>, watcher::Error>> + Send + 'static + use<O>
where
    O: Resource<DynamicType = ()>
        + super::owned::Watched
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    use kube::runtime::WatchStreamExt;
    let namespace = match scope {
        Scope::Cluster => None,
        Scope::Namespace(namespace) => Some(namespace.as_str()),
    };
    let events = watcher(api, config).default_backoff();
    context
        .owned
        .tap::<O, _>(owner_kind, &O::kind(&()), namespace, events)
}

/// As [`owned_by`], the objects in full: for the service controllers' Deployments, whose
/// status (what the phase is decided from) the metadata does not carry. What the watch
/// shows is kept in [`super::owned`] as a `DeploymentState` (a few fields, not the object),
/// so a reconcile reads its Deployment only where the watch cannot answer.
pub fn owned_in_full<K>(
    context: &super::Context,
    owner_kind: &str,
    _field: &crate::render::owned::Owned<K>,
    client: &Client,
    scope: &Scope,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static + use<K>
where
    K: WatchedKind + super::owned::Watched,
{
    use kube::runtime::WatchStreamExt;
    tapped(context, owner_kind, scope, scope.api::<K>(client), config).touched_objects()
}

/// Every ConfigMap or Secret in `scope`, metadata only, for `watches_stream`: a trigger
/// for the resources that name one, dropping from [`super::contents`] what changed.
pub fn referenced<K>(
    context: &super::Context,
    client: &Client,
    scope: &Scope,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static + use<K>
where
    K: WatchedKind,
{
    use kube::runtime::WatchStreamExt;
    let events = watcher(metadata::<K>(client, scope), every()).default_backoff();
    context
        .contents
        .tap::<K, _>(super::contents::Kind::of(&K::kind(&())), events)
        .touched_objects()
}

/// Those of the watched objects this operator manages: a trigger for their owners.
pub fn managed() -> watcher::Config {
    watcher::Config::default().labels(&labels::managed_selector())
}

/// Those of the watched objects this operator made for services of `component` (`indexer`,
/// `matcher`, `notifier`): each service controller hears its own kind's only.
pub fn managed_component(component: &str) -> watcher::Config {
    watcher::Config::default().labels(&format!(
        "{},{}={component}",
        labels::managed_selector(),
        labels::COMPONENT
    ))
}

/// Every watched object: a trigger for the resources that name one (a drop-in ConfigMap, a
/// connection-string Secret, a template's input).
pub fn every() -> watcher::Config {
    watcher::Config::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_namespaces_is_the_cluster() {
        assert_eq!(Scope::of(&[]), vec![Scope::Cluster]);
        assert_eq!(
            Scope::of(&["a".to_string(), "b".to_string()]),
            vec![
                Scope::Namespace("a".to_string()),
                Scope::Namespace("b".to_string())
            ]
        );
    }
}
