//! The `Clair` controller: observe (database, generated config with the user's drop-ins,
//! the three service resources) → decide (the Clair machine) → apply (config Secret,
//! services, updater CronJob, routing) → status and an Event per transition.

use std::sync::Arc;
use std::time::Duration;
use strum::VariantArray;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::Value;
use tracing::{debug, info, warn};

use super::apply::{apply_fresh, delete_unwanted};
use super::capabilities::{OptionalApi, optional_api_changes};
use super::database::{self, DatabaseState};
use super::service::ServiceResource;
use super::{Context, Error, credentials, now, observe, upgrade};
use crate::api::ServiceKind;
use crate::api::clair::{ChildStatus, RoutingKind};
use crate::api::labels;
use crate::api::{Clair, ClairStatus, ConfigSource, Indexer, Matcher, Notifier, Phase};
use crate::clairconfig::{self, Document};
use crate::database::budget;
use crate::database::probe::ProbeOptions;
use crate::machine::ApplyPlan;
use crate::machine::clair::{
    ChildObservation, ClairSnapshot, RoutingObservation, UpgradeObservation, decide,
};
use crate::machine::observation::ConfigObservation;
use crate::render::clair::{self as render, ClairInput, ROOT_KEY};
use crate::render::routing;

/// The `Clair` controller, until `shutdown` resolves.
pub async fn run(
    context: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = context.client.clone();
    let owned = watcher::Config::default().labels(&labels::managed_selector());
    let controller = Controller::new(
        Api::<Clair>::all(client.clone()),
        watcher::Config::default(),
    );
    let store = controller.store();
    controller
        .owns(Api::<Indexer>::all(client.clone()), owned.clone())
        .owns(Api::<Matcher>::all(client.clone()), owned.clone())
        .owns(Api::<Notifier>::all(client.clone()), owned.clone())
        .owns(Api::<StatefulSet>::all(client.clone()), owned.clone())
        .owns(Api::<CronJob>::all(client.clone()), owned.clone())
        .owns(Api::<Job>::all(client.clone()), owned.clone())
        .owns(Api::<Ingress>::all(client.clone()), owned)
        .watches(
            Api::<ConfigMap>::all(client.clone()),
            watcher::Config::default(),
            referencing(store.clone(), super::names_config_map),
        )
        .watches(
            Api::<Secret>::all(client.clone()),
            watcher::Config::default(),
            referencing(store, super::names_secret),
        )
        .reconcile_all_on(optional_api_changes(client, context.clone()))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(%object.name, "reconciled clair"),
                Err(e) => warn!(error = %e, "clair reconcile failed"),
            }
        })
        .await;
}

/// Maps a ConfigMap or Secret to the `Clair`s in its namespace that name it: as a drop-in,
/// or (Secrets) as an external connection string. Owned Secrets reach their owner anyway.
fn referencing<O: Resource>(
    store: Store<Clair>,
    names: impl Fn(&ConfigSource, &str) -> bool + Send + Sync + 'static,
) -> impl Fn(O) -> Vec<ObjectRef<Clair>> + Send + Sync + 'static {
    move |object: O| {
        let name = object.name_any();
        let namespace = object.namespace();
        super::related(&store, namespace.as_deref(), |clair| {
            let external = clair.spec.database.external.as_ref().is_some_and(|e| {
                [Some(&e.indexer), Some(&e.matcher), e.notifier.as_ref()]
                    .into_iter()
                    .flatten()
                    .any(|r| r.name == name)
            });
            external || clair.spec.dropins.iter().any(|d| names(d, &name))
        })
    }
}

fn error_policy(object: Arc<Clair>, error: &Error, _: Arc<Context>) -> Action {
    warn!(name = %object.name_any(), reason = error.reason(), %error, "requeue");
    Action::requeue(Duration::from_secs(15))
}

