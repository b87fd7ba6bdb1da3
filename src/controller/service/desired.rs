//! Pure: every object a service resource should own after its decision.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::observe::Observed;
use crate::api::labels;
use crate::api::{Phase, ServiceStatus};
use crate::machine::service::{ServiceSnapshot, Workload};
use crate::machine::{ApplyPlan, Decision};
use crate::render::autoscaling::{autoscaler, scaled_object};
use crate::render::owned::{Owned, ServiceObjects};
use crate::render::service::{
    ServiceInput, config_secret, disruption_budget, service, service_monitor, snapshot_name, url,
};

/// The config hash the pods run after this reconcile: the new one when the workload rolls,
/// else the one of the running pod template.
pub fn config_hash(
    decision: &Decision,
    observed: &Observed,
    running: Option<String>,
) -> Option<String> {
    match (&decision.apply, &observed.snapshot) {
        (ApplyPlan::Everything, Some(snapshot)) => Some(snapshot.hash.clone()),
        _ => running,
    }
}

/// The objects of `input` as `decision` allows them. `deployment`: the Deployment with
/// the current config, when the config is valid. `config_hash`: see [`config_hash`].
pub fn objects(
    input: &ServiceInput,
    observed: &Observed,
    deployment: Option<Deployment>,
    decision: &Decision,
    config_hash: Option<&str>,
) -> ServiceObjects {
    let roll = decision.apply == ApplyPlan::Everything;
    let supporting = decision.apply != ApplyPlan::Nothing;
    let (snapshot, deployment) = match (roll, &observed.snapshot, deployment) {
        (true, Some(snapshot), Some(deployment)) => (Some(snapshot), Some(deployment)),
        _ => (None, None),
    };
    // Snapshots are immutable: created once. Older ones go once the service is Available
    // (no pod of an older ReplicaSet can still need one); the running one always stays.
    let mut secrets = match (decision.phase, config_hash) {
        (Phase::Available, Some(hash)) => Owned::exactly().keep(snapshot_name(input.name, hash)),
        _ => Owned::at_least(),
    };
    if let Some(snapshot) = snapshot {
        secrets = secrets.create_once(config_secret(input, snapshot));
    }
    ServiceObjects {
        secrets,
        deployments: Owned::at_least().apply_some(deployment),
        services: supported(supporting, || Owned::exactly().apply(service(input))),
        disruption_budgets: supported(supporting, || {
            Owned::exactly().apply(disruption_budget(input))
        }),
        autoscalers: supported(supporting && !observed.engine_switching, || {
            Owned::exactly().apply_some(autoscaler(input))
        }),
        service_monitors: supported(supporting && observed.service_monitors, || {
            Owned::exactly().apply(service_monitor(input))
        }),
        scaled_objects: supported(supporting && observed.scaled_objects, || {
            Owned::exactly().apply_some(scaled_object(input))
        }),
    }
}

/// The supporting objects (Service, budget, autoscaler, monitor) are kept current unless
/// nothing may be written yet.
fn supported<T: kube::Resource>(wanted: bool, build: impl FnOnce() -> Owned<T>) -> Owned<T> {
    if wanted { build() } else { Owned::at_least() }
}

/// The status after `decision`.
pub fn status(
    input: &ServiceInput,
    snapshot: &ServiceSnapshot,
    decision: &Decision,
    config_hash: Option<String>,
    phase_since: Time,
) -> ServiceStatus {
    let (replicas, ready_replicas) = match &snapshot.workload {
        Workload::Present { replicas, .. } => (replicas.current, replicas.ready),
        Workload::Absent => (0, 0),
    };
    ServiceStatus {
        phase: Some(decision.phase),
        phase_since: Some(phase_since),
        conditions: decision.conditions.clone(),
        observed_generation: Some(snapshot.generation),
        replicas,
        ready_replicas,
        selector: Some(labels::to_selector_string(&labels::selector(
            input.name,
            input.kind.as_str(),
        ))),
        config_hash,
        url: Some(url(input.name, input.namespace)),
    }
}
