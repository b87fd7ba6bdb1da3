//! The database side of a `Clair`, observed: for a managed database, whether its engines
//! have a ready pod (the engines themselves are desired objects, applied whatever the phase:
//! the services wait on them); for an external one, the connection strings read from the
//! user's Secrets and checked with a real connection. Either way: the `DatabaseReady`
//! observation, each service's connection string, and what the connection budget is
//! measured against. Reads only.

use std::collections::BTreeMap;
use strum::VariantArray;

use rustls::pki_types::CertificateDer;

use super::probes;
use crate::api::ConfigSource;
use crate::api::ServiceKind;
use crate::api::clair::{DatabaseEngine, ExternalDatabase, ManagedDatabase};
use crate::controller::capabilities::OptionalApi;
use crate::controller::error::ObserveError;
use crate::controller::observer::Observer;
use crate::controller::service::observe::read;
use crate::database::budget::Demand;
use crate::database::connstring::{self, ConnSettings};
use crate::database::probe::{FailureKind, ProbeOptions, Undelivered};
use crate::machine::Reason;
use crate::machine::observation::DatabaseObservation;
use crate::render::clair::{ClairInput, ConnStrings};
use crate::render::database as db;
use crate::render::sizing;
use crate::sources::ObjectSource;

/// What the database side found.
pub struct DatabaseState {
    pub observation: DatabaseObservation,
    pub connections: ConnStrings,
    /// The engine each service connects to, by role (for the connection budget).
    pub engine_of: BTreeMap<ServiceKind, String>,
    /// Each engine's `max_connections`, when known.
    pub limits: BTreeMap<String, Option<u32>>,
    /// The UID of each managed engine's pod, by engine: a new one means the engine was
    /// replaced, and the services that use it are rolled (their pooled connections still
    /// point at the old pod's address and would hang until TCP gives up).
    pub engine_pods: BTreeMap<String, String>,
    /// The notifier's undelivered notifications, as its database's last check counted
    /// them, or why they are not known.
    pub deliveries: Result<Undelivered, String>,
    /// The API that runs the managed engines is served (false: CloudNativePG asked for and
    /// not installed), so they can be written.
    pub engines_served: bool,
}

/// Why the built-in engine's deliveries are not counted.
const MANAGED_DELIVERIES: &str = "counted where the operator connects to the database \
     (external, or on CloudNativePG), not on the built-in engine: the notifier's log tells \
     how deliveries go";

/// Why a Clair on CloudNativePG waits where the cluster does not serve it.
const CLOUDNATIVE_PG_NOT_SERVED: &str = "spec.database.managed.engine is CloudNativePG, but \
     this cluster does not serve postgresql.cnpg.io/v1 Clusters: install CloudNativePG \
     (docs/database.md), or create the Clair with engine BuiltIn";

/// A managed database: ready when every engine has a ready pod (on CloudNativePG, a
/// serving primary, and each service's role answers a real connection). `passwords`: each
/// role's, as the passwords Secret holds them (or as they are about to be generated).
pub async fn managed(
    source: &impl Observer,
    input: &ClairInput<'_>,
    managed: &ManagedDatabase,
    passwords: &BTreeMap<String, String>,
    ready_before: bool,
) -> Result<DatabaseState, ObserveError> {
    let on_cloudnative_pg = managed.engine() == DatabaseEngine::CloudNativePg;
    if on_cloudnative_pg && !source.serves(OptionalApi::PostgresCluster).await {
        let mut state = managed_state(input, managed, passwords, &[]);
        state.observation = DatabaseObservation::Unreachable {
            reason: Reason::DatabaseMisconfigured,
            message: CLOUDNATIVE_PG_NOT_SERVED.to_string(),
        };
        state.engines_served = false;
        return Ok(state);
    }
    let mut not_ready = Vec::new();
    let mut engine_pods = BTreeMap::new();
    for engine in db::engines(input, managed) {
        let found = match on_cloudnative_pg {
            true => {
                source
                    .postgres_cluster(input.namespace, &engine.name)
                    .await?
            }
            false => source.engine(input.namespace, &engine.name).await?,
        };
        if let Some(uid) = found.pod_uid {
            engine_pods.insert(engine.name.clone(), uid);
        }
        if !found.ready {
            not_ready.push(engine.name);
        }
    }
    let mut state = managed_state(input, managed, passwords, &not_ready);
    state.engine_pods = engine_pods;
    if on_cloudnative_pg && not_ready.is_empty() {
        connect_to_primaries(source, input, &mut state, ready_before);
    }
    Ok(state)
}

