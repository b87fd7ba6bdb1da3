//! One controller for the three service kinds (`Indexer`, `Matcher`, `Notifier`): the
//! reconcile is shared, the differences (the service kind) come from the resource type.

pub mod desired;
pub mod observe;
pub mod plan;
pub mod workload;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::debug;

use super::apply::apply_service;
use super::error::ObserveError;
use super::observer::Observer;
use super::watch::{self, Scope};
use super::{Context, Error, Owner, Referenced, now};
use crate::api::Phase;
use crate::api::service::ClairService;
use crate::render::owned::ServiceObjects;
use crate::render::service::ServiceInput;

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

/// The controller of kind `K` in `scope`, until `shutdown` resolves.
pub async fn run<K: ServiceResource>(
    context: Arc<Context>,
    scope: Scope,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = context.client.clone();
    let (objects, store, listed) = super::decoded::watch::<K>(context.clone(), &scope);
    let controller =
        Controller::for_stream(objects, store.clone()).with_config(super::controller_config());
    let _alive = super::watched(
        &context,
        format!("{} controller, {scope}", K::KIND),
        store.clone(),
    );
    // The Clair controller reads its services from here.
    let _shared = context.stores.register(&scope, store.clone(), listed);
    // One watch per owned field (see `watch::of`).
    let ServiceObjects {
        secrets,
        deployments,
        services,
        disruption_budgets,
        autoscalers,
        service_monitors,
        scaled_objects,
    } = ServiceObjects::nothing();
    // Not watched: ServiceMonitors and ScaledObjects are APIs a cluster may not serve (their
    // appearance is heard through `capabilities`); KEDA's own HorizontalPodAutoscaler is
    // heard below.
    let _unwatched = (service_monitors, scaled_objects);
    let owner_kind = K::kind(&());
    let owner = owner_kind.as_ref();
    controller
        // In full: the phase is decided from their status (see `owned`).
        .owns_stream(watch::owned_in_full(
            &context,
            owner,
            &deployments,
            &client,
            &scope,
            watch::managed_component(K::KIND.as_str()),
        ))
        .owns_stream(watch::owned_by(
            &context,
            owner,
            &services,
            &client,
            &scope,
            watch::managed(),
        ))
        // The operator's own autoscalers, and KEDA's for the operator's ScaledObjects (it
        // copies their labels, and its owner is the ScaledObject): the tuning metrics follow
        // whichever scales the service.
        .watches_stream(
            watch::owned_by(
                &context,
                owner,
                &autoscalers,
                &client,
                &scope,
                watch::managed(),
            ),
            |hpa| scaled_service::<K>(&hpa),
        )
        .owns_stream(watch::owned_by(
            &context,
            owner,
            &disruption_budgets,
            &client,
            &scope,
            watch::managed(),
        ))
        // Every ConfigMap and Secret, the config snapshots included: a resource names its
        // config, drop-ins and connection strings by name.
        .watches_stream(
            watch::referenced::<ConfigMap>(&context, &client, &scope),
            referencing(store.clone(), Referenced::ConfigMap),
        )
        .watches_stream(
            watch::owned_by(&context, owner, &secrets, &client, &scope, watch::every()),
            referencing(store, Referenced::Secret),
        )
        .reconcile_all_on(super::capabilities::optional_api_changes(
            context.client.clone(),
            context.clone(),
        ))
        .graceful_shutdown_on(shutdown)
        .run(reconcile::<K>, super::error_policy::<K>, context)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(kind = %K::KIND, %object.name, "reconciled"),
                Err(e) => debug!(kind = %K::KIND, error = %e, "reconcile failed"),
            }
        })
        .await;
}

/// The service an autoscaler scales: its controller owner, a `K` or the ScaledObject the
/// operator named after the service.
fn scaled_service<K: ServiceResource>(
    hpa: &kube::api::PartialObjectMeta<HorizontalPodAutoscaler>,
) -> Option<ObjectRef<K>> {
    let namespace = hpa.namespace()?;
    let owner = hpa
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    (owner.kind == K::kind(&()) || owner.kind == "ScaledObject")
        .then(|| ObjectRef::new(&owner.name).within(&namespace))
}

