//! The machine of the service kinds (`Indexer`, `Matcher`, `Notifier`): what a reconcile
//! observed, its class, the transition table, and the decision that follows.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::conditions::{ConditionSpec, ConditionType as T, Reason, Status};
use super::observation::{
    ConfigObservation, DatabaseObservation, config_condition, database_condition, not_degraded,
    strip_link,
};
use super::table::{ObservationClass, next};
use super::{ApplyPlan, Decision, conclude};
use crate::api::Phase::{self, *};
use crate::api::ServiceKind;

/// The Deployment's rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rollout {
    Progressing,
    Complete,
    /// The Deployment's progress deadline passed.
    DeadlineExceeded {
        message: String,
    },
}

/// Replica counts, from the spec, the autoscaler and the Deployment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replicas {
    /// `spec.replicas` of the resource.
    pub spec: i32,
    /// What the autoscaler wants, when there is one.
    pub autoscaler: Option<i32>,
    /// Pods of the Deployment.
    pub current: i32,
    /// Pods passing their readiness probe.
    pub ready: i32,
    /// The disruption budget's floor: fewer ready pods than this is degraded.
    pub min_available: i32,
    /// Ready pods at the previous observation (the resource's `status.readyReplicas`): a
    /// shortfall after a loss of ready pods is a failure, one while new pods start is not.
    pub previous_ready: i32,
}

impl Replicas {
    /// The count the service should run.
    pub fn wanted(&self) -> i32 {
        self.autoscaler.unwrap_or(self.spec)
    }

    fn moving(&self) -> bool {
        self.current != self.wanted() || self.ready < self.wanted()
    }
}

/// The workload as the controller found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    /// No Deployment (yet, or deleted by someone).
    Absent,
    Present {
        rollout: Rollout,
        replicas: Replicas,
    },
}

/// Everything one reconcile observed about a service resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSnapshot {
    /// `metadata.generation` of the resource.
    pub generation: i64,
    /// Which service, for messages.
    pub kind: ServiceKind,
    pub config: ConfigObservation,
    pub database: DatabaseObservation,
    pub workload: Workload,
}

/// The classes of observation, in priority order: the first that matches wins.
/// `BelowMinimum` is a fresh loss of ready pods under the disruption budget's floor;
/// `ShortOfMinimum` is being under it without a fresh loss (new pods starting after a
/// scale-up, or still short after a loss), which only a Degraded resource stays Degraded on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::VariantArray)]
pub enum ServiceClass {
    ConfigMissing,
    ConfigInvalid,
    DatabaseUnreachable,
    WorkloadAbsent,
    RolloutFailed,
    RolloutProgressing,
    BelowMinimum,
    ShortOfMinimum,
    ReplicasMoving,
    Settled,
}

#[rustfmt::skip]
impl ObservationClass for ServiceClass {
    // Before a workload ever ran (Pending, ConfigValid, DatabaseReady) a problem holds the
    // service back; once it runs, the same problem degrades it and the last good config
    // keeps serving.
    const PHASES: &'static [Phase] = &[
        Pending, ConfigValid, DatabaseReady, Deploying, Available, Scaling, Degraded,
    ];

    const TABLE: &'static [(Self, &'static [Phase])] = &[
        //                                 from: Pending       ConfigValid    DatabaseReady  Deploying      Available  Scaling    Degraded
        (ServiceClass::ConfigMissing,       &[Pending,      Pending,       Pending,       Degraded,      Degraded,  Degraded,  Degraded]),
        (ServiceClass::ConfigInvalid,       &[Pending,      Pending,       Pending,       Degraded,      Degraded,  Degraded,  Degraded]),
        (ServiceClass::DatabaseUnreachable, &[ConfigValid,  ConfigValid,   ConfigValid,   Degraded,      Degraded,  Degraded,  Degraded]),
        (ServiceClass::WorkloadAbsent,      &[DatabaseReady, DatabaseReady, DatabaseReady, Deploying,    Degraded,  Degraded,  Degraded]),
        (ServiceClass::RolloutFailed,       &[Degraded,     Degraded,      Degraded,      Degraded,      Degraded,  Degraded,  Degraded]),
        (ServiceClass::RolloutProgressing,  &[Deploying,    Deploying,     Deploying,     Deploying,     Deploying, Deploying, Deploying]),
        (ServiceClass::BelowMinimum,        &[Degraded,     Degraded,      Degraded,      Degraded,      Degraded,  Degraded,  Degraded]),
        (ServiceClass::ShortOfMinimum,      &[Deploying,    Deploying,     Deploying,     Deploying,     Scaling,   Scaling,   Degraded]),
        (ServiceClass::ReplicasMoving,      &[Deploying,    Deploying,     Deploying,     Deploying,     Scaling,   Scaling,   Scaling]),
        (ServiceClass::Settled,             &[Available,    Available,     Available,     Available,     Available, Available, Available]),
    ];
}