/// CloudNativePG says each Cluster has a primary; whether each service's role can log in
/// to its database there is checked for real (a role or a database CloudNativePG has not
/// made yet, a password it has not applied), and the budget measured against the
/// `max_connections` the primary reports.
fn connect_to_primaries(
    source: &impl Observer,
    input: &ClairInput<'_>,
    state: &mut DatabaseState,
    ready_before: bool,
) {
    let strings: BTreeMap<ServiceKind, String> = ServiceKind::VARIANTS
        .iter()
        .filter(|role| input.enabled(**role))
        .filter_map(|role| Some((*role, state.connections.of(*role)?.to_string())))
        .collect();
    // The operator renders these strings itself: they parse.
    let parsed = strings
        .iter()
        .filter_map(|(role, text)| Some((*role, connstring::parse(text).ok()?)))
        .collect();
    let to_check = ToCheck {
        strings: &strings,
        parsed: &parsed,
        trusted: &BTreeMap::new(),
    };
    let engine_of = state.engine_of.clone();
    let checked = check_each(
        source,
        input,
        to_check,
        ProbeOptions::default(),
        ready_before,
        |role, _| engine_of.get(&role).cloned(),
    );
    for (engine, reported) in checked.limits {
        if let Some(max) = reported {
            state.limits.insert(engine, Some(max));
        }
    }
    state.deliveries = checked.deliveries;
    if let Some((reason, _)) = checked.failures.first() {
        state.observation = DatabaseObservation::Unreachable {
            reason: *reason,
            message: checked
                .failures
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        };
    }
}

/// A managed database's state once its engines' readiness is known (`not_ready`: the
/// engines without a ready pod).
fn managed_state(
    input: &ClairInput<'_>,
    managed: &ManagedDatabase,
    passwords: &BTreeMap<String, String>,
    not_ready: &[String],
) -> DatabaseState {
    let engines = db::engines(input, managed);
    let observation = if not_ready.is_empty() {
        DatabaseObservation::Reachable
    } else {
        let engines = not_ready.join(", ");
        DatabaseObservation::Unreachable {
            reason: Reason::DatabaseNotReady,
            message: match managed.engine() {
                DatabaseEngine::BuiltIn => {
                    format!("the managed engine {engines} has no ready pod yet")
                }
                DatabaseEngine::CloudNativePg => format!(
                    "the CloudNativePG Cluster {engines} has no serving primary yet \
                     (kubectl get clusters.postgresql.cnpg.io {engines})"
                ),
            },
        }
    };
    let max = managed
        .max_connections
        .unwrap_or(db::DEFAULT_MAX_CONNECTIONS)
        .max(0) as u32;
    DatabaseState {
        observation,
        connections: db::conn_strings(input, managed, &engines, passwords),
        engine_of: ServiceKind::VARIANTS
            .iter()
            .filter_map(|role| db::engine_of(&engines, *role).map(|e| (*role, e.name.clone())))
            .collect(),
        limits: engines
            .iter()
            .map(|e| (e.name.clone(), Some(max)))
            .collect(),
        engine_pods: BTreeMap::new(),
        deliveries: Err(MANAGED_DELIVERIES.to_string()),
        engines_served: true,
    }
}

pub(super) fn failure_reason(kind: FailureKind) -> Reason {
    match kind {
        FailureKind::Misconfigured => Reason::DatabaseMisconfigured,
        FailureKind::AuthFailed => Reason::DatabaseAuthFailed,
        FailureKind::DatabaseMissing => Reason::DatabaseMissing,
        FailureKind::Unreachable | FailureKind::Busy => Reason::DatabaseUnreachable,
        FailureKind::Rejected => Reason::DatabaseRejected,
    }
}

/// The connection strings of an external database as read from the user's Secrets, before
/// any connection is tried.
struct ExternalStrings {
    /// Each enabled service's string, as read (trimmed).
    strings: BTreeMap<ServiceKind, String>,
    /// Those that parse.
    parsed: BTreeMap<ServiceKind, ConnSettings>,
    /// What is missing or malformed, by service.
    failures: Vec<(Reason, String)>,
}

