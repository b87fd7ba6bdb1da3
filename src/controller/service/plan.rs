//! Pure: the middle of a service resource's reconcile, from what was observed to the
//! decision, the desired objects and the status. The controller and `clair-operator render`
//! both call [`plan`], so a step added here is in both.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::desired;
use super::observe::{Observed, running_hash};
use crate::api::ServiceStatus;
use crate::machine::Decision;
use crate::machine::service::decide;
use crate::render::owned::ServiceObjects;
use crate::render::service::{ServiceInput, deployment};

/// What one reconcile of a service resource decides and writes.
#[derive(Debug)]
pub struct Plan {
    pub decision: Decision,
    pub objects: ServiceObjects,
    pub status: ServiceStatus,
    /// The Deployment was judged from its watch, and its template hash is not the desired
    /// one: only the template read tells whether the template differs (plan again then).
    pub template_unconfirmed: bool,
}

/// The plan for `input` as observed, at `generation`, after `status` (none before the
/// first reconcile), at `now`.
pub fn plan(
    input: &ServiceInput,
    observed: &Observed,
    generation: i64,
    status: Option<&ServiceStatus>,
    now: &Time,
) -> Plan {
    let rolled = (observed.snapshot.as_ref())
        .map(|s| deployment(input, &s.secret_name(input.name), &s.hash));
    let snapshot = observed.snapshot(input.kind, generation, input.spec, status, rolled.as_ref());
    let previous = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let decision = decide(status.and_then(|s| s.phase), previous, &snapshot, now);
    let since = decision.phase_since(status.and_then(|s| s.phase_since.as_ref()), now);
    let running = running_hash(observed.deployment.as_ref());
    let config_hash = desired::config_hash(&decision, observed, running);
    let template_unconfirmed = match (&rolled, &observed.deployment) {
        (Some(desired), Some(running)) => running.template_unconfirmed(desired),
        _ => false,
    };
    let objects = desired::objects(input, observed, rolled, &decision, config_hash.as_deref());
    let status = desired::status(input, &snapshot, &decision, config_hash, since);
    Plan {
        decision,
        objects,
        status,
        template_unconfirmed,
    }
}
