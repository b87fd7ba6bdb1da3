//! What a reconcile's observe step reads through: the cluster (a [`Context`]: the
//! apiserver with the operator's access, the optional APIs it serves, the image allow-list,
//! the database checks, fresh random credentials), or, for `clair-operator render`, the
//! files given (where nothing owned exists yet, every database answers and credentials the
//! files lack are placeholders). The controllers' observe functions take an [`Observer`],
//! so `render` observes with their code.

use std::fmt::Debug;
use std::future::Future;

use futures::FutureExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::Resource;
use kube::api::{Api, DynamicObject, ListParams};
use rustls::pki_types::CertificateDer;
use serde::de::DeserializeOwned;
use tracing::debug;

use super::capabilities::OptionalApi;
use super::clair::credentials::{random_base64, random_hex};
use super::clair::probes;
use super::contents::Kind as ContentKind;
use super::error::ObserveError;
use super::service::workload::DeploymentState;
use super::{Context, Error};
use crate::database::connstring::ConnSettings;
use crate::database::probe::ProbeOptions;
use crate::platform::Platform;
use crate::sources::ObjectSource;

/// A namespaced kind an observe step can read by name.
pub trait ReadableKind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Send
    + 'static
{
}

impl<K> ReadableKind for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + 'static
{
}

/// A value the operator generates once, when the Secret that keeps it lacks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential {
    /// Clair's pre-shared key (`auth.psk.key`): 32 bytes, padded base64.
    Psk,
    /// A managed database role's password: 24 bytes, hex (safe in any connection string).
    Password,
}

/// How long a Clair's reconcile waits for a service controller's cache to bring the version
/// of a service its own watch showed (the same event, on another stream), and how often it
/// looks: a read after that.
const CACHE_CATCH_UP: std::time::Duration = std::time::Duration::from_millis(250);
const CACHE_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// A managed database engine (a StatefulSet of one replica, or a CloudNativePG Cluster) as
/// the cluster shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Engine {
    /// Its pod (a Cluster's primary) is ready.
    pub ready: bool,
    /// Its pod's UID (a Cluster's primary's), when the pod exists: a new one means the
    /// engine was replaced, or failed over.
    pub pod_uid: Option<String>,
}

