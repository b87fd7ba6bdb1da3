//! The machine of `Clair`: its phase aggregates its config, its database and the phases of
//! the service resources it owns, with a condition per service saying which holds it back.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use strum::VariantArray;

use super::conditions::{ConditionSpec, ConditionType as T, Reason, Status, reason_in};
use super::observation::{
    ConfigObservation, DatabaseObservation, config_condition, database_condition, not_degraded,
    strip_link,
};
use super::table::{ObservationClass, next};
use super::upgrade::Upgrade;
use super::{ApplyPlan, Decision, conclude};
use crate::api::Phase::{self, *};
use crate::api::ServiceKind;
use crate::api::clair::UpgradeStep;
use crate::database::budget::Budget;

/// The condition on a `Clair` that reports one of its services.
fn service_condition(kind: ServiceKind) -> T {
    match kind {
        ServiceKind::Indexer => T::IndexerReady,
        ServiceKind::Matcher => T::MatcherReady,
        ServiceKind::Notifier => T::NotifierReady,
    }
}

/// One owned service resource as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChildObservation {
    /// Switched off in the spec (only the notifier can be).
    Disabled,
    /// Not created yet, or deleted.
    Absent,
    /// Present, in this phase (`None`: it has no status yet).
    Present { name: String, phase: Option<Phase> },
}

/// Everything one reconcile observed about a `Clair`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClairSnapshot {
    pub generation: i64,
    /// The generated config with the user's drop-ins.
    pub config: ConfigObservation,
    /// The databases of all services.
    pub database: DatabaseObservation,
    /// The indexer, matcher and notifier, in [`ServiceKind::VARIANTS`] order.
    pub children: [ChildObservation; 3],
    /// Whether the connection pools fit the engines. A warning only: it does not move
    /// the phase.
    pub connections: Budget,
    /// The routing object. Reported only: it does not move the phase.
    pub routing: RoutingObservation,
    /// A move to a new Clair version, when one is under way.
    pub upgrade: UpgradeObservation,
    /// Who runs the updaters and how their runs went. Reported only: it does not move the
    /// phase.
    pub updaters: super::updaters::UpdatersObservation,
    /// Whether the notifier's notifications are delivered. Reported only: it does not move
    /// the phase.
    pub deliveries: super::notifications::DeliveriesObservation,
}

/// The steps of a move from one Clair version to another: `clairctl admin pre` (a Job)
/// before the services roll, the roll, then `clairctl admin post` once they are Available.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpgradeObservation {
    /// No version change (or versions that cannot be read from the image tags).
    None,
    /// The pre-upgrade Job is created or running; the services keep the old version.
    Preparing {
        from: String,
        to: String,
        job: String,
    },
    /// The pre step is done; the services roll to the new version.
    Rolling { from: String, to: String },
    /// Every service runs the new version; the post-upgrade Job is created or running.
    Finishing {
        from: String,
        to: String,
        job: String,
    },
    /// A step's Job failed; the roll is stopped.
    Failed {
        from: String,
        to: String,
        job: String,
    },
}

/// The routing object, as applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoutingObservation {
    /// No routing in the spec (or `kind: None`).
    Disabled,
    /// Applied: `what` is `Ingress clair`, `url` what clients use.
    Applied { what: String, url: String },
    /// The kind asked for is not served by the cluster.
    Unsupported { message: String },
}

/// The classes of observation, in priority order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::VariantArray)]
pub enum ClairClass {
    ConfigMissing,
    ConfigInvalid,
    DatabaseUnreachable,
    UpgradeFailed,
    UpgradePreparing,
    ServicesAbsent,
    ServiceDegraded,
    UpgradeRolling,
    UpgradeFinishing,
    ServicesDeploying,
    ServicesScaling,
    AllAvailable,
}

#[rustfmt::skip]
impl ObservationClass for ClairClass {
    const PHASES: &'static [Phase] = Phase::VARIANTS;