/// The class of a snapshot.
pub fn classify(snapshot: &ServiceSnapshot) -> ServiceClass {
    match (&snapshot.config, &snapshot.database, &snapshot.workload) {
        (ConfigObservation::Missing { .. }, _, _) => ServiceClass::ConfigMissing,
        (ConfigObservation::Invalid { .. }, _, _) => ServiceClass::ConfigInvalid,
        (_, DatabaseObservation::Unreachable { .. }, _) => ServiceClass::DatabaseUnreachable,
        (_, _, Workload::Absent) => ServiceClass::WorkloadAbsent,
        (_, _, Workload::Present { rollout, replicas }) => match rollout {
            Rollout::DeadlineExceeded { .. } => ServiceClass::RolloutFailed,
            Rollout::Progressing => ServiceClass::RolloutProgressing,
            Rollout::Complete if replicas.ready < replicas.min_available => {
                if replicas.ready < replicas.previous_ready {
                    ServiceClass::BelowMinimum
                } else {
                    ServiceClass::ShortOfMinimum
                }
            }
            Rollout::Complete if replicas.moving() => ServiceClass::ReplicasMoving,
            Rollout::Complete => ServiceClass::Settled,
        },
    }
}

/// Decides what follows from `snapshot`, for a resource last in `phase` (`None`: no status
/// yet) with `previous` conditions, at `now`.
pub fn decide(
    phase: Option<Phase>,
    previous: &[Condition],
    snapshot: &ServiceSnapshot,
    now: &Time,
) -> Decision {
    let from = phase.unwrap_or(Pending);
    let class = classify(snapshot);
    let to = next(from, class);
    let wanted = conditions(to, class, snapshot);
    let held_back = matches!(
        class,
        ServiceClass::ConfigMissing
            | ServiceClass::ConfigInvalid
            | ServiceClass::DatabaseUnreachable
    );
    let apply = ApplyPlan::after(held_back, to);
    conclude(from, to, apply, &wanted, previous, snapshot.generation, now)
}

