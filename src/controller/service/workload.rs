//! What a service's phase is decided from of its Deployment, and nothing more: generation
//! and observed generation, the replica counts, the `Progressing` condition, the config and
//! template hashes the operator put on it. The service controllers keep this per Deployment
//! from the watch that triggers them (`owned`, about 200 bytes each) instead of reading the
//! whole object (about 4 KiB, with the pod template the phase needs only a hash of) at
//! every reconcile.

use k8s_openapi::api::apps::v1::Deployment;
use serde_json::Value;

use crate::controller::apply;
use crate::machine::service::{Replicas, Rollout, Workload};
use crate::render::service::{CONFIG_HASH, TEMPLATE_HASH, min_available};

/// A Deployment as a service's reconcile judges it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeploymentState {
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// `spec.replicas` (an autoscaler writes it).
    pub spec_replicas: Option<i32>,
    pub replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
    pub progressing: Option<Progressing>,
    /// The config hash its pod template carries.
    pub config_hash: Option<String>,
    /// The hash of the pod template the operator applied (its `TEMPLATE_HASH` annotation).
    pub template_hash: Option<String>,
    /// The pod template itself, only when read live: compared in full then (the hash says
    /// what the operator applied, the template what runs).
    pub template: Option<Value>,
}

/// The Deployment's `Progressing` condition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progressing {
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// Deployment condition reasons that mean a rollout is under way (the deployment
/// controller leaves `NewReplicaSetAvailable` in place while only the replica count moves).
const ROLLING: &[&str] = &[
    "ReplicaSetUpdated",
    "NewReplicaSetCreated",
    "FoundNewReplicaSet",
];

impl DeploymentState {
    /// What `deployment` shows, as its watch brought it (the template left out).
    pub fn of(deployment: &Deployment) -> Self {
        let spec = deployment.spec.as_ref();
        let status = deployment.status.as_ref();
        let template_meta = spec.and_then(|s| s.template.metadata.as_ref());
        DeploymentState {
            generation: deployment.metadata.generation,
            observed_generation: status.and_then(|s| s.observed_generation),
            spec_replicas: spec.and_then(|s| s.replicas),
            replicas: status.and_then(|s| s.replicas),
            ready_replicas: status.and_then(|s| s.ready_replicas),
            progressing: status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Progressing"))
                .map(|c| Progressing {
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                }),
            config_hash: template_meta
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get(CONFIG_HASH))
                .cloned(),
            template_hash: deployment
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(TEMPLATE_HASH))
                .cloned(),
            template: None,
        }
    }

    /// As [`Self::of`], for a Deployment read live: with its pod template.
    pub fn read(deployment: &Deployment) -> Self {
        let mut state = Self::of(deployment);
        state.template = deployment
            .spec
            .as_ref()
            .and_then(|s| serde_json::to_value(&s.template).ok());
        state
    }

    /// Whether a reconcile can judge from this without the object: it carries the template
    /// hash (every Deployment this operator wrote since the hash was added does) or the
    /// template.
    pub fn judgeable(&self) -> bool {
        self.template_hash.is_some() || self.template.is_some()
    }

    /// Its status describes an older spec: the deployment controller has not caught up.
    pub fn is_stale(&self) -> bool {
        self.observed_generation < self.generation
    }

    /// Whether the pod template differs from the one `desired` carries: a rollout starts
    /// with this reconcile's apply. From the template where it was read, else from the
    /// hash of what the operator applied.
    pub fn template_differs(&self, desired: &Deployment) -> bool {
        match (&self.template, &self.template_hash) {
            (Some(running), _) => {
                let template = serde_json::to_value(desired.spec.as_ref().map(|s| &s.template))
                    .unwrap_or_default();
                !apply::contains(running, &template)
            }
            (None, Some(running)) => Some(running) != template_hash(desired),
            (None, None) => true,
        }
    }

    /// Whether only a read can settle [`Self::template_differs`]: the hashes differ and
    /// the template was not read. Another hash need not be another template as the
    /// apiserver keeps it (a default the operator now spells out, after an upgrade).
    pub fn template_unconfirmed(&self, desired: &Deployment) -> bool {
        self.template.is_none() && self.template_differs(desired)
    }
}

fn template_hash(deployment: &Deployment) -> Option<&String> {
    deployment
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_HASH))
}

/// The Deployment's ready pods.
pub fn ready_replicas(deployment: Option<&DeploymentState>) -> i32 {
    deployment.and_then(|d| d.ready_replicas).unwrap_or(0)
}

