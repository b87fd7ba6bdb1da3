//! Reads only: the config a service resource references and the state of its Deployment,
//! turned into the observations the machine takes.

use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::Api;

use crate::api::{ConfigSource, ConfigSpec, ServiceKind, ServiceSpec, ServiceStatus};
use crate::clairconfig::{self, Document};
use crate::controller::capabilities::OptionalApi;
use crate::controller::error::ObserveError;
use crate::controller::{Context, apply};
use crate::images;
use crate::machine::observation::{ConfigObservation, DatabaseObservation};
use crate::machine::service::{Replicas, Rollout, ServiceSnapshot, Workload};
use crate::render::service::{ConfigSnapshot, min_available};

/// Everything one reconcile read about a service resource.
pub struct Observed {
    pub config: ConfigObservation,
    /// The validated, merged config, when it is valid.
    pub snapshot: Option<ConfigSnapshot>,
    /// The Deployment, when it exists.
    pub deployment: Option<Deployment>,
    /// Whether the cluster serves ServiceMonitors.
    pub service_monitors: bool,
}

/// Reads the config and the Deployment. `None` while the deployment controller has not
/// caught up with the last change (ours, most likely): its status describes the previous
/// spec, so it is judged once it has.
pub async fn observe(
    context: &Context,
    kind: ServiceKind,
    namespace: &str,
    name: &str,
    spec: &ServiceSpec,
) -> Result<Option<Observed>, ObserveError> {
    let (config, snapshot) = match context.images.refusal(&images::service_images(spec)) {
        Some(refusal) => (ConfigObservation::Invalid { message: refusal }, None),
        None => config(&context.client, namespace, &spec.config, kind).await?,
    };
    let deployment = Api::<Deployment>::namespaced(context.client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(ObserveError::reading(format!("Deployment {name}")))?;
    if deployment.as_ref().is_some_and(status_is_stale) {
        return Ok(None);
    }
    Ok(Some(Observed {
        config,
        snapshot,
        deployment,
        service_monitors: context
            .capabilities
            .serves(OptionalApi::ServiceMonitor)
            .await,
    }))
}

impl Observed {
    /// The running Deployment's replica count.
    pub fn current_replicas(&self) -> Option<i32> {
        self.deployment.as_ref()?.spec.as_ref()?.replicas
    }

    /// What the machine takes. `desired`: the Deployment this reconcile would apply; a pod
    /// template that differs from the running one starts a rollout with this reconcile.
    pub fn snapshot(
        &self,
        kind: ServiceKind,
        generation: i64,
        spec: &ServiceSpec,
        status: Option<&ServiceStatus>,
        desired: Option<&Deployment>,
    ) -> ServiceSnapshot {
        let template_pending = match (desired, &self.deployment) {
            (Some(desired), Some(current)) => !template_contains(current, desired),
            _ => false,
        };
        ServiceSnapshot {
            generation,
            kind,
            config: self.config.clone(),
            database: DatabaseObservation::NotChecked {
                message: format!(
                    "a bare {kind} resource does not check its database; a Clair resource does"
                ),
            },
            workload: workload(
                self.deployment.as_ref(),
                spec.replicas,
                spec.autoscaling.is_some(),
                status.map_or(0, |s| s.ready_replicas),
                template_pending,
            ),
        }
    }
}

/// Reads one config source; `Ok(Err(what))` names what is missing. Every reconcile reads
/// its sources through this, so a failed read names the object.
pub async fn read(
    client: &Client,
    namespace: &str,
    source: &ConfigSource,
) -> Result<Result<Document, String>, ObserveError> {
    crate::sources::read_source(client, namespace, source)
        .await
        .map_err(ObserveError::reading(source.describe()))
}

fn status_is_stale(deployment: &Deployment) -> bool {
    let observed = deployment
        .status
        .as_ref()
        .and_then(|s| s.observed_generation);
    observed < deployment.metadata.generation
}

fn template_contains(current: &Deployment, desired: &Deployment) -> bool {
    let template = |d: &Deployment| {
        serde_json::to_value(d.spec.as_ref().map(|s| &s.template)).unwrap_or_default()
    };
    apply::contains(&template(current), &template(desired))
}

/// The config of a service: missing, invalid (with the field and reason), or valid with
/// the snapshot the pods get.
pub async fn config(
    client: &Client,
    namespace: &str,
    spec: &ConfigSpec,
    mode: ServiceKind,
) -> Result<(ConfigObservation, Option<ConfigSnapshot>), ObserveError> {
    let root = match read(client, namespace, &spec.root).await? {
        Ok(document) => document,
        Err(what) => return Ok((ConfigObservation::Missing { what }, None)),
    };
    let mut dropins = Vec::with_capacity(spec.dropins.len());
    for source in &spec.dropins {
        match read(client, namespace, source).await? {
            Ok(document) => dropins.push(document),
            Err(what) => return Ok((ConfigObservation::Missing { what }, None)),
        }
    }
    Ok(judge(&root, &dropins, mode))
}

/// Merges and validates documents already read.
pub fn judge(
    root: &Document,
    dropins: &[Document],
    mode: ServiceKind,
) -> (ConfigObservation, Option<ConfigSnapshot>) {
    let checked = clairconfig::check(root, dropins, mode);
    let errors = checked.errors();
    match checked.config {
        Some(config) if errors.is_empty() => {
            let hash = clairconfig::hash(&config);
            (
                ConfigObservation::Valid { hash: hash.clone() },
                Some(ConfigSnapshot {
                    hash,
                    json: config.to_string(),
                }),
            )
        }
        _ => (
            ConfigObservation::Invalid {
                message: errors.join("; "),
            },
            None,
        ),
    }
}

/// Deployment condition reasons that mean a rollout is under way (the deployment
/// controller leaves `NewReplicaSetAvailable` in place while only the replica count moves).
const ROLLING: &[&str] = &[
    "ReplicaSetUpdated",
    "NewReplicaSetCreated",
    "FoundNewReplicaSet",
];

/// The workload as its Deployment reports it. `autoscaled`: the replica count belongs to a
/// HorizontalPodAutoscaler, which writes it into the Deployment. `previous_ready`: ready
/// pods at the last observation. `template_pending`: the desired pod template differs from
/// the running one, so a rollout starts with this reconcile's apply.
pub fn workload(
    deployment: Option<&Deployment>,
    spec_replicas: i32,
    autoscaled: bool,
    previous_ready: i32,
    template_pending: bool,
) -> Workload {
    let Some(deployment) = deployment else {
        return Workload::Absent;
    };
    let status = deployment.status.clone().unwrap_or_default();
    let progressing = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Progressing");
    let rollout = match progressing {
        Some(c) if c.reason.as_deref() == Some("ProgressDeadlineExceeded") => {
            Rollout::DeadlineExceeded {
                message: c.message.unwrap_or_default(),
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
    let autoscaler = autoscaled
        .then(|| deployment.spec.as_ref().and_then(|s| s.replicas))
        .flatten();
    let mut replicas = Replicas {
        spec: spec_replicas,
        autoscaler,
        current: status.replicas.unwrap_or(0),
        ready: status.ready_replicas.unwrap_or(0),
        min_available: 0,
        previous_ready,
    };
    replicas.min_available = min_available(replicas.wanted());
    Workload::Present { rollout, replicas }
}

/// The config hash the Deployment's pod template carries, if any.
pub fn running_hash(deployment: Option<&Deployment>) -> Option<String> {
    deployment?
        .spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(crate::render::service::CONFIG_HASH)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(reason: &str, status: &str) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "generation": 2},
            "spec": {"replicas": 3, "selector": {}, "template": {}},
            "status": {
                "observedGeneration": 2, "replicas": 3, "readyReplicas": 2,
                "conditions": [{"type": "Progressing", "status": status, "reason": reason}]
            }
        }))
        .expect("deployment")
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
}
