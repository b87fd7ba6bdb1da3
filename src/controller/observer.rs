//! What a reconcile's observe step reads through: the cluster (a [`Context`]: the
//! apiserver with the operator's access, the optional APIs it serves, the image allow-list),
//! or, for `clair-operator render`, the files given (where nothing owned exists yet). The
//! controllers' observe functions take an [`Observer`], so `render` observes with their code.

use std::fmt::Debug;
use std::future::Future;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Resource;
use kube::api::Api;
use serde::de::DeserializeOwned;

use super::Context;
use super::capabilities::OptionalApi;
use crate::images::ImagePolicy;
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

/// The reads of an observe step, beyond the referenced ConfigMaps and Secrets.
pub trait Observer: ObjectSource {
    /// An object the resource owns, by name; `None` when there is none.
    fn owned<K: ReadableKind>(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<K>, kube::Error>> + Send;

    /// Whether the cluster serves `api`.
    fn serves(&self, api: OptionalApi) -> impl Future<Output = bool> + Send;

    /// The images resources may run (`--allowed-images`).
    fn images(&self) -> &ImagePolicy;
}

impl ObjectSource for Context {
    fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ConfigMap>, kube::Error>> + Send {
        self.client.config_map(namespace, name)
    }

    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Secret>, kube::Error>> + Send {
        self.client.secret(namespace, name)
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

    async fn serves(&self, api: OptionalApi) -> bool {
        self.capabilities.serves(api).await
    }

    fn images(&self) -> &ImagePolicy {
        &self.images
    }
}