/// The generated config with the user's drop-ins, validated for every enabled service.
async fn observe_config(
    context: &Context,
    input: &ClairInput<'_>,
    root: &Value,
) -> Result<ConfigObservation, Error> {
    let root = Document {
        name: format!(
            "the generated config (Secret {})",
            input.config_secret_name()
        ),
        key: ROOT_KEY.to_string(),
        text: root.to_string(),
    };
    let mut dropins = Vec::new();
    for (index, source) in input.spec.dropins.iter().enumerate() {
        // Clair applies a drop-in only when its extension matches the root's; one that
        // would be silently ignored is refused here instead.
        let key = source.key().map(|k| k.key.as_str()).unwrap_or_default();
        if !(key.ends_with(".yaml") || key.ends_with(".yaml-patch")) {
            return Ok(ConfigObservation::Invalid {
                message: format!(
                    "spec.dropins[{index}]: key {key} would be ignored next to the generated \
                     {ROOT_KEY}: name it .yaml (merge patch) or .yaml-patch (JSON patch)"
                ),
            });
        }
        match crate::sources::read_source(&context.client, input.namespace, source).await? {
            Ok(document) => dropins.push(document),
            Err(what) => {
                return Ok(ConfigObservation::Missing {
                    what: format!("spec.dropins[{index}]: {what}"),
                });
            }
        }
    }
    let mut hashes = Vec::new();
    for &role in ServiceKind::VARIANTS {
        if !input.enabled(role) {
            continue;
        }
        match observe::judge(&root, &dropins, role) {
            (ConfigObservation::Valid { hash }, Some(snapshot)) => {
                if role == ServiceKind::Notifier
                    && let Some(problem) = notifier_delivery_missing(&snapshot.json)
                {
                    return Ok(ConfigObservation::Invalid { message: problem });
                }
                hashes.push(hash);
            }
            (ConfigObservation::Invalid { message }, _) => {
                return Ok(ConfigObservation::Invalid {
                    message: format!("in {} mode: {message}", role.as_str()),
                });
            }
            (other, _) => return Ok(other),
        }
    }
    Ok(ConfigObservation::Valid {
        hash: clairconfig::hash(&Value::from(hashes)),
    })
}

/// Clair's notifier exits at start without a delivery method; Clair's own validation only
/// warns. Refused here so a notifier never crash-loops on a config the operator rolled.
fn notifier_delivery_missing(merged: &str) -> Option<String> {
    let config: Value = serde_json::from_str(merged).ok()?;
    let notifier = config.get("notifier")?;
    let has = |key: &str| notifier.get(key).is_some_and(|v| !v.is_null());
    (!(has("webhook") || has("amqp") || has("stomp"))).then(|| {
        "notifier: no delivery is configured (notifier.webhook, notifier.amqp or notifier.stomp) \
         and Clair's notifier exits without one: add a drop-in with one, or set \
         spec.notifier.enabled to false"
            .to_string()
    })
}

/// One service resource as observed.
struct ObservedChild {
    observation: ChildObservation,
    status: Option<ChildStatus>,
    /// Disabled, or Available (or Scaling) on the image the spec asks for.
    settled_on_desired_image: bool,
}

/// Reads one service resource: absent, or present in the phase its status reports for its
/// current generation (`None` until its controller has caught up).
async fn observe_child<K: ServiceResource>(
    context: &Context,
    input: &ClairInput<'_>,
    role: ServiceKind,
) -> Result<ObservedChild, Error> {
    if !input.enabled(role) {
        return Ok(ObservedChild {
            observation: ChildObservation::Disabled,
            status: None,
            settled_on_desired_image: true,
        });
    }
    let name = input.child_name(role);
    let api: Api<K> = Api::namespaced(context.client.clone(), input.namespace);
    let Some(child) = api.get_opt(&name).await? else {
        return Ok(ObservedChild {
            observation: ChildObservation::Absent,
            status: None,
            settled_on_desired_image: false,
        });
    };
    let status = child.service_status();
    let current = status.and_then(|s| s.observed_generation) == child.meta().generation;
    let phase = status.and_then(|s| s.phase).filter(|_| current);
    let child_status = ChildStatus {
        name: name.clone(),
        phase,
        ready_replicas: status.map_or(0, |s| s.ready_replicas),
        url: status.and_then(|s| s.url.clone()),
    };
    let on_desired_image =
        child.service_spec().image.as_deref() == Some(&input.service_image(role));
    Ok(ObservedChild {
        observation: ChildObservation::Present { name, phase },
        status: Some(child_status),
        settled_on_desired_image: on_desired_image
            && matches!(phase, Some(Phase::Available | Phase::Scaling)),
    })
}

/// The routing the spec asks for, as the cluster can serve it.
async fn observe_routing(
    context: &Context,
    input: &ClairInput<'_>,
) -> (Result<RoutingKind, String>, routing::Served) {
    let served = routing::Served {
        routes: context.capabilities.serves(OptionalApi::Route).await,
        http_routes: context.capabilities.serves(OptionalApi::HttpRoute).await,
    };
    (
        routing::resolve(input.spec.routing.as_ref(), served),
        served,
    )
}

