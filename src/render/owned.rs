//! The desired state of one resource: every object it should own, by kind, with how each is
//! written. A reconcile builds one such value from its decision; the controller's applier
//! applies it in dependency order and deletes every owned object of a pruned kind that the
//! value does not name.
//!
//! The family structs ([`ClairObjects`], [`ServiceObjects`]) are destructured without `..`
//! by the applier, so a new owned kind does not compile until the applier handles it; by
//! their `kinds()`, the list the OLM bundle is made from and the RBAC roles are checked
//! against; and by each controller's watch list, which names every field (watched, or why
//! not).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::DynamicObject;

use crate::api::{Indexer, Matcher, Notifier};

/// How one desired object is written.
#[derive(Clone, Debug, PartialEq)]
pub enum Write<T> {
    /// Server-side applied; skipped when the live object already holds it.
    Apply(T),
    /// Created when absent, never changed afterwards (immutable config snapshots, Jobs).
    CreateOnce(T),
    /// Left as it is if it exists: neither written nor deleted (a workload held at its
    /// last good config, a finished upgrade step).
    Keep,
}

/// The objects of one kind a resource should own, by name.
#[derive(Clone, Debug, PartialEq)]
pub struct Owned<T> {
    objects: BTreeMap<String, Write<T>>,
    prune: bool,
}

impl<T: kube::Resource> Owned<T> {
    /// Exactly the objects added: any other object of the kind the resource owns is deleted.
    pub fn exactly() -> Self {
        Self {
            objects: BTreeMap::new(),
            prune: true,
        }
    }

    /// The objects added; others of the kind the resource owns are left alone. With none
    /// added, the kind is not touched at all (not even read).
    pub fn at_least() -> Self {
        Self {
            objects: BTreeMap::new(),
            prune: false,
        }
    }

    /// Adds `object`, server-side applied.
    pub fn apply(mut self, object: T) -> Self {
        self.objects.insert(object.name_any(), Write::Apply(object));
        self
    }

    /// Adds `object`, created once.
    pub fn create_once(mut self, object: T) -> Self {
        self.objects
            .insert(object.name_any(), Write::CreateOnce(object));
        self
    }

    /// Keeps the object `name` as it is.
    pub fn keep(mut self, name: impl Into<String>) -> Self {
        self.objects.insert(name.into(), Write::Keep);
        self
    }

    /// Adds every object of `objects`, applied.
    pub fn apply_all(self, objects: impl IntoIterator<Item = T>) -> Self {
        objects.into_iter().fold(self, Self::apply)
    }

    /// Adds `object` when there is one.
    pub fn apply_some(self, object: Option<T>) -> Self {
        match object {
            Some(object) => self.apply(object),
            None => self,
        }
    }

    pub fn objects(&self) -> &BTreeMap<String, Write<T>> {
        &self.objects
    }

    /// Whether owned objects not named here are deleted.
    pub fn prunes(&self) -> bool {
        self.prune
    }

    /// Whether this kind is left entirely alone.
    pub fn untouched(&self) -> bool {
        self.objects.is_empty() && !self.prune
    }
}

/// Everything a `Clair` owns, in the order the applier writes it: credentials and config
/// before the database, the database before the services that use it, the upgrade step
/// before the services roll.
#[derive(Clone, Debug)]
pub struct ClairObjects {
    /// The PSK, the managed database's passwords, the generated config.
    pub secrets: Owned<Secret>,
    /// The managed database's bootstrap script.
    pub config_maps: Owned<ConfigMap>,
    /// The managed database engines' Services.
    pub services: Owned<Service>,
    /// The managed database engines.
    pub stateful_sets: Owned<StatefulSet>,
    /// Who may reach the managed engines, when the spec asks for it.
    pub network_policies: Owned<NetworkPolicy>,
    /// The managed engines on CloudNativePG: its Clusters (untouched on the built-in
    /// engine, or where the cluster does not serve them) ...
    pub postgres_clusters: Owned<DynamicObject>,
    /// ... and the services' databases in them.
    pub postgres_databases: Owned<DynamicObject>,
    /// Upgrade steps (`clairctl admin pre|post`).
    pub jobs: Owned<Job>,
    pub indexers: Owned<Indexer>,
    pub matchers: Owned<Matcher>,
    pub notifiers: Owned<Notifier>,
    /// The updaters, when they run in a CronJob.
    pub cron_jobs: Owned<CronJob>,
    pub ingresses: Owned<Ingress>,
    /// OpenShift Routes (untouched where the cluster does not serve them).
    pub routes: Owned<DynamicObject>,
    /// Gateway API HTTPRoutes (untouched where the cluster does not serve them).
    pub http_routes: Owned<DynamicObject>,
}

/// Everything an `Indexer`, `Matcher` or `Notifier` owns, in the order the applier writes it.
#[derive(Clone, Debug)]
pub struct ServiceObjects {
    /// Immutable config snapshots, one per config hash.
    pub secrets: Owned<Secret>,
    pub deployments: Owned<Deployment>,
    pub services: Owned<Service>,
    pub disruption_budgets: Owned<PodDisruptionBudget>,
    pub autoscalers: Owned<HorizontalPodAutoscaler>,
    /// Prometheus Operator ServiceMonitors (untouched where the cluster does not serve them).
    pub service_monitors: Owned<DynamicObject>,
    /// KEDA ScaledObjects (untouched where the cluster does not serve them). After the
    /// HorizontalPodAutoscaler: switching engines, the operator's own is gone first.
    pub scaled_objects: Owned<DynamicObject>,
}

