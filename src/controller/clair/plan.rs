//! Pure: the middle of a `Clair`'s reconcile, from what was observed to the decision, the
//! actions it allows, the desired objects and the status. The controller and
//! `clair-operator render` both call [`plan`], so a step added here is in both.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::desired;
use super::observe::Observed;
use crate::api::ClairStatus;
use crate::machine::Decision;
use crate::machine::clair::{actions, decide};
use crate::render::clair::ClairInput;
use crate::render::owned::ClairObjects;

/// What one reconcile of a `Clair` decides and writes.
#[derive(Debug)]
pub struct Plan {
    pub decision: Decision,
    pub objects: ClairObjects,
    pub status: ClairStatus,
}

/// The plan for `input` as observed, at `generation`, after `status` (none before the
/// first reconcile), at `now`.
pub fn plan(
    input: &ClairInput,
    observed: &Observed,
    generation: i64,
    status: Option<&ClairStatus>,
    now: &Time,
) -> Plan {
    let snapshot = observed.snapshot(input, generation);
    let previous = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let decision = decide(status.and_then(|s| s.phase), previous, &snapshot, now);
    let since = decision.phase_since(status.and_then(|s| s.phase_since.as_ref()), now);
    let actions = actions(&decision, &snapshot, &observed.upgrade);
    let objects = desired::objects(input, observed, &actions);
    let status = desired::status(input, observed, &decision, &actions, generation, since);
    Plan {
        decision,
        objects,
        status,
    }
}