async fn reconcile(cached: Arc<Clair>, context: Arc<Context>) -> Result<Action, Error> {
    let client = &context.client;
    let namespace = cached
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = cached.name_any();
    // The cache can lag behind this controller's own last status write; deciding from a
    // stale `status.version` would repeat an upgrade step. Read the object fresh.
    let clairs: Api<Clair> = Api::namespaced(client.clone(), &namespace);
    let Some(object) = clairs.get_opt(&name).await? else {
        return Ok(Action::await_change());
    };
    let uid = object.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let owner = object
        .controller_owner_ref(&())
        .ok_or(Error::MissingField("metadata.uid"))?;
    let generation = object.meta().generation.unwrap_or(0);
    let input = ClairInput {
        name: &name,
        namespace: &namespace,
        owner,
        spec: &object.spec,
        users: context.capabilities.pod_users().await,
    };

    // Credentials the config needs, generated once.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let psk = credentials::generated_secret(
        &secrets,
        &input.psk_secret_name(),
        &[render::PSK_KEY.to_string()],
        || credentials::random_base64(32),
        |values| render::psk_secret(&input, &values[render::PSK_KEY]),
    )
    .await?;
    let psk = psk.get(render::PSK_KEY).cloned().unwrap_or_default();

    // Observe: the database (a managed engine is applied here: the services wait on it).
    let database: DatabaseState = match (
        &object.spec.database.managed,
        &object.spec.database.external,
    ) {
        (Some(managed), _) => database::managed(&context, &input, managed).await?,
        (None, Some(external)) => {
            database::external(&context, &input, external, ProbeOptions::default()).await?
        }
        (None, None) => return Err(Error::MissingField("spec.database.managed or .external")),
    };
    let root = render::root_config(&input, &database.connections, &psk);
    let config = observe_config(&context, &input, &root).await?;
    let children = [
        observe_child::<Indexer>(&context, &input, ServiceKind::Indexer).await?,
        observe_child::<Matcher>(&context, &input, ServiceKind::Matcher).await?,
        observe_child::<Notifier>(&context, &input, ServiceKind::Notifier).await?,
    ];
    let status = object.status.as_ref();
    let running_version = status.and_then(|s| s.version.clone());
    let desired_version = render::image_version(&input.image());
    let upgrade = upgrade::observe(
        &context,
        &input,
        running_version.as_deref(),
        desired_version.as_deref(),
        children.iter().all(|c| c.settled_on_desired_image),
    )
    .await?;
    let [indexer, matcher, notifier] = children;
    let connections = budget::check(&database::demands(&input, &database), &database.limits);
    let (routing_kind, served) = observe_routing(&context, &input).await;
    let external_url = object.spec.routing.as_ref().and_then(routing::external_url);
    let routing_observation = match &routing_kind {
        Err(message) => RoutingObservation::Unsupported {
            message: message.clone(),
        },
        Ok(RoutingKind::None) => RoutingObservation::Disabled,
        Ok(kind) => RoutingObservation::Applied {
            what: match kind {
                RoutingKind::Route => format!("one Route per service path ({name}-indexer, ...)"),
                RoutingKind::HttpRoute => format!("HTTPRoute {name}"),
                _ => format!("Ingress {name}"),
            },
            url: external_url
                .clone()
                .unwrap_or_else(|| "any host".to_string()),
        },
    };
    let snapshot = ClairSnapshot {
        generation,
        config,
        database: database.observation.clone(),
        children: [
            indexer.observation,
            matcher.observation,
            notifier.observation,
        ],
        connections,
        routing: routing_observation,
        upgrade: upgrade.observation.clone(),
    };

    // Decide.
    let previous = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let decision = decide(status.and_then(|s| s.phase), previous, &snapshot, &now());

    // Apply what the decision allows.
    if decision.phase == Phase::Upgrading
        && let Some(job) = &upgrade.job_to_create
    {
        upgrade::start_step(&context, &input, job).await?;
    }
    if upgrade.completed {
        upgrade::clean_up(&context, &input, &uid).await?;
    }
    if decision.apply == ApplyPlan::Everything {
        apply_fresh(&secrets, &render::config_secret(&input, &root)).await?;
        apply_child::<Indexer>(&context, &input, ServiceKind::Indexer).await?;
        apply_child::<Matcher>(&context, &input, ServiceKind::Matcher).await?;
        let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), &namespace);
        match render::updater_cronjob(&input) {
            Some(cron) => {
                apply_fresh(&cronjobs, &cron).await?;
            }
            None => {
                delete_unwanted(&cronjobs, &owned_selector(&name, "updaters"), &uid, |_| {
                    false
                })
                .await?;
            }
        }
    }
    if decision.apply != ApplyPlan::Nothing {
        // Switching the notifier off is honoured whatever else is wrong.
        if input.notifier_enabled() {
            if decision.apply == ApplyPlan::Everything {
                apply_child::<Notifier>(&context, &input, ServiceKind::Notifier).await?;
            }
        } else {
            let notifiers: Api<Notifier> = Api::namespaced(client.clone(), &namespace);
            delete_unwanted(&notifiers, &owned_selector(&name, "notifier"), &uid, |_| {
                false
            })
            .await?;
        }
        apply_routing(
            &context,
            &input,
            routing_kind.as_ref().ok().copied(),
            served,
            &uid,
        )
        .await?;
    }

    // Status: one write, only when it changed.
    // The version the services run: the new one once an upgrade's post step is done, or
    // whenever the services are applied with no upgrade under way.
    let version = if upgrade.completed
        || (upgrade.observation == UpgradeObservation::None
            && decision.apply == ApplyPlan::Everything)
    {
        desired_version
    } else {
        running_version
    };
    let new_status = ClairStatus {
        phase: Some(decision.phase),
        conditions: decision.conditions.clone(),
        observed_generation: Some(generation),
        config_secret: Some(input.config_secret_name()),
        version,
        indexer: indexer.status,
        matcher: matcher.status,
        notifier: notifier.status,
        url: external_url.filter(|_| routing_kind.as_ref().is_ok_and(|k| *k != RoutingKind::None)),
    };
    if status != Some(&new_status) {
        super::write_status(&clairs, &name, &new_status).await?;
    }
    if let Some(event) = &decision.event {
        info!(%name, %namespace, note = %event.note, "clair phase transition");
        super::publish_transition(
            &context,
            event,
            decision.transition,
            &object.object_ref(&()),
        )
        .await;
    }
    Ok(Action::requeue(match decision.phase {
        // The database is measured again at this pace while all is well.
        Phase::Available => Duration::from_secs(300),
        _ => Duration::from_secs(20),
    }))
}

