//! The `Clair` controller: observe (credentials, database, the generated config with the
//! user's drop-ins, the three service resources, routing, upgrade) → decide (the Clair
//! machine) → desired (every owned object, as the decision allows) → apply → status and an
//! Event per transition.

pub mod credentials;
pub mod database;
pub mod desired;
pub mod observe;
pub mod plan;
pub mod probes;
pub mod updaters;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tracing::debug;

use super::apply::apply_clair;
use super::capabilities::optional_api_changes;
use super::error::ObserveError;
use super::watch::{self, Scope};
use super::{Context, Error, Owner, Referenced, now};
use crate::api::clair::DatabaseEngine;
use crate::api::{Clair, Phase};
use crate::render::clair::ClairInput;
use crate::render::owned::ClairObjects;

/// The `Clair` controller in `scope`, until `shutdown` resolves.
pub async fn run(
    context: Arc<Context>,
    scope: Scope,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = context.client.clone();
    let (clairs, store, _) = super::decoded::watch::<Clair>(context.clone(), &scope);
    let controller = Controller::for_stream(clairs, store.clone())
        .with_config(super::controller_config().debounce(super::CLAIR_DEBOUNCE));
    let _alive = super::watched(
        &context,
        format!("Clair controller, {scope}"),
        store.clone(),
    );
    // One watch per owned field (see `watch::of`).
    let ClairObjects {
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
    } = ClairObjects::nothing();
    // Not watched: the managed engines' Services are only ever changed by the operator, and
    // a change to one is put back at the next reconcile (a watch of every Service would cost
    // the memory of the service controllers' own a second time); Routes and HTTPRoutes are
    // APIs a cluster may not serve (their appearance is heard through `capabilities`), as
    // are CloudNativePG's Clusters and Databases: a Clair on CloudNativePG looks at its
    // Clusters at its own pace instead (`requeue_after`).
    let _unwatched = (
        services,
        routes,
        http_routes,
        postgres_clusters,
        postgres_databases,
    );
    controller
        .owns_stream(watch::owned_by(
            &context,
            "Clair",
            &indexers,
            &client,
            &scope,
            watch::managed(),
        ))
        .owns_stream(watch::owned_by(
            &context,
            "Clair",
            &matchers,
            &client,
            &scope,
            watch::managed(),
        ))
        .owns_stream(watch::owned_by(
            &context,
            "Clair",
            &notifiers,
            &client,
            &scope,
            watch::managed(),
        ))
        .owns_stream(watch::owned_by(
            &context,
            "Clair",
            &stateful_sets,
            &client,
            &scope,
            watch::managed(),
        ))
        .owns_stream(watch::owned_by(
            &context,
            "Clair",
            &network_policies,
            &client,
            &scope,
            watch::managed(),
        ))
        .owns_stream(watch::owned_by(
            &context,
            "Clair",
            &cron_jobs,
            &client,
            &scope,
            watch::managed(),
        ))
        // Upgrade steps (owned by the Clair) and updater runs (owned by its CronJob, which
        // says nothing when a run started by hand ends): both name their Clair.
        .watches_stream(
            watch::owned_by(&context, "Clair", &jobs, &client, &scope, watch::managed()),
            clair_of_job,
        )
        .owns_stream(watch::owned_by(
            &context,
            "Clair",
            &ingresses,
            &client,
            &scope,
            watch::managed(),
        ))
        // Every ConfigMap and Secret, the generated ones included: a Clair names its
        // drop-ins, connection strings and CA bundles by name.
        .watches_stream(
            watch::owned_by(
                &context,
                "Clair",
                &config_maps,
                &client,
                &scope,
                watch::every(),
            ),
            referencing(store.clone(), Referenced::ConfigMap),
        )
        .watches_stream(
            watch::owned_by(&context, "Clair", &secrets, &client, &scope, watch::every()),
            referencing(store, Referenced::Secret),
        )
        .reconcile_all_on(optional_api_changes(client, context.clone()))
        // A database check that ended, apart from the reconcile (`probes`), for a Clair of
        // this scope (every scope's controller hears every check).
        .reconcile_on({
            let scope = scope.clone();
            context.probes.woken().filter(move |clair| {
                futures::future::ready(scope.holds(clair.namespace.as_deref()))
            })
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, super::error_policy::<Clair>, context)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(%object.name, "reconciled clair"),
                Err(e) => debug!(error = %e, "clair reconcile failed"),
            }
        })
        .await;
}