fn conditions(phase: Phase, class: ServiceClass, s: &ServiceSnapshot) -> Vec<ConditionSpec> {
    let mode = s.kind.as_str();
    let config = config_condition(mode, &s.config);
    let database = database_condition(mode, &s.database);
    let (progressing, scaling) = match &s.workload {
        Workload::Absent => (
            ConditionSpec::new(
                T::Progressing,
                Status::False,
                Reason::NotDeployed,
                "no Deployment runs yet",
            ),
            stable("no Deployment runs yet".into()),
        ),
        Workload::Present { rollout, replicas } => {
            let progressing = match rollout {
                Rollout::Progressing => ConditionSpec::new(
                    T::Progressing,
                    Status::True,
                    Reason::RolloutInProgress,
                    "a new revision of the pods is rolling out",
                ),
                Rollout::Complete => ConditionSpec::new(
                    T::Progressing,
                    Status::False,
                    Reason::RolloutComplete,
                    "the latest revision is rolled out",
                ),
                Rollout::DeadlineExceeded { message } => ConditionSpec::new(
                    T::Progressing,
                    Status::False,
                    Reason::ProgressDeadlineExceeded,
                    format!("the rollout stalled: {message}"),
                ),
            };
            let counts = format!(
                "{} of {} wanted pods ready, {} running",
                replicas.ready,
                replicas.wanted(),
                replicas.current
            );
            let scaling = if phase == Scaling {
                ConditionSpec::new(T::Scaling, Status::True, Reason::ReplicasChanging, counts)
            } else {
                stable(counts)
            };
            (progressing, scaling)
        }
    };
    let blocking = blocking_reason(class, phase);
    let degraded = if phase == Degraded {
        let message = match class {
            ServiceClass::ConfigMissing
            | ServiceClass::ConfigInvalid
            | ServiceClass::DatabaseUnreachable => {
                let spec = if class == ServiceClass::DatabaseUnreachable {
                    &database
                } else {
                    &config
                };
                format!(
                    "{}; the running pods are left as they are",
                    strip_link(&spec.message)
                )
            }
            ServiceClass::WorkloadAbsent => "the Deployment is gone; it is being recreated".into(),
            ServiceClass::RolloutFailed => strip_link(&progressing.message).to_string(),
            _ => strip_link(&scaling.message).to_string(),
        };
        ConditionSpec::new(T::Degraded, Status::True, blocking, message)
    } else {
        not_degraded()
    };
    let ready = match phase {
        Available => ConditionSpec::new(
            T::Ready,
            Status::True,
            Reason::AllReplicasReady,
            format!("the {mode} serves: {}", strip_link(&scaling.message)),
        ),
        Scaling => ConditionSpec::new(
            T::Ready,
            Status::True,
            Reason::ReplicasChanging,
            format!(
                "the {mode} serves while scaling: {}",
                strip_link(&scaling.message)
            ),
        ),
        Degraded => ConditionSpec::new(
            T::Ready,
            Status::False,
            blocking,
            strip_link(&degraded.message).to_string(),
        ),
        // What holds it back, linked to the runbook of the phase it is in.
        _ => ConditionSpec::new(
            T::Ready,
            Status::False,
            crate::machine::conditions::reason_in(phase, blocking),
            match class {
                ServiceClass::ConfigMissing | ServiceClass::ConfigInvalid => {
                    strip_link(&config.message).to_string()
                }
                ServiceClass::DatabaseUnreachable => strip_link(&database.message).to_string(),
                _ => format!("the {mode} is {}", waiting_for(class)),
            },
        ),
    };
    vec![ready, config, database, progressing, scaling, degraded]
}

fn stable(message: String) -> ConditionSpec {
    ConditionSpec::new(T::Scaling, Status::False, Reason::ReplicasStable, message)
}

/// The reason on `Degraded` and `Ready` when the class holds the resource back.
fn blocking_reason(class: ServiceClass, phase: Phase) -> Reason {
    match class {
        ServiceClass::ConfigMissing => Reason::ConfigMissing,
        ServiceClass::ConfigInvalid => Reason::ConfigInvalid,
        ServiceClass::DatabaseUnreachable => Reason::DatabaseUnreachable,
        ServiceClass::WorkloadAbsent if phase == Degraded => Reason::WorkloadMissing,
        ServiceClass::WorkloadAbsent => Reason::NotDeployed,
        ServiceClass::RolloutFailed => Reason::ProgressDeadlineExceeded,
        ServiceClass::BelowMinimum => Reason::BelowMinimumAvailable,
        ServiceClass::ShortOfMinimum if phase == Degraded => Reason::BelowMinimumAvailable,
        ServiceClass::ShortOfMinimum => Reason::ReplicasChanging,
        ServiceClass::RolloutProgressing => Reason::RolloutInProgress,
        ServiceClass::ReplicasMoving => Reason::ReplicasChanging,
        ServiceClass::Settled => Reason::AllReplicasReady,
    }
}

fn waiting_for(class: ServiceClass) -> &'static str {
    match class {
        ServiceClass::ConfigMissing => "waiting for its config to exist",
        ServiceClass::ConfigInvalid => "waiting for a valid config",
        ServiceClass::DatabaseUnreachable => "waiting for its database",
        ServiceClass::WorkloadAbsent => "creating its Deployment",
        _ => "waiting for its pods to become ready",
    }
}