/// Reads and parses each enabled service's connection string.
async fn external_strings(
    objects: &impl ObjectSource,
    input: &ClairInput<'_>,
    external: &ExternalDatabase,
) -> Result<ExternalStrings, ObserveError> {
    let references = [
        (ServiceKind::Indexer, Some(&external.indexer)),
        (ServiceKind::Matcher, Some(&external.matcher)),
        (ServiceKind::Notifier, external.notifier.as_ref()),
    ];
    let mut strings: BTreeMap<ServiceKind, String> = BTreeMap::new();
    let mut parsed: BTreeMap<ServiceKind, ConnSettings> = BTreeMap::new();
    let mut failures: Vec<(Reason, String)> = Vec::new();
    for (role, reference) in references {
        if !input.enabled(role) {
            continue;
        }
        let Some(reference) = reference else {
            failures.push((
                Reason::DatabaseMisconfigured,
                format!("{role}: spec.database.external.{role} is not set"),
            ));
            continue;
        };
        let source = ConfigSource {
            config_map: None,
            secret: Some(reference.clone()),
        };
        let text = match read(objects, input.namespace, &source).await? {
            Ok(document) => document.text.trim().to_string(),
            Err(what) => {
                failures.push((Reason::DatabaseMisconfigured, format!("{role}: {what}")));
                continue;
            }
        };
        match connstring::parse(&text) {
            Ok(settings) => {
                parsed.insert(role, settings);
            }
            Err(e) => failures.push((Reason::DatabaseMisconfigured, format!("{role}: {e}"))),
        }
        strings.insert(role, text);
    }
    Ok(ExternalStrings {
        strings,
        parsed,
        failures,
    })
}

/// External databases: each enabled service's string read and checked, concurrently.
pub async fn external(
    source: &impl Observer,
    input: &ClairInput<'_>,
    external: &ExternalDatabase,
    options: ProbeOptions,
    ready_before: bool,
) -> Result<DatabaseState, ObserveError> {
    let ExternalStrings {
        strings,
        mut parsed,
        mut failures,
    } = external_strings(source, input, external).await?;
    // The CAs each service trusts (its pod settings over the Clair's) count for its check.
    let mut trusted: BTreeMap<ServiceKind, Vec<CertificateDer<'static>>> = BTreeMap::new();
    for role in parsed.keys().copied().collect::<Vec<_>>() {
        let Some(bundle) = input.ca_bundle(role) else {
            continue;
        };
        match crate::sources::read_ca_bundle(source, input.namespace, bundle)
            .await
            .map_err(ObserveError::reading("the caBundle".to_string()))?
        {
            Ok(certificates) => {
                trusted.insert(role, certificates);
            }
            Err(what) => {
                parsed.remove(&role);
                failures.push((Reason::DatabaseMisconfigured, format!("{role}: {what}")));
            }
        }
    }
    let to_check = ToCheck {
        strings: &strings,
        parsed: &parsed,
        trusted: &trusted,
    };
    let checked = check_each(
        source,
        input,
        to_check,
        options,
        ready_before,
        |_, settings| {
            // The engine is where the string points, whether or not it answered.
            settings
                .hosts()
                .ok()
                .and_then(|hosts| hosts.first().map(|(h, p)| format!("{h}:{p}")))
        },
    );
    failures.extend(checked.failures);
    let (engine_of, limits) = (checked.engine_of, checked.limits);
    let deliveries = checked.deliveries;
    let mut state = external_state(input, &strings, &failures, engine_of, limits);
    state.deliveries = deliveries;
    Ok(state)
}

fn external_state(
    input: &ClairInput<'_>,
    strings: &BTreeMap<ServiceKind, String>,
    failures: &[(Reason, String)],
    engine_of: BTreeMap<ServiceKind, String>,
    limits: BTreeMap<String, Option<u32>>,
) -> DatabaseState {
    let observation = match failures.first() {
        None => DatabaseObservation::Reachable,
        Some((reason, _)) => DatabaseObservation::Unreachable {
            reason: *reason,
            message: failures
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        },
    };
    let string = |role: ServiceKind| strings.get(&role).cloned().unwrap_or_default();
    DatabaseState {
        observation,
        connections: ConnStrings {
            indexer: string(ServiceKind::Indexer),
            matcher: string(ServiceKind::Matcher),
            notifier: input
                .notifier_enabled()
                .then(|| string(ServiceKind::Notifier)),
        },
        engine_of,
        limits,
        engine_pods: BTreeMap::new(),
        deliveries: Err("the notifier's database has not been checked yet".to_string()),
        engines_served: true,
    }
}