/// The reads of an observe step, beyond the referenced ConfigMaps and Secrets.
pub trait Observer: ObjectSource {
    /// An object the resource owns, by name; `None` when there is none.
    fn owned<K: ReadableKind>(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<K>, kube::Error>> + Send;

    /// The objects of kind `K` with the labels of `selector` (`key=value,...`).
    fn owned_list<K: ReadableKind>(
        &self,
        namespace: &str,
        selector: &str,
    ) -> impl Future<Output = Result<Vec<K>, kube::Error>> + Send;

    /// A `Clair`'s service resource (`Indexer`, `Matcher`, `Notifier`) by name, from its
    /// controller's cache where that holds the version the Clair's watch last showed, else
    /// read.
    fn service<K: super::service::ServiceResource>(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<K>, kube::Error>> + Send {
        self.owned(namespace, name)
    }

    /// Deployment `name` of a service resource of kind `owner_kind`, as its reconcile
    /// judges it: from the service controller's watch where that can answer, else read.
    fn deployment(
        &self,
        owner_kind: &str,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<DeploymentState>, kube::Error>> + Send {
        let _ = owner_kind;
        self.owned::<Deployment>(namespace, name)
            .map(|read| read.map(|d| d.as_ref().map(DeploymentState::read)))
    }

    /// The managed engine of StatefulSet `name`.
    fn engine(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Engine, ObserveError>> + Send;

    /// The managed engine of CloudNativePG Cluster `name`.
    fn postgres_cluster(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Engine, ObserveError>> + Send;

    /// The last connection check of an external database (run apart from the reconcile,
    /// see `probes`), for `key`'s string parsed as `settings`, trusting `trusted`.
    fn database_check(
        &self,
        key: probes::Key,
        settings: &ConnSettings,
        options: ProbeOptions,
        trusted: &[CertificateDer<'static>],
    ) -> probes::Outcome;

    /// A new value of `credential`, for key `key` of a Secret that lacks it.
    fn generate(&self, credential: Credential, key: &str) -> Result<String, Error>;

    /// Whether the cluster serves `api`.
    fn serves(&self, api: OptionalApi) -> impl Future<Output = bool> + Send;

    /// What tenants may name: images, KEDA origins, database networks.
    fn platform(&self) -> &Platform;
}

/// Read once, then from [`super::contents`] while unchanged.
impl ObjectSource for Context {
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ConfigMap>, kube::Error> {
        if let Some(kept) = self.contents.config_map(namespace, name) {
            return Ok(Some(kept));
        }
        let reading = self
            .contents
            .reading(ContentKind::ConfigMap, namespace, name);
        let read = self.client.config_map(namespace, name).await?;
        self.contents.read_config_map(reading, read.as_ref());
        Ok(read)
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, kube::Error> {
        if let Some(kept) = self.contents.secret(namespace, name) {
            return Ok(Some(kept));
        }
        let reading = self.contents.reading(ContentKind::Secret, namespace, name);
        let read = self.client.secret(namespace, name).await?;
        self.contents.read_secret(reading, read.as_ref());
        if read.is_none() {
            // A generated one (the PSK, the passwords) is applied next: not read again.
            self.absent.read(&Secret::kind(&()), namespace, name);
        }
        Ok(read)
    }
}

impl Observer for Context {
    async fn owned<K: ReadableKind>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<K>, kube::Error> {
        Api::<K>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
    }

    async fn owned_list<K: ReadableKind>(
        &self,
        namespace: &str,
        selector: &str,
    ) -> Result<Vec<K>, kube::Error> {
        let list = Api::<K>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default().labels(selector))
            .await?;
        Ok(list.items)
    }

    async fn service<K: super::service::ServiceResource>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<K>, kube::Error> {
        // The service controller's cache and the Clair's own watch of its services are two
        // streams: the cached object is taken only at the version the Clair's watch (whose
        // event triggered this reconcile) last showed or a later one, else a fresh status
        // could be missed with no event left to bring it. (A later one's event reconciles
        // the Clair again when its watch brings it.)
        let kind = K::kind(&());
        let seen = self.owned.resource_version("Clair", &kind, namespace, name);
        let fresh = |cached: &K| match (&cached.meta().resource_version, &seen) {
            (Some(cached), Some(seen)) => super::versions::at_least(cached, seen),
            _ => false,
        };
        let Some(seen) = &seen else {
            // Neither the Clair's watch of its services (listed) nor the controller's
            // cache of every one in scope (listed, labelled or not) has it: not made yet.
            // That stands for the applier's read before its first apply as a read would
            // (`absent`): a cache of every object of the kind is a moment old, as a read
            // is by the time the apply follows it. (One made in that moment is someone
            // else's the apply would take over; its watch event reconciles the Clair again.)
            if self.owned.listed("Clair", &kind, namespace)
                && self
                    .stores
                    .lacks(std::any::TypeId::of::<K>(), namespace, name)
            {
                self.absent.read(&kind, namespace, name);
                return Ok(None);
            }
            return self.owned(namespace, name).await;
        };
        // The two streams bring the same event moments apart: the cache is given a moment
        // to catch up before the object is read.
        let deadline = tokio::time::Instant::now() + CACHE_CATCH_UP;
        loop {
            match self.stores.get::<K>(namespace, name) {
                Some(cached) if fresh(cached.as_ref()) => return Ok(Some(cached.as_ref().clone())),
                Some(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(CACHE_POLL).await;
                }
                _ => {
                    debug!(%kind, %namespace, %name, %seen, "service cache behind the Clair's watch: read");
                    return self.owned(namespace, name).await;
                }
            }
        }
    }

    async fn deployment(
        &self,
        owner_kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<DeploymentState>, kube::Error> {
        match self.owned.deployment(owner_kind, namespace, name) {
            // From the watch whose events trigger the reconcile: never behind the event
            // that woke it. One without a template hash (an older operator's) is read.
            Some(state) if state.judgeable() => Ok(Some(state)),
            _ => {
                let read = self.owned::<Deployment>(namespace, name).await?;
                if read.is_none() {
                    // Made next, in this reconcile: its applier need not read it again.
                    self.absent.read(&Deployment::kind(&()), namespace, name);
                }
                Ok(read.as_ref().map(DeploymentState::read))
            }
        }
    }

    async fn engine(&self, namespace: &str, name: &str) -> Result<Engine, ObserveError> {
        // A StatefulSet of one replica names its pod NAME-0; its status changes (watched)
        // when the pod is replaced, so this is read again then.
        let pod = format!("{name}-0");
        let pod_uid = Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get_metadata_opt(&pod)
            .await
            .map_err(ObserveError::reading(format!("Pod {pod}")))?
            .and_then(|p| p.metadata.uid);
        let ready = Api::<StatefulSet>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(ObserveError::reading(format!("StatefulSet {name}")))?
            .and_then(|s| s.status)
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        Ok(Engine {
            ready: ready >= 1,
            pod_uid,
        })
    }

    async fn postgres_cluster(&self, namespace: &str, name: &str) -> Result<Engine, ObserveError> {
        let resource = crate::render::cloudnative_pg::cluster_resource();
        let cluster =
            Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &resource)
                .get_opt(name)
                .await
                .map_err(ObserveError::reading(format!("Cluster {name}")))?;
        let Some(primary) = cluster
            .as_ref()
            .and_then(|c| crate::render::cloudnative_pg::serving_primary(&c.data))
        else {
            return Ok(Engine {
                ready: false,
                pod_uid: None,
            });
        };
        let pod_uid = Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get_metadata_opt(&primary)
            .await
            .map_err(ObserveError::reading(format!("Pod {primary}")))?
            .and_then(|p| p.metadata.uid);
        Ok(Engine {
            ready: pod_uid.is_some(),
            pod_uid,
        })
    }

    fn database_check(
        &self,
        key: probes::Key,
        settings: &ConnSettings,
        options: ProbeOptions,
        trusted: &[CertificateDer<'static>],
    ) -> probes::Outcome {
        self.probes.result(
            key,
            settings,
            options,
            trusted,
            &self.platform.databases,
            self.metrics.clone(),
        )
    }

    fn generate(&self, credential: Credential, _key: &str) -> Result<String, Error> {
        match credential {
            Credential::Psk => random_base64(32),
            Credential::Password => random_hex(24),
        }
    }

    async fn serves(&self, api: OptionalApi) -> bool {
        self.capabilities.serves(api).await
    }

    fn platform(&self) -> &Platform {
        &self.platform
    }
}