/// One kind a family of resources owns, as the RBAC roles and the OLM bundle name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedKind {
    /// The API group, `""` for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
}

impl OwnedKind {
    fn typed<T: kube::Resource<DynamicType = ()>>(_: &Owned<T>) -> Self {
        Self {
            group: T::group(&()).to_string(),
            version: T::version(&()).to_string(),
            kind: T::kind(&()).to_string(),
            plural: T::plural(&()).to_string(),
        }
    }

    fn dynamic(_: &Owned<DynamicObject>, resource: &kube::api::ApiResource) -> Self {
        Self {
            group: resource.group.clone(),
            version: resource.version.clone(),
            kind: resource.kind.clone(),
            plural: resource.plural.clone(),
        }
    }
}

impl ClairObjects {
    /// Nothing of any kind touched.
    pub fn nothing() -> Self {
        Self {
            secrets: Owned::at_least(),
            config_maps: Owned::at_least(),
            services: Owned::at_least(),
            stateful_sets: Owned::at_least(),
            network_policies: Owned::at_least(),
            postgres_clusters: Owned::at_least(),
            postgres_databases: Owned::at_least(),
            jobs: Owned::at_least(),
            indexers: Owned::at_least(),
            matchers: Owned::at_least(),
            notifiers: Owned::at_least(),
            cron_jobs: Owned::at_least(),
            ingresses: Owned::at_least(),
            routes: Owned::at_least(),
            http_routes: Owned::at_least(),
        }
    }

    /// Every kind a `Clair` owns, from the fields themselves (destructured without `..`: a
    /// new field does not compile until it is listed). The OLM bundle and the RBAC check
    /// read it.
    pub fn kinds() -> Vec<OwnedKind> {
        let Self {
            secrets,
            config_maps,
            services,
            stateful_sets,
            network_policies,
            postgres_clusters,
            postgres_databases,
            jobs,
            indexers,
            matchers,
            notifiers,
            cron_jobs,
            ingresses,
            routes,
            http_routes,
        } = Self::nothing();
        vec![
            OwnedKind::typed(&indexers),
            OwnedKind::typed(&matchers),
            OwnedKind::typed(&notifiers),
            OwnedKind::typed(&secrets),
            OwnedKind::typed(&config_maps),
            OwnedKind::typed(&services),
            OwnedKind::typed(&stateful_sets),
            OwnedKind::typed(&network_policies),
            OwnedKind::typed(&jobs),
            OwnedKind::typed(&cron_jobs),
            OwnedKind::typed(&ingresses),
            OwnedKind::dynamic(&routes, &super::routing::route_resource()),
            OwnedKind::dynamic(&http_routes, &super::routing::http_route_resource()),
            OwnedKind::dynamic(
                &postgres_clusters,
                &super::cloudnative_pg::cluster_resource(),
            ),
            OwnedKind::dynamic(
                &postgres_databases,
                &super::cloudnative_pg::database_resource(),
            ),
        ]
    }
}

impl ServiceObjects {
    /// Nothing of any kind touched.
    pub fn nothing() -> Self {
        Self {
            secrets: Owned::at_least(),
            deployments: Owned::at_least(),
            services: Owned::at_least(),
            disruption_budgets: Owned::at_least(),
            autoscalers: Owned::at_least(),
            service_monitors: Owned::at_least(),
            scaled_objects: Owned::at_least(),
        }
    }

    /// Every kind an `Indexer`, `Matcher` or `Notifier` owns, as [`ClairObjects::kinds`].
    pub fn kinds() -> Vec<OwnedKind> {
        let Self {
            secrets,
            deployments,
            services,
            disruption_budgets,
            autoscalers,
            service_monitors,
            scaled_objects,
        } = Self::nothing();
        vec![
            OwnedKind::typed(&deployments),
            OwnedKind::typed(&services),
            OwnedKind::typed(&secrets),
            OwnedKind::typed(&autoscalers),
            OwnedKind::typed(&disruption_budgets),
            OwnedKind::dynamic(
                &service_monitors,
                &super::service::service_monitor_resource(),
            ),
            OwnedKind::dynamic(
                &scaled_objects,
                &super::autoscaling::scaled_object_resource(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn an_empty_at_least_set_is_left_untouched_but_an_empty_exact_set_prunes() {
        assert!(Owned::<Secret>::at_least().untouched());
        let exact = Owned::<Secret>::exactly();
        assert!(!exact.untouched() && exact.prunes());
    }

    #[test]
    fn objects_are_kept_by_name_with_how_they_are_written() {
        let owned = Owned::exactly()
            .apply(secret("a"))
            .create_once(secret("b"))
            .keep("c");
        assert!(matches!(owned.objects()["a"], Write::Apply(_)));
        assert!(matches!(owned.objects()["b"], Write::CreateOnce(_)));
        assert_eq!(owned.objects()["c"], Write::Keep);
    }
}