    const TABLE: &'static [(Self, &'static [Phase])] = &[
        //                                 from: Pending       ConfigValid    DatabaseReady  Deploying  Available  Scaling    Upgrading  Degraded
        (ClairClass::ConfigMissing,       &[Pending,       Pending,       Pending,       Degraded,  Degraded,  Degraded,  Degraded,  Degraded]),
        (ClairClass::ConfigInvalid,       &[Pending,       Pending,       Pending,       Degraded,  Degraded,  Degraded,  Degraded,  Degraded]),
        (ClairClass::DatabaseUnreachable, &[ConfigValid,   ConfigValid,   ConfigValid,   Degraded,  Degraded,  Degraded,  Degraded,  Degraded]),
        (ClairClass::UpgradeFailed,       &[Degraded,      Degraded,      Degraded,      Degraded,  Degraded,  Degraded,  Degraded,  Degraded]),
        (ClairClass::UpgradePreparing,    &[Upgrading,     Upgrading,     Upgrading,     Upgrading, Upgrading, Upgrading, Upgrading, Upgrading]),
        (ClairClass::ServicesAbsent,      &[DatabaseReady, DatabaseReady, DatabaseReady, Deploying, Degraded,  Degraded,  Degraded,  Degraded]),
        (ClairClass::ServiceDegraded,     &[Degraded,      Degraded,      Degraded,      Degraded,  Degraded,  Degraded,  Degraded,  Degraded]),
        (ClairClass::UpgradeRolling,      &[Upgrading,     Upgrading,     Upgrading,     Upgrading, Upgrading, Upgrading, Upgrading, Upgrading]),
        (ClairClass::UpgradeFinishing,    &[Upgrading,     Upgrading,     Upgrading,     Upgrading, Upgrading, Upgrading, Upgrading, Upgrading]),
        (ClairClass::ServicesDeploying,   &[Deploying,     Deploying,     Deploying,     Deploying, Deploying, Deploying, Deploying, Deploying]),
        (ClairClass::ServicesScaling,     &[Deploying,     Deploying,     Deploying,     Deploying, Scaling,   Scaling,   Scaling,   Scaling]),
        (ClairClass::AllAvailable,        &[Available,     Available,     Available,     Available, Available, Available, Available, Available]),
    ];
}

fn child_phase(child: &ChildObservation) -> Option<Phase> {
    match child {
        ChildObservation::Present { phase, .. } => Some(phase.unwrap_or(Pending)),
        _ => None,
    }
}

/// The class of a snapshot.
pub fn classify(snapshot: &ClairSnapshot) -> ClairClass {
    let phases: Vec<Phase> = snapshot.children.iter().filter_map(child_phase).collect();
    let any = |wanted: &[Phase]| phases.iter().any(|p| wanted.contains(p));
    match (&snapshot.config, &snapshot.database) {
        (ConfigObservation::Missing { .. }, _) => ClairClass::ConfigMissing,
        (ConfigObservation::Invalid { .. }, _) => ClairClass::ConfigInvalid,
        (_, DatabaseObservation::Unreachable { .. }) => ClairClass::DatabaseUnreachable,
        _ if matches!(snapshot.upgrade, UpgradeObservation::Failed { .. }) => {
            ClairClass::UpgradeFailed
        }
        _ if matches!(snapshot.upgrade, UpgradeObservation::Preparing { .. }) => {
            ClairClass::UpgradePreparing
        }
        _ if snapshot.children.contains(&ChildObservation::Absent) => ClairClass::ServicesAbsent,
        _ if any(&[Degraded]) => ClairClass::ServiceDegraded,
        _ if matches!(snapshot.upgrade, UpgradeObservation::Rolling { .. }) => {
            ClairClass::UpgradeRolling
        }
        _ if matches!(snapshot.upgrade, UpgradeObservation::Finishing { .. }) => {
            ClairClass::UpgradeFinishing
        }
        _ if any(&[Pending, ConfigValid, DatabaseReady, Deploying]) => {
            ClairClass::ServicesDeploying
        }
        _ if any(&[Scaling]) => ClairClass::ServicesScaling,
        _ => ClairClass::AllAvailable,
    }
}