fn owned_selector(clair: &str, component: &str) -> String {
    labels::to_selector_string(&labels::all(clair, component))
}

async fn apply_child<K: ServiceResource>(
    context: &Context,
    input: &ClairInput<'_>,
    role: ServiceKind,
) -> Result<(), Error> {
    let api: Api<K> = Api::namespaced(context.client.clone(), input.namespace);
    apply_fresh(&api, &render::child::<K>(input, role)).await?;
    Ok(())
}

/// Applies the routing object of `kind` and deletes those of the other kinds.
async fn apply_routing(
    context: &Context,
    input: &ClairInput<'_>,
    kind: Option<RoutingKind>,
    served: routing::Served,
    uid: &str,
) -> Result<(), Error> {
    let client = &context.client;
    let selector = owned_selector(input.name, "routing");
    let spec = input.spec.routing.clone().unwrap_or_default();

    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), input.namespace);
    if kind == Some(RoutingKind::Ingress) {
        apply_fresh(&ingresses, &routing::ingress(input, &spec)).await?;
    } else {
        delete_unwanted(&ingresses, &selector, uid, |_| false).await?;
    }

    if served.routes {
        let routes: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), input.namespace, &routing::route_resource());
        let wanted = if kind == Some(RoutingKind::Route) {
            routing::routes(input, &spec)
        } else {
            Vec::new()
        };
        for route in &wanted {
            apply_fresh(&routes, route).await?;
        }
        let names: Vec<String> = wanted.iter().map(|r| r.name_any()).collect();
        delete_unwanted(&routes, &selector, uid, |r| names.contains(&r.name_any())).await?;
    }

    if served.http_routes {
        let resource = routing::http_route_resource();
        let http_routes: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), input.namespace, &resource);
        if kind == Some(RoutingKind::HttpRoute) {
            apply_fresh(&http_routes, &routing::http_route(input, &spec)).await?;
        } else {
            delete_unwanted(&http_routes, &selector, uid, |_| false).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notifier_needs_a_delivery() {
        assert!(notifier_delivery_missing(r#"{"notifier":{"connstring":"x"}}"#).is_some());
        assert!(
            notifier_delivery_missing(r#"{"notifier":{"webhook":{"target":"http://t/"}}}"#)
                .is_none()
        );
    }
}