/// The `Clair` a Job of the operator's was made for (its `app.kubernetes.io/instance`).
fn clair_of_job(job: kube::api::PartialObjectMeta<Job>) -> Option<ObjectRef<Clair>> {
    let namespace = job.namespace()?;
    let instance = job.labels().get(crate::api::labels::INSTANCE)?;
    Some(ObjectRef::new(instance).within(&namespace))
}

/// Maps a ConfigMap or Secret to the `Clair`s in its namespace that name it: as a drop-in,
/// or (Secrets) as an external connection string, the tracing headers or Quay's key. Owned
/// Secrets reach their owner anyway.
fn referencing<O: Resource>(
    store: Store<Clair>,
    kind: Referenced,
) -> impl Fn(O) -> Vec<ObjectRef<Clair>> + Send + Sync + 'static {
    move |object: O| {
        let name = object.name_any();
        let namespace = object.namespace();
        super::related(&store, namespace.as_deref(), |clair| {
            let external = kind == Referenced::Secret
                && clair.spec.database.external.as_ref().is_some_and(|e| {
                    [Some(&e.indexer), Some(&e.matcher), e.notifier.as_ref()]
                        .into_iter()
                        .flatten()
                        .any(|r| r.name == name)
                });
            let quay_key = kind == Referenced::Secret
                && (clair.spec.quay.as_ref())
                    .and_then(|q| q.psk.as_ref())
                    .is_some_and(|r| r.name == name);
            external
                || quay_key
                || clair.spec.dropins.iter().any(|d| kind.by_source(d, &name))
                || kind.by_tracing(clair.spec.tracing.as_ref(), &name)
        })
    }
}

async fn reconcile(cached: Arc<Clair>, context: Arc<Context>) -> Result<Action, Error> {
    let metrics = context.metrics.clone();
    super::measured(
        cached.as_ref(),
        &metrics,
        reconcile_once(cached.clone(), context),
    )
    .await
}

async fn reconcile_once(cached: Arc<Clair>, context: Arc<Context>) -> Result<Action, Error> {
    // The cache can lag behind this controller's own last status write; deciding from a
    // stale `status.version` would repeat an upgrade step. The cached object is used when it
    // is the version last written or read here; one older waits for that write's event; one
    // whose version is not known here (a new Clair, another process's write) is read fresh.
    let owner = Owner::of(cached.as_ref())?;
    if context.versions.behind(cached.as_ref()) {
        return Ok(super::wait_for_own_write());
    }
    let read = if context.versions.current(cached.as_ref()) {
        Some(cached.as_ref().clone())
    } else {
        let clairs: Api<Clair> = Api::namespaced(context.client.clone(), &owner.namespace);
        let fresh = clairs.get_opt(&owner.name).await;
        let read = fresh.map_err(ObserveError::reading(super::describe(cached.as_ref())))?;
        if let Some(read) = &read {
            context.versions.seen(read);
        }
        read
    };
    let Some(clair) = read.filter(|c| c.uid() == cached.uid() && !super::being_deleted(c)) else {
        return Ok(Action::await_change());
    };
    let generation = clair.meta().generation.unwrap_or(0);
    let input = ClairInput {
        name: &owner.name,
        namespace: &owner.namespace,
        owner: owner.reference.clone(),
        spec: &clair.spec,
        users: context.capabilities.pod_users().await,
    };

    // Observe: reads only.
    let observed = observe::observe(context.as_ref(), &input, &clair).await?;
    context.metrics.resources.set_budgets(
        crate::metrics::autoscaling::Key {
            kind: "Clair".to_string(),
            namespace: owner.namespace.clone(),
            name: owner.name.clone(),
        },
        observed.budgets(&input),
    );

    // Decide, and what to write: the pure plan (`render` makes the same).
    let status = clair.status.as_ref();
    let plan::Plan {
        decision,
        objects,
        status: new_status,
        ..
    } = plan::plan(&input, &observed, generation, status, &now());

    // Apply.
    let applier = owner.applier(&context);
    let applied = apply_clair(&applier, objects).await;
    if !super::applied(applied, &super::describe(&clair))? {
        return Ok(Action::await_change());
    }

    // Status.
    let engine_watched = !input
        .spec
        .database
        .managed
        .as_ref()
        .is_some_and(|m| m.engine() == DatabaseEngine::CloudNativePg);
    let requeue = requeue_after(decision.phase, context.available_recheck, engine_watched);
    super::conclude(
        &context, &clair, &applier, status, new_status, &decision, requeue,
    )
    .await
}