/// The workload as its Deployment reports it. `autoscaled`: the replica count belongs to a
/// HorizontalPodAutoscaler, which writes it into the Deployment. `previous_ready`: ready
/// pods at the last observation. `template_pending`: the desired pod template differs from
/// the running one, so a rollout starts with this reconcile's apply.
pub fn workload(
    deployment: Option<&DeploymentState>,
    spec_replicas: i32,
    autoscaled: bool,
    previous_ready: i32,
    template_pending: bool,
) -> Workload {
    let Some(deployment) = deployment else {
        return Workload::Absent;
    };
    let rollout = match &deployment.progressing {
        Some(c) if c.reason.as_deref() == Some("ProgressDeadlineExceeded") => {
            Rollout::DeadlineExceeded {
                message: c.message.clone().unwrap_or_default(),
            }
        }
        Some(c)
            if c.status == "True" && c.reason.as_deref().is_some_and(|r| ROLLING.contains(&r)) =>
        {
            Rollout::Progressing
        }
        _ if template_pending => Rollout::Progressing,
        _ => Rollout::Complete,
    };
    let autoscaler = autoscaled.then_some(deployment.spec_replicas).flatten();
    let mut replicas = Replicas {
        spec: spec_replicas,
        autoscaler,
        current: deployment.replicas.unwrap_or(0),
        ready: deployment.ready_replicas.unwrap_or(0),
        min_available: 0,
        previous_ready,
    };
    replicas.min_available = min_available(replicas.wanted());
    Workload::Present { rollout, replicas }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(reason: &str, status: &str) -> DeploymentState {
        DeploymentState::of(
            &serde_json::from_value(json!({
                "metadata": {"name": "d", "generation": 2},
                "spec": {"replicas": 3, "selector": {}, "template": {}},
                "status": {
                    "observedGeneration": 2, "replicas": 3, "readyReplicas": 2,
                    "conditions": [{"type": "Progressing", "status": status, "reason": reason}]
                }
            }))
            .expect("deployment"),
        )
    }

    fn rollout(workload: Workload) -> Rollout {
        match workload {
            Workload::Present { rollout, .. } => rollout,
            Workload::Absent => panic!("absent"),
        }
    }

    #[test]
    fn the_deployment_conditions_say_how_the_rollout_goes() {
        let d = deployment("ProgressDeadlineExceeded", "False");
        assert!(matches!(
            rollout(workload(Some(&d), 3, false, 3, false)),
            Rollout::DeadlineExceeded { .. }
        ));
        let d = deployment("ReplicaSetUpdated", "True");
        assert_eq!(
            rollout(workload(Some(&d), 3, false, 3, false)),
            Rollout::Progressing
        );
        // Scaling alone leaves NewReplicaSetAvailable in place: not a rollout...
        let d = deployment("NewReplicaSetAvailable", "True");
        assert_eq!(
            rollout(workload(Some(&d), 5, false, 3, false)),
            Rollout::Complete
        );
        // ...unless the pod template is about to change.
        assert_eq!(
            rollout(workload(Some(&d), 3, false, 3, true)),
            Rollout::Progressing
        );
        assert_eq!(workload(None, 3, false, 0, false), Workload::Absent);
    }

    #[test]
    fn an_autoscaled_count_comes_from_the_deployment() {
        let d = deployment("NewReplicaSetAvailable", "True");
        let Workload::Present { replicas, .. } = workload(Some(&d), 1, true, 2, false) else {
            panic!("absent")
        };
        assert_eq!(
            (replicas.wanted(), replicas.ready, replicas.min_available),
            (3, 2, 2)
        );
        assert_eq!(replicas.previous_ready, 2);
    }

    fn with_template(annotations: Value, template: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "generation": 1, "annotations": annotations},
            "spec": {"selector": {}, "template": template},
        }))
        .expect("deployment")
    }

    #[test]
    fn a_template_is_judged_by_its_hash_or_read_in_full_without_one() {
        let desired = with_template(
            json!({TEMPLATE_HASH: "t2"}),
            json!({"spec": {"containers": [{"name": "clair", "image": "b"}]}}),
        );
        // From the watch: the hash decides.
        let watched = DeploymentState::of(&with_template(json!({TEMPLATE_HASH: "t1"}), json!({})));
        assert!(watched.judgeable() && watched.template.is_none());
        assert!(watched.template_differs(&desired));
        assert!(watched.template_unconfirmed(&desired));
        let same = DeploymentState::of(&with_template(json!({TEMPLATE_HASH: "t2"}), json!({})));
        assert!(!same.template_differs(&desired) && !same.template_unconfirmed(&desired));
        // Read live, the template decides, whatever the hash: someone else's image under the
        // operator's hash is a difference.
        let fought = with_template(
            json!({TEMPLATE_HASH: "t2"}),
            json!({"spec": {"containers": [{"name": "clair", "image": "theirs"}]}}),
        );
        let read = DeploymentState::read(&fought);
        assert!(read.template_differs(&desired) && !read.template_unconfirmed(&desired));
        // An older operator's Deployment has no hash: from the watch it cannot be judged,
        // read live it is compared in full (the apiserver's defaults are extra, not a change).
        let old = with_template(
            json!({}),
            json!({"spec": {"containers": [{"name": "clair", "image": "b",
                "terminationMessagePath": "/dev/termination-log"}]}}),
        );
        assert!(!DeploymentState::of(&old).judgeable());
        let read = DeploymentState::read(&old);
        assert!(read.judgeable());
        assert!(!read.template_differs(&desired));
        let older = with_template(
            json!({}),
            json!({"spec": {"containers": [{"name": "clair", "image": "a"}]}}),
        );
        assert!(DeploymentState::read(&older).template_differs(&desired));
    }
}
