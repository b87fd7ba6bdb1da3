//! Pure: every object a `Clair` should own after its decision, and the status it reports.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use strum::VariantArray;

use super::observe::Observed;
use crate::api::ServiceKind;
use crate::api::clair::{DatabaseEngine, RoutingKind};
use crate::api::service::ClairService;
use crate::api::{ClairStatus, Indexer, Matcher, Notifier};
use crate::machine::Decision;
use crate::machine::clair::{ChildAction, ClairActions, ReportedVersion, UpgradeAction};
use crate::render::clair::{self as render, ClairInput};
use crate::render::cloudnative_pg;
use crate::render::database as db;
use crate::render::owned::{ClairObjects, Owned};
use crate::render::quay;
use crate::render::routing;

/// The objects `actions` allow. The credentials and the managed database are applied
/// whatever the phase: the services wait on them.
pub fn objects(input: &ClairInput, observed: &Observed, actions: &ClairActions) -> ClairObjects {
    let managed = input.spec.database.managed.as_ref();
    let key = observed
        .psk
        .get(render::PSK_KEY)
        .cloned()
        .unwrap_or_default();
    let mut secrets = Owned::exactly().apply(render::psk_secret(input, &key));
    secrets = match (managed, &observed.passwords) {
        (Some(managed), Some(passwords)) => {
            secrets.apply(db::passwords_secret(input, managed, passwords))
        }
        // Switched to an external database: the passwords stay with the data they open.
        _ => secrets.keep(db::passwords_secret_name(input)),
    };
    secrets = if actions.roll {
        secrets.apply(render::config_secret(input, &observed.root))
    } else {
        // The running pods keep their last good config.
        secrets.keep(input.config_secret_name())
    };
    // Quay's side changes with the config it matches (its key, its endpoint).
    secrets = match quay::secret(input, &observed.key) {
        Some(secret) if actions.roll => secrets.apply(secret),
        Some(_) => secrets.keep(quay::secret_name(input)),
        None => secrets,
    };
    let engine_objects = engine_objects(input, observed);
    // CloudNativePG reads each role's password from a login Secret of its own, kept while
    // the engines are not written.
    if managed.is_some_and(|m| m.engine() == DatabaseEngine::CloudNativePg) {
        for role in ServiceKind::VARIANTS {
            secrets = match (
                &observed.passwords,
                engine_objects.postgres_clusters.prunes(),
            ) {
                (Some(passwords), true) => {
                    secrets.apply(cloudnative_pg::role_secret(input, *role, passwords))
                }
                _ => secrets.keep(cloudnative_pg::role_secret_name(input, *role)),
            };
        }
    }
    let EngineObjects {
        config_maps,
        services,
        stateful_sets,
        network_policies,
        postgres_clusters,
        postgres_databases,
    } = engine_objects;
    let jobs = match &actions.upgrade {
        UpgradeAction::Start { step, version } => Owned::at_least()
            .create_once(crate::render::clairctl::upgrade_job(input, *step, version)),
        UpgradeAction::CleanUp => Owned::exactly(),
        UpgradeAction::None => Owned::at_least(),
    };
    let cron_jobs = if actions.roll {
        Owned::exactly().apply_some(crate::render::clairctl::updater_cronjob(input))
    } else {
        Owned::at_least()
    };
    // The services' policy beside the engines'. Engines left alone keep their policy by
    // name and nothing else, so a services policy no longer asked for goes whatever the
    // database.
    let network_policies = if network_policies.prunes() {
        network_policies
    } else {
        Owned::exactly().keep(db::network_policy_name(input))
    }
    .apply_some(
        input
            .spec
            .network_policy
            .as_ref()
            .map(|asked| crate::render::policy::services(input, asked)),
    );
    let (ingresses, routes, http_routes) = routing_objects(input, observed, actions.routing);
    ClairObjects {
        secrets,
        config_maps,
        services,
        stateful_sets,
        network_policies,
        postgres_clusters,
        postgres_databases,
        jobs,
        indexers: child::<Indexer>(input, observed, actions),
        matchers: child::<Matcher>(input, observed, actions),
        notifiers: child::<Notifier>(input, observed, actions),
        cron_jobs,
        ingresses,
        routes,
        http_routes,
    }
}

/// A managed database's engines, of whichever kind runs them.
struct EngineObjects {
    config_maps: Owned<k8s_openapi::api::core::v1::ConfigMap>,
    services: Owned<k8s_openapi::api::core::v1::Service>,
    stateful_sets: Owned<k8s_openapi::api::apps::v1::StatefulSet>,
    network_policies: Owned<k8s_openapi::api::networking::v1::NetworkPolicy>,
    postgres_clusters: Owned<kube::api::DynamicObject>,
    postgres_databases: Owned<kube::api::DynamicObject>,
}