/// Decides what follows from `snapshot`, for a `Clair` last in `phase` with `previous`
/// conditions, at `now`.
pub fn decide(
    phase: Option<Phase>,
    previous: &[Condition],
    snapshot: &ClairSnapshot,
    now: &Time,
) -> Decision {
    let from = phase.unwrap_or(Pending);
    let class = classify(snapshot);
    let to = next(from, class);
    let mut wanted = conditions(to, class, snapshot);
    wanted.push(super::updaters::condition(&snapshot.updaters, now));
    wanted.extend(super::notifications::condition(&snapshot.deliveries));
    let held_back = matches!(
        class,
        ClairClass::ConfigMissing | ClairClass::ConfigInvalid | ClairClass::DatabaseUnreachable
    );
    // A failed or unfinished pre-upgrade step holds the services at the version they run.
    let apply = match class {
        ClairClass::UpgradeFailed | ClairClass::UpgradePreparing => ApplyPlan::KeepWorkload,
        _ => ApplyPlan::after(held_back, to),
    };
    conclude(from, to, apply, &wanted, previous, snapshot.generation, now)
}

/// What happens to one service resource of a `Clair`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildAction {
    /// Applied as the spec says.
    Apply,
    /// Left as it runs.
    Leave,
    /// Deleted: switched off in the spec.
    Remove,
}

/// What to do about the upgrade steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpgradeAction {
    /// Nothing: no step to start, no Job to clean up.
    None,
    /// Create the Job of `step` for `version`.
    Start { step: UpgradeStep, version: String },
    /// The move is complete: delete its Jobs.
    CleanUp,
}

/// Which version `status.version` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportedVersion {
    /// The one the services ran so far.
    Running,
    /// The one of the spec's image.
    Desired,
}

/// Everything a `Clair` decision lets the controller do, beyond the phase and conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClairActions {
    /// Roll the generated config, the indexer, the matcher and the updaters to the spec;
    /// otherwise they are left as they run.
    pub roll: bool,
    pub indexer: ChildAction,
    pub matcher: ChildAction,
    pub notifier: ChildAction,
    /// Apply the routing objects (and delete those of other kinds).
    pub routing: bool,
    pub upgrade: UpgradeAction,
    pub version: ReportedVersion,
}

impl ClairActions {
    pub fn child(&self, kind: ServiceKind) -> ChildAction {
        match kind {
            ServiceKind::Indexer => self.indexer,
            ServiceKind::Matcher => self.matcher,
            ServiceKind::Notifier => self.notifier,
        }
    }
}

/// What `decision` (taken on `snapshot`) lets the controller do, with `upgrade` as assessed.
pub fn actions(decision: &Decision, snapshot: &ClairSnapshot, upgrade: &Upgrade) -> ClairActions {
    let roll = decision.apply == ApplyPlan::Everything;
    let service = if roll {
        ChildAction::Apply
    } else {
        ChildAction::Leave
    };
    // Switching the notifier off is honoured whatever else is wrong, once anything may be
    // written at all.
    let notifier_disabled = snapshot.children[2] == ChildObservation::Disabled;
    let notifier = match (decision.apply, notifier_disabled) {
        (ApplyPlan::Nothing, _) => ChildAction::Leave,
        (_, true) => ChildAction::Remove,
        _ => service,
    };
    let upgrade_action = match (&upgrade.start, &snapshot.upgrade) {
        _ if upgrade.completed => UpgradeAction::CleanUp,
        (
            Some(step),
            UpgradeObservation::Preparing { to, .. } | UpgradeObservation::Finishing { to, .. },
        ) if decision.phase == Upgrading => UpgradeAction::Start {
            step: *step,
            version: to.clone(),
        },
        _ => UpgradeAction::None,
    };
    // The services run the new version once the post step is done, or whenever they are
    // rolled with no upgrade under way.
    let version = if upgrade.completed || (snapshot.upgrade == UpgradeObservation::None && roll) {
        ReportedVersion::Desired
    } else {
        ReportedVersion::Running
    };
    ClairActions {
        roll,
        indexer: service,
        matcher: service,
        notifier,
        routing: decision.apply != ApplyPlan::Nothing,
        upgrade: upgrade_action,
        version,
    }
}

