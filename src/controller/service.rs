//! One controller for the three service kinds (`Indexer`, `Matcher`, `Notifier`): the
//! reconcile is shared, the differences (the mode) come from the kind.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use super::apply::{Outcome, apply, apply_fresh, delete_unwanted};
use super::{Context, Error, now, observe};
use crate::api::labels;
use crate::api::service::ClairService;
use crate::api::{ConfigSource, ServiceSpec, ServiceStatus};
use crate::machine::ApplyPlan;
use crate::machine::observation::DatabaseObservation;
use crate::machine::service::{ServiceSnapshot, Workload, decide};
use crate::render::service::{
    ServiceInput, autoscaler, config_secret, deployment, disruption_budget, service,
    service_monitor, service_monitor_resource, snapshot_name, url,
};

/// What a service kind must be for the shared controller.
pub trait ServiceResource:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + ClairService
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<T> ServiceResource for T where
    T: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + ClairService
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// The controller of kind `K`, until `shutdown` resolves.
pub async fn run<K: ServiceResource>(
    context: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = context.client.clone();
    let owned = watcher::Config::default().labels(&labels::managed_selector());
    let controller = Controller::new(Api::<K>::all(client.clone()), watcher::Config::default());
    let store = controller.store();
    controller
        .owns(Api::<Deployment>::all(client.clone()), owned.clone())
        .owns(Api::<Service>::all(client.clone()), owned.clone())
        .owns(
            Api::<HorizontalPodAutoscaler>::all(client.clone()),
            owned.clone(),
        )
        .owns(Api::<PodDisruptionBudget>::all(client.clone()), owned)
        .watches(
            Api::<ConfigMap>::all(client.clone()),
            watcher::Config::default(),
            referencing(store.clone(), super::names_config_map),
        )
        .watches(
            Api::<Secret>::all(client),
            watcher::Config::default(),
            referencing(store, super::names_secret),
        )
        .reconcile_all_on(super::capabilities::optional_api_changes(
            context.client.clone(),
            context.clone(),
        ))
        .graceful_shutdown_on(shutdown)
        .run(reconcile::<K>, error_policy::<K>, context)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(kind = %K::KIND, %object.name, "reconciled"),
                Err(e) => warn!(kind = %K::KIND, error = %e, "reconcile failed"),
            }
        })
        .await;
}

/// Maps a ConfigMap or Secret to the resources of kind `K` in its namespace whose config
/// names it, so an edit re-renders them.
fn referencing<K: ServiceResource, O: Resource>(
    store: Store<K>,
    names: impl Fn(&ConfigSource, &str) -> bool + Send + Sync + 'static,
) -> impl Fn(O) -> Vec<ObjectRef<K>> + Send + Sync + 'static {
    move |object: O| {
        let name = object.name_any();
        let namespace = object.namespace();
        super::related(&store, namespace.as_deref(), |k| {
            let config = &k.service_spec().config;
            std::iter::once(&config.root)
                .chain(&config.dropins)
                .any(|source| names(source, &name))
        })
    }
}

fn error_policy<K: ServiceResource>(object: Arc<K>, error: &Error, _: Arc<Context>) -> Action {
    warn!(kind = %K::KIND, name = %object.name_any(), reason = error.reason(), %error, "requeue");
    Action::requeue(Duration::from_secs(15))
}