/// When a Clair in `phase` is looked at again with nothing changed: the pace at which its
/// database is probed, since no watch says a database went away or came back.
/// `engine_watched`: false on CloudNativePG, whose Clusters are not watched: no event says
/// one failed over (a new primary, which the services must be rolled onto), so such a
/// Clair is looked at on the probes' pace whatever its phase.
fn requeue_after(phase: Phase, available_recheck: Duration, engine_watched: bool) -> Duration {
    let after = match phase {
        Phase::Available => available_recheck,
        // Waiting on its services, its managed database's StatefulSet or its upgrade Jobs:
        // all watched, so each of their changes reconciles the Clair at once. A fixed 20 s
        // here was 40 idle reconciles per Clair while 1,000 rolled out (the scale benchmark).
        // Never slower than an Available Clair's recheck, which an operator may set lower.
        Phase::Deploying | Phase::Scaling | Phase::Upgrading => WATCHED_WAIT.min(available_recheck),
        // Waiting on the database to answer, or Degraded: only a probe tells.
        Phase::Pending | Phase::ConfigValid | Phase::DatabaseReady | Phase::Degraded => PROBED_WAIT,
    };
    match engine_watched {
        true => after,
        false => after.min(PROBED_WAIT),
    }
}

/// The pace of a Clair that only a probe, or a read, can tell about.
const PROBED_WAIT: Duration = Duration::from_secs(20);

/// The fallback while a Clair waits on objects it watches (a lost watch event, or a
/// database lost during a rollout, is seen within it).
const WATCHED_WAIT: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clair_on_cloudnative_pg_looks_at_its_unwatched_clusters_on_the_probes_pace() {
        let recheck = Duration::from_secs(300);
        for phase in [Phase::Available, Phase::Deploying, Phase::Pending] {
            assert_eq!(
                requeue_after(phase, recheck, false),
                PROBED_WAIT,
                "{phase:?}"
            );
        }
    }

    #[test]
    fn a_clair_waiting_on_what_it_watches_is_not_polled() {
        let recheck = Duration::from_secs(300);
        assert_eq!(requeue_after(Phase::Available, recheck, true), recheck);
        for phase in [Phase::Deploying, Phase::Scaling, Phase::Upgrading] {
            assert_eq!(
                requeue_after(phase, recheck, true),
                WATCHED_WAIT,
                "{phase:?}"
            );
            let brisk = Duration::from_secs(10);
            assert_eq!(requeue_after(phase, brisk, true), brisk, "{phase:?}");
        }
        for phase in [
            Phase::Pending,
            Phase::ConfigValid,
            Phase::DatabaseReady,
            Phase::Degraded,
        ] {
            assert!(
                requeue_after(phase, recheck, true) < WATCHED_WAIT,
                "{phase:?}"
            );
        }
    }
}