fn child_condition(role: ServiceKind, child: &ChildObservation) -> ConditionSpec {
    let service = role.as_str();
    let t = service_condition(role);
    match child {
        ChildObservation::Disabled => ConditionSpec::new(
            t,
            Status::True,
            Reason::ServiceDisabled,
            format!("the {service} is disabled in the spec"),
        ),
        ChildObservation::Absent => ConditionSpec::new(
            t,
            Status::False,
            Reason::ServiceMissing,
            format!("the {service} resource does not exist yet"),
        ),
        ChildObservation::Present { name, phase } => {
            let phase = phase.unwrap_or(Pending);
            match phase {
                Available | Scaling => ConditionSpec::new(
                    t,
                    Status::True,
                    Reason::AllReplicasReady,
                    format!("{service} {name} is {phase}"),
                ),
                Degraded => ConditionSpec::new(
                    t,
                    Status::False,
                    Reason::ServiceDegraded,
                    format!("{service} {name} is Degraded: kubectl describe {service} {name}"),
                ),
                _ => ConditionSpec::new(
                    t,
                    Status::False,
                    Reason::ServiceNotReady,
                    format!("{service} {name} is {phase}"),
                ),
            }
        }
    }
}

fn conditions(phase: Phase, class: ClairClass, s: &ClairSnapshot) -> Vec<ConditionSpec> {
    let config = config_condition("Clair", &s.config);
    let database = database_condition("Clair", &s.database);
    let children: Vec<ConditionSpec> = ServiceKind::VARIANTS
        .iter()
        .zip(&s.children)
        .map(|(role, child)| child_condition(*role, child))
        .collect();
    // The first service that holds the deployment back, for the summary conditions.
    let holding = children.iter().find(|c| c.status == Status::False);
    let holding_message = holding.map_or("every service is available", |c| strip_link(&c.message));

    let upgrade = upgrade_condition(&s.upgrade);
    let progressing = if class == ClairClass::ServicesDeploying {
        ConditionSpec::new(
            T::Progressing,
            Status::True,
            Reason::RolloutInProgress,
            holding_message,
        )
    } else if matches!(
        class,
        ClairClass::UpgradePreparing | ClairClass::UpgradeRolling | ClairClass::UpgradeFinishing
    ) {
        ConditionSpec::new(
            T::Progressing,
            Status::True,
            upgrade.reason,
            strip_link(&upgrade.message),
        )
    } else {
        ConditionSpec::new(
            T::Progressing,
            Status::False,
            Reason::RolloutComplete,
            "no service is rolling out",
        )
    };
    let scaling = if phase == Scaling {
        let scaling_children: Vec<String> = s
            .children
            .iter()
            .filter_map(|c| match c {
                ChildObservation::Present {
                    name,
                    phase: Some(Scaling),
                } => Some(name.clone()),
                _ => None,
            })
            .collect();
        ConditionSpec::new(
            T::Scaling,
            Status::True,
            Reason::ReplicasChanging,
            format!("scaling: {}", scaling_children.join(", ")),
        )
    } else {
        ConditionSpec::new(
            T::Scaling,
            Status::False,
            Reason::ReplicasStable,
            "no service is scaling",
        )
    };
    let (blocking, blocking_message) = match class {
        ClairClass::ConfigMissing | ClairClass::ConfigInvalid => {
            (config.reason, strip_link(&config.message).to_string())
        }
        ClairClass::DatabaseUnreachable => {
            (database.reason, strip_link(&database.message).to_string())
        }
        ClairClass::ServicesAbsent => (
            if phase == Degraded {
                Reason::ServiceMissing
            } else {
                Reason::NotDeployed
            },
            holding_message.to_string(),
        ),
        ClairClass::ServiceDegraded => (Reason::ServiceDegraded, holding_message.to_string()),
        ClairClass::UpgradeFailed
        | ClairClass::UpgradePreparing
        | ClairClass::UpgradeRolling
        | ClairClass::UpgradeFinishing => {
            (upgrade.reason, strip_link(&upgrade.message).to_string())
        }
        ClairClass::ServicesDeploying => (Reason::ServiceNotReady, holding_message.to_string()),
        ClairClass::ServicesScaling => (
            Reason::ReplicasChanging,
            strip_link(&scaling.message).to_string(),
        ),
        ClairClass::AllAvailable => (
            Reason::ServicesAvailable,
            "every service is available".to_string(),
        ),
    };
    let degraded = if phase == Degraded {
        ConditionSpec::new(
            T::Degraded,
            Status::True,
            blocking,
            blocking_message.clone(),
        )
    } else {
        not_degraded()
    };
    let ready = match phase {
        Available => ConditionSpec::new(
            T::Ready,
            Status::True,
            Reason::ServicesAvailable,
            blocking_message,
        ),
        Scaling => ConditionSpec::new(
            T::Ready,
            Status::True,
            Reason::ReplicasChanging,
            blocking_message,
        ),
        // The services serve on throughout: the old version until each pod rolls.
        Upgrading => ConditionSpec::new(T::Ready, Status::True, blocking, blocking_message),
        Degraded => ConditionSpec::new(T::Ready, Status::False, blocking, blocking_message),
        // What holds it back, linked to the runbook of the phase it is in.
        _ => ConditionSpec::new(
            T::Ready,
            Status::False,
            reason_in(phase, blocking),
            blocking_message,
        ),
    };
    let mut all = vec![ready, config, database, progressing, scaling, degraded];
    all.extend(children);
    all.push(connections_condition(&s.connections));
    all.push(routing_condition(&s.routing));
    all.push(upgrade);
    all
}

