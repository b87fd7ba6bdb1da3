//! What the cluster serves beyond core Kubernetes (ServiceMonitors, OpenShift Routes, Gateway
//! API HTTPRoutes, KEDA's ScaledObjects), checked through discovery, shared by every
//! controller. The answers are forgotten when a CustomResourceDefinition changes (and after a
//! minute in any case), so an API installed after the operator started is picked up without a
//! restart.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::render::pod::PodUsers;

const RECHECK: Duration = Duration::from_secs(60);

/// An optional API the operator uses when the cluster serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::VariantArray)]
pub enum OptionalApi {
    /// `monitoring.coreos.com/v1` ServiceMonitor (Prometheus Operator).
    ServiceMonitor,
    /// `route.openshift.io/v1` Route (OpenShift).
    Route,
    /// `gateway.networking.k8s.io/v1` HTTPRoute (Gateway API).
    HttpRoute,
    /// `security.openshift.io/v1` SecurityContextConstraints: OpenShift assigns pods their
    /// users, so the operator names none.
    SecurityContextConstraints,
    /// `keda.sh/v1alpha1` ScaledObject (KEDA): autoscaling on Clair's own metrics.
    ScaledObject,
}

impl OptionalApi {
    fn group_version(self) -> &'static str {
        match self {
            OptionalApi::ServiceMonitor => "monitoring.coreos.com/v1",
            OptionalApi::Route => "route.openshift.io/v1",
            OptionalApi::HttpRoute => "gateway.networking.k8s.io/v1",
            OptionalApi::SecurityContextConstraints => "security.openshift.io/v1",
            OptionalApi::ScaledObject => "keda.sh/v1alpha1",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            OptionalApi::ServiceMonitor => "servicemonitors",
            OptionalApi::Route => "routes",
            OptionalApi::HttpRoute => "httproutes",
            OptionalApi::SecurityContextConstraints => "securitycontextconstraints",
            OptionalApi::ScaledObject => "scaledobjects",
        }
    }

    /// The CRD name that serves it (`servicemonitors.monitoring.coreos.com`).
    fn crd_name(self) -> String {
        let group = self.group_version().split('/').next().unwrap_or_default();
        format!("{}.{group}", self.plural())
    }
}

pub struct Capabilities {
    client: Client,
    known: Mutex<HashMap<OptionalApi, (bool, Instant)>>,
}

impl Capabilities {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the cluster serves `api`.
    pub async fn serves(&self, api: OptionalApi) -> bool {
        if let Ok(known) = self.known.lock()
            && let Some((served, at)) = known.get(&api)
            && at.elapsed() < RECHECK
        {
            return *served;
        }
        let served = match self
            .client
            .list_api_group_resources(api.group_version())
            .await
        {
            Ok(list) => list.resources.iter().any(|r| r.name == api.plural()),
            // Not served: learnt. Any other failure (a timeout, a 503 while the apiserver
            // rebuilds discovery) teaches nothing: keep the last answer, unremembered, so a
            // passing error never flips what the operator renders (on OpenShift, the pods'
            // users).
            Err(kube::Error::Api(e)) if e.code == 404 => false,
            Err(_) => {
                let last = self
                    .known
                    .lock()
                    .ok()
                    .and_then(|known| known.get(&api).map(|(served, _)| *served));
                return last.unwrap_or(false);
            }
        };
        if let Ok(mut known) = self.known.lock() {
            known.insert(api, (served, Instant::now()));
        }
        served
    }

    /// Who picks the pods' users on this cluster.
    pub async fn pod_users(&self) -> PodUsers {
        if self.serves(OptionalApi::SecurityContextConstraints).await {
            PodUsers::AssignedByPlatform
        } else {
            PodUsers::Numeric
        }
    }

    /// Forgets what was learnt, so the next question asks discovery again.
    pub fn forget(&self) {
        if let Ok(mut known) = self.known.lock() {
            known.clear();
        }
    }
}

/// One item each time a CRD of an optional API is added, changed or removed, after
/// [`Capabilities::forget`]: a controller given it with `reconcile_all_on` re-reconciles
/// everything with the new answer. Watches CRD metadata only.
pub fn optional_api_changes(
    client: Client,
    capabilities: std::sync::Arc<super::Context>,
) -> impl Stream<Item = ()> + Send + 'static {
    let names: Vec<String> = <OptionalApi as strum::VariantArray>::VARIANTS
        .iter()
        .map(|a| a.crd_name())
        .collect();
    let api: Api<PartialObjectMeta<CustomResourceDefinition>> = Api::all(client);
    watcher(api, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .filter_map(move |crd| {
            let relevant = crd.is_ok_and(|crd| names.contains(&crd.name_any()));
            if relevant {
                capabilities.capabilities.forget();
            }
            futures::future::ready(relevant.then_some(()))
        })
}
