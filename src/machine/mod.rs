//! The phase state machines: one for the service kinds (`Indexer`, `Matcher`, `Notifier`)
//! and one for `Clair`. Pure: a reconcile observes the cluster into a snapshot, classifies
//! it, looks the next phase up from `status.phase` in the family's table and reads the
//! [`Decision`]: the new phase, what to apply, the full set of conditions, and the Event to
//! emit on a transition; for a `Clair` also [`clair::actions`] (each service resource, the
//! upgrade step, the reported version). The machine is the only place these are decided.

pub mod clair;
pub mod conditions;
pub mod diagram;
pub mod notifications;
pub mod observation;
pub mod service;
pub mod table;
pub mod updaters;
pub mod upgrade;

#[cfg(test)]
mod tests;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::Phase;
use conditions::{ConditionSpec, merge};
pub use conditions::{ConditionType, Reason};

/// What follows from one observation.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The phase after this observation.
    pub phase: Phase,
    /// `(from, to)` when the phase changed.
    pub transition: Option<(Phase, Phase)>,
    /// What the controller may write.
    pub apply: ApplyPlan,
    /// Every condition of the kind, in a fixed order, merged with the previous ones so that
    /// `lastTransitionTime` moves only when a status changes.
    pub conditions: Vec<Condition>,
    /// The Event to record on the resource, on a transition.
    pub event: Option<EventSpec>,
}

impl Decision {
    /// When the resource entered the decided phase: now on a transition (or the first
    /// decision), else when it entered it before.
    pub fn phase_since(&self, before: Option<&Time>, now: &Time) -> Time {
        match before {
            Some(since) if self.transition.is_none() => since.clone(),
            _ => now.clone(),
        }
    }
}

/// Which owned objects the controller applies after this decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyPlan {
    /// Nothing yet: the config or the database is not there, and nothing runs.
    Nothing,
    /// Leave the workload as it runs (its last good config keeps serving); keep the
    /// supporting objects (Service, autoscaler, disruption budget, monitoring) current.
    KeepWorkload,
    /// Apply every desired object, rolling the workload to the current config.
    Everything,
}

impl ApplyPlan {
    /// The plan for a move to `to`. `held_back`: the config or the database is not usable,
    /// so nothing new may roll; a running workload (now Degraded) keeps what it has, and
    /// one that never ran is not started.
    fn after(held_back: bool, to: Phase) -> Self {
        match (held_back, to) {
            (false, _) => ApplyPlan::Everything,
            (true, Phase::Degraded) => ApplyPlan::KeepWorkload,
            (true, _) => ApplyPlan::Nothing,
        }
    }
}

/// A Kubernetes Event about a transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// `Warning` when entering `Degraded`, otherwise `Normal`.
    pub warning: bool,
    /// CamelCase: the reason of the observation that caused the transition.
    pub reason: Reason,
    /// `Pending → ConfigValid: ...`.
    pub note: String,
}

/// The decision for a move from `from` to `to` with the `wanted` conditions: merged with the
/// `previous` ones, and an Event when the phase changed.
fn conclude(
    from: Phase,
    to: Phase,
    apply: ApplyPlan,
    wanted: &[ConditionSpec],
    previous: &[Condition],
    generation: i64,
    now: &Time,
) -> Decision {
    let event = (to != from).then(|| {
        // The condition that best explains the new phase: Degraded's when degraded,
        // Ready's otherwise.
        let explaining = if to == Phase::Degraded {
            ConditionType::Degraded
        } else {
            ConditionType::Ready
        };
        let cause = wanted.iter().find(|c| c.type_ == explaining);
        EventSpec {
            warning: to == Phase::Degraded,
            reason: cause.map_or(Reason::Waiting, |c| c.reason),
            note: format!(
                "{from} → {to}: {}",
                cause.map_or("", |c| observation::strip_link(&c.message))
            ),
        }
    });
    Decision {
        phase: to,
        transition: (to != from).then_some((from, to)),
        apply,
        conditions: merge(previous, wanted, generation, now),
        event,
    }
}