/// Maps a ConfigMap or Secret to the resources of kind `K` in its namespace whose config
/// (or, for a Secret, tracing headers) names it, so an edit re-renders them.
fn referencing<K: ServiceResource, O: Resource>(
    store: Store<K>,
    kind: Referenced,
) -> impl Fn(O) -> Vec<ObjectRef<K>> + Send + Sync + 'static {
    move |object: O| {
        let name = object.name_any();
        let namespace = object.namespace();
        super::related(&store, namespace.as_deref(), |k| {
            let spec = k.service_spec();
            let config = &spec.config;
            std::iter::once(&config.root)
                .chain(&config.dropins)
                .any(|source| kind.by_source(source, &name))
                || kind.by_tracing(spec.tracing.as_ref(), &name)
        })
    }
}

async fn reconcile<K: ServiceResource>(
    object: Arc<K>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    let metrics = context.metrics.clone();
    super::measured(
        object.as_ref(),
        &metrics,
        reconcile_once(object.clone(), context),
    )
    .await
}

async fn reconcile_once<K: ServiceResource>(
    object: Arc<K>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    if super::being_deleted(object.as_ref()) {
        return Ok(Action::await_change());
    }
    if context.versions.behind(object.as_ref()) {
        return Ok(super::wait_for_own_write());
    }
    let owner = Owner::of(object.as_ref())?;
    let (name, namespace) = (owner.name.as_str(), owner.namespace.as_str());
    let (spec, status) = (object.service_spec(), object.service_status());
    let generation = object.meta().generation.unwrap_or(0);

    // Observe: reads only.
    let Some(mut observed) =
        observe::observe(context.as_ref(), K::KIND, namespace, name, spec).await?
    else {
        // The deployment controller's status write, when it catches up, is an event of the
        // owned Deployment and reconciles this again; the requeue is only a fallback. (A 2 s
        // poll here made 3,000 services busy-wait on a lagging controller at 1,000 Clairs:
        // thousands of requests a second, the apiserver at 13 GiB.)
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let tuning = crate::metrics::autoscaling::Key {
        kind: K::kind(&()).into_owned(),
        namespace: namespace.to_string(),
        name: name.to_string(),
    };
    let ready = workload::ready_replicas(observed.deployment.as_ref());
    match observed
        .autoscaler
        .as_ref()
        .and_then(|a| observe::autoscaler_reading(a, ready))
    {
        Some(reading) => {
            context
                .metrics
                .resources
                .autoscalers
                .read(tuning, reading, std::time::Instant::now())
        }
        None => context.metrics.resources.autoscalers.forget(&tuning),
    }
    let input = ServiceInput {
        kind: K::KIND,
        name,
        namespace,
        owner: owner.reference.clone(),
        spec,
        current_replicas: observed.current_replicas(),
        users: context.capabilities.pod_users().await,
    };

    // Decide, and what to write: the pure plan (`render` makes the same).
    let mut planned = plan::plan(&input, &observed, generation, status, &now());
    if planned.template_unconfirmed {
        // Another hash than the one desired: whether the template differs as the apiserver
        // keeps it (an operator upgrade may only spell out a default) takes the template.
        observed.deployment = (context.owned::<Deployment>(namespace, name).await)
            .map_err(ObserveError::reading(format!("Deployment {name}")))?
            .as_ref()
            .map(workload::DeploymentState::read);
        planned = plan::plan(&input, &observed, generation, status, &now());
    }
    let plan::Plan {
        decision,
        objects,
        status: new_status,
        ..
    } = planned;

    // Apply.
    let applier = owner.applier(&context);
    let applied = apply_service(&applier, objects).await;
    if !super::applied(applied, &super::describe(object.as_ref()))? {
        return Ok(Action::await_change());
    }

    // Status.
    let requeue = match decision.phase {
        Phase::Available => Duration::from_secs(600),
        _ => Duration::from_secs(30),
    };
    super::conclude(
        &context,
        object.as_ref(),
        &applier,
        status,
        new_status,
        &decision,
        requeue,
    )
    .await
}