/// Each enabled service's demand on its engine: pool size (the string's `pool_max_conns`,
/// else the one the operator renders from the pods' CPU limit, else pgxpool's floor, as an
/// assumption) × most replicas.
pub fn demands(input: &ClairInput, state: &DatabaseState) -> Vec<Demand> {
    ServiceKind::VARIANTS
        .iter()
        .filter(|role| input.enabled(**role))
        .filter_map(|role| {
            let engine = state.engine_of.get(role)?.clone();
            let text = state.connections.of(*role)?;
            let pool = connstring::parse(text)
                .ok()
                .and_then(|s| s.pool_max_conns().ok().flatten());
            let overrides = input.overrides(*role);
            let max_replicas = overrides
                .and_then(|o| match &o.autoscaling {
                    Some(a) => Some(a.max_replicas),
                    None => o.replicas,
                })
                .unwrap_or(1)
                .max(0) as u32;
            let rendered = pool.or_else(|| input.pool_size(*role));
            Some(Demand {
                service: *role,
                engine,
                pool: rendered.unwrap_or(sizing::ASSUMED_POOL),
                pool_assumed: rendered.is_none(),
                max_replicas,
            })
        })
        .collect()
}

/// What the connection checks of each service's string found.
struct Checked {
    limits: BTreeMap<String, Option<u32>>,
    engine_of: BTreeMap<ServiceKind, String>,
    deliveries: Result<Undelivered, String>,
    failures: Vec<(Reason, String)>,
}

/// Each service's connection string, by service: as written, parsed, and the CAs it trusts.
struct ToCheck<'a> {
    strings: &'a BTreeMap<ServiceKind, String>,
    parsed: &'a BTreeMap<ServiceKind, ConnSettings>,
    trusted: &'a BTreeMap<ServiceKind, Vec<CertificateDer<'static>>>,
}

/// Each service's string checked with a real connection; `engine`: the engine a string's
/// service connects to.
fn check_each(
    source: &impl Observer,
    input: &ClairInput<'_>,
    ToCheck {
        strings,
        parsed,
        trusted,
    }: ToCheck<'_>,
    options: ProbeOptions,
    ready_before: bool,
    engine: impl Fn(ServiceKind, &ConnSettings) -> Option<String>,
) -> Checked {
    // Checked apart from the reconcile (`probes`): a database that never answers holds back
    // its own Clair only.
    let mut limits = BTreeMap::new();
    let mut engine_of = BTreeMap::new();
    let mut failures = Vec::new();
    let mut deliveries = Err(match parsed.contains_key(&ServiceKind::Notifier) {
        true => "the notifier's database has not been checked yet",
        false => "the notifier's connection string cannot be used: DatabaseReady says why",
    }
    .to_string());
    for (role, settings) in parsed {
        // The notifier's check also counts its undelivered notifications.
        let options = ProbeOptions {
            notifications: *role == ServiceKind::Notifier,
            ..options
        };
        let trusted = trusted.get(role).map(Vec::as_slice).unwrap_or_default();
        let key = probes::Key::new(
            input.namespace,
            input.name,
            *role,
            strings.get(role).map(String::as_str).unwrap_or_default(),
            trusted,
        );
        let outcome = source.database_check(key, settings, options, trusted);
        let engine = engine(*role, settings);
        match outcome {
            probes::Outcome::Checked(Ok(probed)) => {
                if let Some(engine) = &engine {
                    limits.insert(engine.clone(), probed.max_connections);
                }
                if *role == ServiceKind::Notifier {
                    deliveries = probed.undelivered.clone().unwrap_or_else(|| {
                        Err("the notifier's check did not count them".to_string())
                    });
                }
            }
            probes::Outcome::Checked(Err(failure)) => {
                if let Some(engine) = &engine {
                    limits.entry(engine.clone()).or_insert(None);
                }
                if *role == ServiceKind::Notifier {
                    deliveries = Err(
                        "the notifier's database cannot be checked: DatabaseReady says why"
                            .to_string(),
                    );
                }
                failures.push((
                    failure_reason(failure.kind),
                    format!("{role}: {}", failure.message),
                ));
            }
            probes::Outcome::Pending => {
                if let Some(engine) = &engine {
                    limits.entry(engine.clone()).or_insert(None);
                }
                // A restarted operator has no result yet: a database ready before stays so
                // until its check ends (a Clair must not flap because the operator restarted).
                if !ready_before {
                    failures.push((
                        Reason::DatabaseNotChecked,
                        format!("{role}: the first connection check is under way"),
                    ));
                }
            }
        }
        if let Some(engine) = engine {
            engine_of.insert(*role, engine);
        }
    }
    Checked {
        limits,
        engine_of,
        deliveries,
        failures,
    }
}