fn upgrade_condition(upgrade: &UpgradeObservation) -> ConditionSpec {
    match upgrade {
        UpgradeObservation::None => ConditionSpec::new(
            T::Upgrading,
            Status::False,
            Reason::NoUpgrade,
            "the services run the Clair version of the image",
        ),
        UpgradeObservation::Preparing { from, to, job } => ConditionSpec::new(
            T::Upgrading,
            Status::True,
            Reason::UpgradePreparing,
            format!(
                "{from} → {to}: clairctl admin pre {to} (Job {job}); the services keep {from} until it completes"
            ),
        ),
        UpgradeObservation::Rolling { from, to } => ConditionSpec::new(
            T::Upgrading,
            Status::True,
            Reason::UpgradeRolling,
            format!("{from} → {to}: the services roll to {to}"),
        ),
        UpgradeObservation::Finishing { from, to, job } => ConditionSpec::new(
            T::Upgrading,
            Status::True,
            Reason::UpgradeFinishing,
            format!("{from} → {to}: clairctl admin post {to} (Job {job})"),
        ),
        UpgradeObservation::Failed { from, to, job } => ConditionSpec::new(
            T::Upgrading,
            Status::False,
            Reason::UpgradeFailed,
            format!(
                "{from} → {to}: Job {job} failed and the roll is stopped: kubectl logs job/{job}"
            ),
        ),
    }
}

fn connections_condition(budget: &Budget) -> ConditionSpec {
    match budget {
        Budget::Fits { message } => ConditionSpec::new(
            T::ConnectionsFit,
            Status::True,
            Reason::ConnectionsWithinLimit,
            message.clone(),
        ),
        Budget::Exceeds { message } => ConditionSpec::new(
            T::ConnectionsFit,
            Status::False,
            Reason::ConnectionsExceedLimit,
            message.clone(),
        ),
        Budget::Unknown { message } => ConditionSpec::new(
            T::ConnectionsFit,
            Status::Unknown,
            Reason::ConnectionsUnknown,
            message.clone(),
        ),
    }
}

fn routing_condition(routing: &RoutingObservation) -> ConditionSpec {
    match routing {
        RoutingObservation::Disabled => ConditionSpec::new(
            T::RoutingReady,
            Status::True,
            Reason::RoutingDisabled,
            "no routing is asked for: clients reach the services inside the cluster",
        ),
        RoutingObservation::Applied { what, url } => ConditionSpec::new(
            T::RoutingReady,
            Status::True,
            Reason::RoutingApplied,
            format!("{what} routes {url} to the services"),
        ),
        RoutingObservation::Unsupported { message } => ConditionSpec::new(
            T::RoutingReady,
            Status::False,
            Reason::RoutingUnsupported,
            message.clone(),
        ),
    }
}