async fn reconcile<K: ServiceResource>(
    object: Arc<K>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    let client = &context.client;
    let namespace = object
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = object.name_any();
    let uid = object.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let owner = object
        .controller_owner_ref(&())
        .ok_or(Error::MissingField("metadata.uid"))?;
    let generation = object.meta().generation.unwrap_or(0);
    let spec: &ServiceSpec = object.service_spec();

    // Observe: reads only.
    let (config, snapshot) = observe::config(client, &namespace, &spec.config, K::KIND).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let current = deployments.get_opt(&name).await?;
    if current.as_ref().is_some_and(status_is_stale) {
        // The deployment controller has not caught up with the last change (ours, most
        // likely): its status describes the previous spec. Judge it once it has.
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let status = object.service_status();
    let input = ServiceInput {
        kind: K::KIND,
        name: &name,
        namespace: &namespace,
        owner,
        spec,
        current_replicas: current
            .as_ref()
            .and_then(|d| d.spec.as_ref())
            .and_then(|s| s.replicas),
        users: context.capabilities.pod_users().await,
    };
    // Render now: whether the desired pod template differs from the running one is part of
    // what the machine observes (a rollout starts with this reconcile).
    let desired = snapshot
        .as_ref()
        .map(|s| deployment(&input, &s.secret_name(&name), &s.hash));
    let template_pending = match (&desired, &current) {
        (Some(desired), Some(current)) => !template_contains(current, desired)?,
        _ => false,
    };
    let workload = observe::workload(
        current.as_ref(),
        spec.replicas,
        spec.autoscaling.is_some(),
        status.map_or(0, |s| s.ready_replicas),
        template_pending,
    );
    let observed = ServiceSnapshot {
        generation,
        kind: K::KIND,
        config,
        database: DatabaseObservation::NotChecked {
            message: format!(
                "a bare {} resource does not check its database; a Clair resource does",
                K::KIND
            ),
        },
        workload: workload.clone(),
    };

    // Decide: the machine.
    let previous = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let decision = decide(status.and_then(|s| s.phase), previous, &observed, &now());

    // Apply what the decision allows.
    let running_hash = observe::running_hash(current.as_ref());
    let mut config_hash = running_hash.clone();
    if decision.apply != ApplyPlan::Nothing {
        if let (ApplyPlan::Everything, Some(snapshot), Some(desired)) =
            (decision.apply, snapshot.as_ref(), desired.as_ref())
        {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
            let secret_name = snapshot.secret_name(&name);
            // Immutable: created once, never updated.
            if secrets.get_opt(&secret_name).await?.is_none() {
                apply(&secrets, &config_secret(&input, snapshot), None).await?;
            }
            let outcome = apply(&deployments, desired, current.as_ref()).await?;
            log_outcome("Deployment", &name, outcome);
            config_hash = Some(snapshot.hash.clone());
        }
        apply_supporting(&context, &input, &uid).await?;
    }
    if decision.phase == crate::api::Phase::Available {
        forget_old_snapshots(&context, &input, &uid, config_hash.as_deref()).await?;
    }

    // Status: one write, only when it changed.
    let (replicas, ready) = match &workload {
        Workload::Present { replicas, .. } => (replicas.current, replicas.ready),
        Workload::Absent => (0, 0),
    };
    let new_status = ServiceStatus {
        phase: Some(decision.phase),
        conditions: decision.conditions.clone(),
        observed_generation: Some(generation),
        replicas,
        ready_replicas: ready,
        selector: Some(labels::to_selector_string(&labels::selector(
            &name,
            K::KIND.as_str(),
        ))),
        config_hash,
        url: Some(url(&name, &namespace)),
    };
    if status != Some(&new_status) {
        let api: Api<K> = Api::namespaced(client.clone(), &namespace);
        super::write_status(&api, &name, &new_status).await?;
    }

    if let Some(event) = &decision.event {
        info!(kind = %K::KIND, %name, %namespace, note = %event.note, "phase transition");
        super::publish_transition(
            &context,
            event,
            decision.transition,
            &object.object_ref(&()),
        )
        .await;
    }

    Ok(Action::requeue(match decision.phase {
        crate::api::Phase::Available => Duration::from_secs(600),
        _ => Duration::from_secs(30),
    }))
}

fn status_is_stale(deployment: &Deployment) -> bool {
    let observed = deployment
        .status
        .as_ref()
        .and_then(|s| s.observed_generation);
    observed < deployment.metadata.generation
}

fn template_contains(current: &Deployment, desired: &Deployment) -> Result<bool, Error> {
    let template = |d: &Deployment| {
        serde_json::to_value(d.spec.as_ref().map(|s| &s.template)).map_err(Error::Serialize)
    };
    Ok(super::apply::contains(
        &template(current)?,
        &template(desired)?,
    ))
}

fn log_outcome(kind: &str, name: &str, outcome: Outcome) {
    if outcome != Outcome::Unchanged {
        debug!(kind, name, ?outcome, "applied");
    }
}

fn owned_selector(input: &ServiceInput) -> String {
    labels::to_selector_string(&labels::all(input.name, input.kind.as_str()))
}

/// The Service, disruption budget, autoscaler (or its removal) and ServiceMonitor.
async fn apply_supporting(
    context: &Context,
    input: &ServiceInput<'_>,
    uid: &str,
) -> Result<(), Error> {
    let client = &context.client;
    let namespace = input.namespace;
    let name = input.name;

    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    log_outcome(
        "Service",
        name,
        apply_fresh(&services, &service(input)).await?,
    );

    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), namespace);
    let budget = disruption_budget(input);
    log_outcome(
        "PodDisruptionBudget",
        name,
        apply_fresh(&budgets, &budget).await?,
    );

    let autoscalers: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), namespace);
    match autoscaler(input) {
        Some(desired) => {
            let outcome = apply_fresh(&autoscalers, &desired).await?;
            log_outcome("HorizontalPodAutoscaler", name, outcome);
        }
        None => {
            delete_unwanted(&autoscalers, &owned_selector(input), uid, |_| false).await?;
        }
    }

    if context
        .capabilities
        .serves(super::capabilities::OptionalApi::ServiceMonitor)
        .await
    {
        let resource = service_monitor_resource();
        let monitors: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &resource);
        let outcome = apply_fresh(&monitors, &service_monitor(input)).await?;
        log_outcome("ServiceMonitor", name, outcome);
    }
    Ok(())
}

/// Deletes config snapshots other than the running one, once the service is Available (so
/// no pod of an older ReplicaSet can still need one).
async fn forget_old_snapshots(
    context: &Context,
    input: &ServiceInput<'_>,
    uid: &str,
    running_hash: Option<&str>,
) -> Result<(), Error> {
    let Some(hash) = running_hash else {
        return Ok(());
    };
    let keep = snapshot_name(input.name, hash);
    let secrets: Api<Secret> = Api::namespaced(context.client.clone(), input.namespace);
    let deleted = delete_unwanted(&secrets, &owned_selector(input), uid, |s| {
        s.name_any() == keep
    })
    .await?;
    if !deleted.is_empty() {
        debug!(name = input.name, ?deleted, "deleted old config snapshots");
    }
    Ok(())
}