/// The engines to write. An external database leaves a formerly managed one as it is (its
/// data claims are the user's to delete). An engine image outside the allow-list is not
/// run, nor one on an API the cluster does not serve. The engine kind never changes on a
/// `Clair`, so the other kind's objects are left alone (nothing to prune, and on the
/// built-in engine no CloudNativePG API to ask).
fn engine_objects(input: &ClairInput, observed: &Observed) -> EngineObjects {
    let untouched = || EngineObjects {
        config_maps: Owned::at_least(),
        services: Owned::at_least(),
        stateful_sets: Owned::at_least(),
        network_policies: Owned::at_least(),
        postgres_clusters: Owned::at_least(),
        postgres_databases: Owned::at_least(),
    };
    let Some(managed) = input.spec.database.managed.as_ref() else {
        return untouched();
    };
    if !observed.images_allowed || !observed.database.engines_served {
        return untouched();
    }
    let engines = db::engines(input, managed);
    match managed.engine() {
        DatabaseEngine::BuiltIn => EngineObjects {
            config_maps: Owned::exactly().apply(db::bootstrap(input)),
            services: Owned::exactly().apply_all(engines.iter().map(|e| db::service(input, e))),
            stateful_sets: Owned::exactly()
                .apply_all(engines.iter().map(|e| db::statefulset(input, managed, e))),
            network_policies: Owned::exactly()
                .apply_some(managed.network_policy.then(|| db::network_policy(input))),
            ..untouched()
        },
        DatabaseEngine::CloudNativePg => EngineObjects {
            postgres_clusters: Owned::exactly().apply_all(
                engines
                    .iter()
                    .map(|e| cloudnative_pg::cluster(input, managed, e)),
            ),
            postgres_databases: Owned::exactly().apply_all(engines.iter().flat_map(|e| {
                e.roles
                    .iter()
                    .map(|role| cloudnative_pg::database(input, managed, e, *role))
            })),
            ..untouched()
        },
    }
}

fn child<K: ClairService + Resource>(
    input: &ClairInput,
    observed: &Observed,
    actions: &ClairActions,
) -> Owned<K> {
    let database = &observed.database;
    let database_pod = database
        .engine_of
        .get(&K::KIND)
        .and_then(|engine| database.engine_pods.get(engine))
        .map(String::as_str);
    match actions.child(K::KIND) {
        ChildAction::Apply => {
            Owned::exactly().apply(render::child::<K>(input, K::KIND, database_pod))
        }
        ChildAction::Leave => Owned::at_least(),
        ChildAction::Remove => Owned::exactly(),
    }
}

type RoutingObjects = (
    Owned<k8s_openapi::api::networking::v1::Ingress>,
    Owned<kube::api::DynamicObject>,
    Owned<kube::api::DynamicObject>,
);

/// The routing object of the kind resolved, and none of the other kinds (of those the
/// cluster serves).
fn routing_objects(input: &ClairInput, observed: &Observed, apply: bool) -> RoutingObjects {
    if !apply {
        return (Owned::at_least(), Owned::at_least(), Owned::at_least());
    }
    let kind = observed.routing.as_ref().ok().copied();
    let spec = input.spec.routing.clone().unwrap_or_default();
    let ingresses = Owned::exactly()
        .apply_some((kind == Some(RoutingKind::Ingress)).then(|| routing::ingress(input, &spec)));
    let routes = if observed.served.routes {
        let wanted = (kind == Some(RoutingKind::Route)).then(|| routing::routes(input, &spec));
        Owned::exactly().apply_all(wanted.unwrap_or_default())
    } else {
        Owned::at_least()
    };
    let http_routes = if observed.served.http_routes {
        Owned::exactly().apply_some(
            (kind == Some(RoutingKind::HttpRoute))
                .then(|| routing::http_route(input, &spec, observed.served.http_route_timeouts)),
        )
    } else {
        Owned::at_least()
    };
    (ingresses, routes, http_routes)
}

/// The status after `decision`.
pub fn status(
    input: &ClairInput,
    observed: &Observed,
    decision: &Decision,
    actions: &ClairActions,
    generation: i64,
    phase_since: Time,
) -> ClairStatus {
    let [indexer, matcher, notifier] = &observed.children;
    let routed = observed
        .routing
        .as_ref()
        .is_ok_and(|k| *k != RoutingKind::None);
    ClairStatus {
        updaters: super::updaters::status(&observed.updaters),
        phase: Some(decision.phase),
        phase_since: Some(phase_since),
        conditions: decision.conditions.clone(),
        observed_generation: Some(generation),
        config_secret: Some(input.config_secret_name()),
        version: match actions.version {
            ReportedVersion::Desired => observed.desired_version.clone(),
            ReportedVersion::Running => observed.running_version.clone(),
        },
        indexer: indexer.status.clone(),
        matcher: matcher.status.clone(),
        notifier: notifier.status.clone(),
        url: input
            .spec
            .routing
            .as_ref()
            .and_then(routing::external_url)
            .filter(|_| routed),
        quay: quay::status(input),
    }
}
