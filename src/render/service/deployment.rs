//! A service resource's Deployment: Clair in its mode with the config snapshot, restricted
//! pods, probes on the introspection port, a drain before stopping, the scratch volume,
//! resources with a memory limit by default.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EphemeralVolumeSource, HTTPGetAction,
    Lifecycle, LifecycleHandler, PersistentVolumeClaimSpec, PersistentVolumeClaimTemplate, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, SecretVolumeSource, SleepAction, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{
    API_PORT, CLAIR_DRAIN_SECONDS, CONFIG_DIR, CONFIG_FILE, CONFIG_HASH, DEFAULT_SCRATCH,
    INTROSPECTION_PORT, PRE_STOP_SECONDS, ServiceInput, TEMPLATE_HASH, image, metadata,
};
use crate::api::labels;
use crate::api::{ServiceKind, ServiceSpec};
use crate::render::pod::{CLAIR_UID, restricted_container, restricted_pod, with_default_requests};
use crate::render::settings;

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::String("introspection".to_string()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        // The default, 1 s, leaves no slack on a loaded node.
        timeout_seconds: Some(PROBE_TIMEOUT_SECONDS),
        ..Default::default()
    }
}

const PROBE_TIMEOUT_SECONDS: i32 = 5;

/// The memory limit of a Clair container whose resources the spec leaves out. Clair sets
/// GOMEMLIMIT to 95 % of a limit, so its collector works harder before the kernel kills it;
/// without a limit a matcher grows with every report it holds (the load study: about 60 MiB
/// each, with no admission limit), until the node runs short. A matcher gets twice the
/// others': it also imports vulnerability data when its updaters run in it, the largest
/// allocation Clair makes (matchers killed for memory during large imports:
/// stackrox/stackrox#11553, #22149; quay.io runs its matchers with 4 to 8 GiB).
pub fn default_memory_limit(kind: ServiceKind) -> &'static str {
    match kind {
        ServiceKind::Matcher => "4Gi",
        ServiceKind::Indexer | ServiceKind::Notifier => "2Gi",
    }
}

/// The container's resources: the spec's, or small requests and [`default_memory_limit`];
/// either way an `ephemeral-storage` request of the scratch `emptyDir`'s size unless the
/// spec names a request or a limit of it, so that the scheduler counts the disk the pod may fill (a volume of a
/// StorageClass is not node storage: it asks for nothing).
fn clair_resources(input: &ServiceInput) -> ResourceRequirements {
    let spec = input.spec;
    let given = spec.pod.resources.is_some();
    let mut resources = with_default_requests(spec.pod.resources.clone(), "100m", "256Mi");
    if !given {
        resources.limits = Some(BTreeMap::from([(
            "memory".to_string(),
            Quantity(default_memory_limit(input.kind).to_string()),
        )]));
    }
    let (size, class) = scratch_size(spec);
    // A limit of the spec's own stands (the apiserver makes the request equal to it): a
    // larger request beside it would be refused.
    let limited = resources
        .limits
        .as_ref()
        .is_some_and(|l| l.contains_key("ephemeral-storage"));
    if class.is_none() && !limited {
        resources
            .requests
            .get_or_insert_default()
            .entry("ephemeral-storage".to_string())
            .or_insert(size);
    }
    resources
}

/// The scratch volume's size and StorageClass.
fn scratch_size(spec: &ServiceSpec) -> (Quantity, Option<String>) {
    let scratch = spec.pod.scratch.clone().unwrap_or_default();
    let size = scratch
        .size
        .unwrap_or_else(|| Quantity(DEFAULT_SCRATCH.to_string()));
    (size, scratch.storage_class_name)
}

fn scratch_volume(spec: &ServiceSpec) -> Volume {
    let (size, class) = scratch_size(spec);
    match class {
        Some(class) => Volume {
            name: "scratch".to_string(),
            ephemeral: Some(EphemeralVolumeSource {
                volume_claim_template: Some(PersistentVolumeClaimTemplate {
                    metadata: None,
                    spec: PersistentVolumeClaimSpec {
                        access_modes: Some(vec!["ReadWriteOnce".to_string()]),
                        storage_class_name: Some(class),
                        resources: Some(VolumeResourceRequirements {
                            requests: Some(BTreeMap::from([("storage".to_string(), size)])),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                }),
            }),
            ..Default::default()
        },
        None => Volume {
            name: "scratch".to_string(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(size),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

/// The Deployment running `snapshot`'s config. Without autoscaling it carries
/// `spec.replicas`; with it, the replica count the HorizontalPodAutoscaler last set. (Leaving
/// the field out would make server-side apply drop it, resetting the Deployment to one pod
/// until the autoscaler acts again.)
pub fn deployment(input: &ServiceInput, snapshot_secret: &str, config_hash: &str) -> Deployment {
    let spec = input.spec;
    let pod = &spec.pod;
    let env = vec![
        EnvVar {
            name: "CLAIR_MODE".to_string(),
            value: Some(input.kind.to_string()),
            ..Default::default()
        },
        EnvVar {
            name: "CLAIR_CONF".to_string(),
            value: Some(format!("{CONFIG_DIR}/{CONFIG_FILE}")),
            ..Default::default()
        },
        // The root filesystem is read-only: the RPM, dnf and Go-binary scanners spool to
        // the temporary folder, which must be the scratch volume, as unpacked layers are.
        EnvVar {
            name: "TMPDIR".to_string(),
            value: Some("/var/tmp".to_string()),
            ..Default::default()
        },
    ];
    let container = Container {
        name: "clair".to_string(),
        image: Some(image(spec)),
        env: Some(env),
        ports: Some(vec![
            ContainerPort {
                name: Some("api".to_string()),
                container_port: API_PORT,
                protocol: Some("TCP".to_string()),
                ..Default::default()
            },
            ContainerPort {
                name: Some("introspection".to_string()),
                container_port: INTROSPECTION_PORT,
                protocol: Some("TCP".to_string()),
                ..Default::default()
            },
        ]),
        // Migrations can make a first start slow: allow five minutes before liveness counts.
        startup_probe: Some(probe("/readyz", 5, 60)),
        readiness_probe: Some(probe("/readyz", 10, 3)),
        liveness_probe: Some(probe("/healthz", 20, 3)),
        // Scale-in and rolls: the pod leaves the Service's endpoints while it still serves,
        // so requests stop arriving before Clair's own 10 s drain begins.
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: PRE_STOP_SECONDS,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        resources: Some(clair_resources(input)),
        volume_mounts: Some(
            [
                VolumeMount {
                    name: "config".to_string(),
                    mount_path: CONFIG_DIR.to_string(),
                    read_only: Some(true),
                    ..Default::default()
                },
                // Both temporary folders are the scratch volume (one folder, one size
                // limit): TMPDIR names /var/tmp, and code that writes to /tmp itself finds
                // it writable too.
                VolumeMount {
                    name: "scratch".to_string(),
                    mount_path: "/var/tmp".to_string(),
                    ..Default::default()
                },
                VolumeMount {
                    name: "scratch".to_string(),
                    mount_path: "/tmp".to_string(),
                    ..Default::default()
                },
            ]
            .to_vec(),
        ),
        ..restricted_container()
    };
    let selector = labels::selector(input.name, input.kind.as_str());
    let mut own_labels = labels::all(input.name, input.kind.as_str());
    own_labels.extend(selector.clone());
    let mut pod_spec = PodSpec {
        containers: vec![container],
        volumes: Some(vec![
            Volume {
                name: "config".to_string(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(snapshot_secret.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            scratch_volume(spec),
        ]),
        // The pre-stop wait, Clair's drain, and time for the requests it lets finish.
        termination_grace_period_seconds: Some(PRE_STOP_SECONDS + CLAIR_DRAIN_SECONDS + 15),
        ..restricted_pod(input.users, CLAIR_UID)
    };
    settings::apply(&mut pod_spec, pod, &["CLAIR_MODE", "CLAIR_CONF", "TMPDIR"]);
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(settings::labels(pod, own_labels)),
            annotations: settings::annotations(
                pod,
                BTreeMap::from([(CONFIG_HASH.to_string(), config_hash.to_string())]),
            ),
            ..Default::default()
        }),
        spec: Some(pod_spec),
    };
    let mut meta = metadata(input, input.name.to_string());
    meta.annotations = Some(BTreeMap::from([(
        TEMPLATE_HASH.to_string(),
        crate::clairconfig::hash(&serde_json::to_value(&template).unwrap_or_default()),
    )]));
    Deployment {
        metadata: meta,
        spec: Some(DeploymentSpec {
            replicas: match spec.autoscaling {
                None => Some(spec.replicas),
                Some(_) => input.current_replicas,
            },
            selector: LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            },
            template,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::{Autoscaling, ScratchVolume};
    use crate::render::autoscaling::autoscaler;
    use crate::render::service::tests::{input, spec};
    use crate::render::settings::CA_BUNDLE_DIR;

    #[test]
    fn the_deployment_runs_the_mode_with_the_snapshot_and_a_restricted_pod() {
        let spec = spec();
        let d = deployment(&input(&spec), "m-config-abc", "abc");
        let ds = d.spec.as_ref().unwrap();
        assert_eq!(ds.replicas, Some(2));
        let template = &ds.template;
        assert_eq!(
            template
                .metadata
                .as_ref()
                .unwrap()
                .annotations
                .as_ref()
                .unwrap()[CONFIG_HASH],
            "abc"
        );
        let pod = template.spec.as_ref().unwrap();
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some(crate::api::DEFAULT_IMAGE));
        let env: Vec<(String, String)> = c
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        assert!(env.contains(&("CLAIR_MODE".into(), "matcher".into())));
        assert!(env.contains(&("CLAIR_CONF".into(), "/config/config.json".into())));
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(
            (
                sc.allow_privilege_escalation,
                sc.read_only_root_filesystem,
                sc.run_as_non_root
            ),
            (Some(false), Some(true), Some(true))
        );
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        assert_eq!(
            pod.security_context
                .as_ref()
                .unwrap()
                .seccomp_profile
                .as_ref()
                .unwrap()
                .type_,
            "RuntimeDefault"
        );
        assert_eq!(
            c.readiness_probe
                .as_ref()
                .unwrap()
                .http_get
                .as_ref()
                .unwrap()
                .path
                .as_deref(),
            Some("/readyz")
        );
        assert_eq!(
            c.liveness_probe
                .as_ref()
                .unwrap()
                .http_get
                .as_ref()
                .unwrap()
                .path
                .as_deref(),
            Some("/healthz")
        );
        let volumes = pod.volumes.as_ref().unwrap();
        assert_eq!(
            volumes[0].secret.as_ref().unwrap().secret_name.as_deref(),
            Some("m-config-abc")
        );
        assert_eq!(
            volumes[1].empty_dir.as_ref().unwrap().size_limit,
            Some(Quantity("10Gi".into()))
        );
        // The selector is a subset of the template's labels.
        for (k, v) in ds.selector.match_labels.as_ref().unwrap() {
            assert_eq!(
                template
                    .metadata
                    .as_ref()
                    .unwrap()
                    .labels
                    .as_ref()
                    .unwrap()
                    .get(k),
                Some(v)
            );
        }
    }

    #[test]
    fn a_stopping_pod_leaves_the_endpoints_before_clair_drains_and_spools_to_scratch() {
        let spec = spec();
        let deployment = deployment(&input(&spec), "s", "h");
        let pod = deployment.spec.unwrap().template.spec.unwrap();
        let container = &pod.containers[0];
        let wait = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|p| p.sleep.as_ref())
            .map(|s| s.seconds);
        assert_eq!(wait, Some(PRE_STOP_SECONDS));
        // Grace for the wait, Clair's 10 s drain, and more.
        assert!(pod.termination_grace_period_seconds > Some(PRE_STOP_SECONDS + 10));
        let env = container.env.as_ref().unwrap();
        let tmpdir = env.iter().find(|e| e.name == "TMPDIR");
        assert_eq!(tmpdir.and_then(|e| e.value.as_deref()), Some("/var/tmp"));
        let mounts = container.volume_mounts.as_ref().unwrap();
        for folder in ["/var/tmp", "/tmp"] {
            assert!(
                mounts
                    .iter()
                    .any(|m| m.mount_path == folder && m.name == "scratch"),
                "{folder} is the scratch volume"
            );
        }
    }

    fn resources(spec: &ServiceSpec) -> ResourceRequirements {
        let d = deployment(&input(spec), "s", "h");
        let pod = d.spec.unwrap().template.spec.unwrap();
        pod.containers[0].resources.clone().unwrap()
    }

    #[test]
    fn a_pod_without_resources_gets_a_memory_limit_and_asks_for_its_scratch_disk() {
        let mut spec = spec();
        spec.pod.resources = None;
        let defaulted = resources(&spec);
        let limits = defaulted.limits.unwrap();
        assert_eq!(
            limits["memory"].0,
            default_memory_limit(ServiceKind::Matcher)
        );
        assert!(!limits.contains_key("cpu"), "no CPU limit is added");
        let requests = defaulted.requests.unwrap();
        assert_eq!(requests["ephemeral-storage"].0, DEFAULT_SCRATCH);
        assert_eq!(requests["memory"].0, "256Mi");

        spec.pod.scratch = Some(ScratchVolume {
            size: Some(Quantity("3Gi".into())),
            storage_class_name: None,
        });
        assert_eq!(
            resources(&spec).requests.unwrap()["ephemeral-storage"].0,
            "3Gi"
        );
    }

    #[test]
    fn the_specs_resources_are_kept_and_only_the_scratch_request_is_added() {
        let mut spec = spec();
        let given = ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("1".into())),
                ("ephemeral-storage".to_string(), Quantity("1Gi".into())),
            ])),
            ..Default::default()
        };
        spec.pod.resources = Some(given.clone());
        assert_eq!(resources(&spec), given, "a request of its own is kept");
        spec.pod.resources = Some(ResourceRequirements {
            requests: None,
            ..given.clone()
        });
        let kept = resources(&spec);
        assert_eq!(
            kept.limits, None,
            "no limit is added to the spec's resources"
        );
        assert_eq!(
            kept.requests.unwrap()["ephemeral-storage"].0,
            DEFAULT_SCRATCH
        );
        // A limit of its own: no request beside it that could exceed it.
        let limited = ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "ephemeral-storage".to_string(),
                Quantity("5Gi".into()),
            )])),
            ..Default::default()
        };
        spec.pod.resources = Some(limited.clone());
        assert_eq!(resources(&spec), limited);
    }

    #[test]
    fn autoscaling_hands_replicas_to_the_autoscaler() {
        let mut spec = spec();
        spec.autoscaling = Some(Box::new(Autoscaling {
            min_replicas: Some(2),
            max_replicas: 5,
            target_cpu_utilization_percentage: Some(70),
            ..Default::default()
        }));
        let mut input = input(&spec);
        assert_eq!(deployment(&input, "s", "h").spec.unwrap().replicas, None);
        input.current_replicas = Some(4);
        assert_eq!(deployment(&input, "s", "h").spec.unwrap().replicas, Some(4));
        let hpa = autoscaler(&input).expect("an autoscaler");
        let hs = hpa.spec.unwrap();
        assert_eq!((hs.min_replicas, hs.max_replicas), (Some(2), 5));
        assert_eq!(hs.scale_target_ref.name, "m");
        assert_eq!(
            hs.metrics.unwrap()[0]
                .resource
                .as_ref()
                .unwrap()
                .target
                .average_utilization,
            Some(70)
        );
        spec.autoscaling = None;
    }

    #[test]
    fn enterprise_pod_settings_reach_the_pods_and_the_operators_labels_win() {
        use crate::api::common::CaBundle;
        let plain = deployment(&input(&spec()), "m-config-abc", "abc");
        let mut spec = spec();
        spec.pod.image_pull_secrets = vec![k8s_openapi::api::core::v1::LocalObjectReference {
            name: "mirror-pull".into(),
        }];
        spec.pod.service_account_name = Some("clair-pods".into());
        spec.pod.priority_class_name = Some("scanners".into());
        spec.pod.labels = BTreeMap::from([
            ("cost-center".to_string(), "sec".to_string()),
            (labels::INSTANCE.to_string(), "hijacked".to_string()),
        ]);
        spec.pod.annotations = BTreeMap::from([
            ("sidecar.istio.io/inject".to_string(), "false".to_string()),
            (CONFIG_HASH.to_string(), "forged".to_string()),
        ]);
        spec.pod.ca_bundle = Some(CaBundle {
            config_map: Some("corporate-ca".into()),
            secret: None,
        });
        let d = deployment(&input(&spec), "m-config-abc", "abc");
        let template = d.spec.unwrap().template;
        let meta = template.metadata.unwrap();
        let labels = meta.labels.unwrap();
        assert_eq!(labels["cost-center"], "sec");
        assert_eq!(
            labels[labels::INSTANCE],
            "m",
            "the selector's labels are the operator's"
        );
        let annotations = meta.annotations.unwrap();
        assert_eq!(annotations["sidecar.istio.io/inject"], "false");
        assert_eq!(annotations[CONFIG_HASH], "abc");
        let pod = template.spec.unwrap();
        assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "mirror-pull");
        assert_eq!(pod.service_account_name.as_deref(), Some("clair-pods"));
        assert_eq!(pod.priority_class_name.as_deref(), Some("scanners"));
        assert_eq!(pod.automount_service_account_token, Some(false));
        let volume = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "ca-bundle")
            .unwrap();
        assert_eq!(volume.config_map.unwrap().name, "corporate-ca");
        let mount = pod.containers[0]
            .volume_mounts
            .clone()
            .unwrap()
            .into_iter()
            .find(|m| m.name == "ca-bundle")
            .unwrap();
        assert_eq!(
            (mount.mount_path.as_str(), mount.read_only),
            (CA_BUNDLE_DIR, Some(true))
        );
        // A proxy: its variables, the cluster's names always direct.
        let mut proxied = spec.clone();
        proxied.pod.proxy = Some(crate::api::common::ProxySettings {
            http_proxy: Some("http://proxy.example:3128".into()),
            https_proxy: Some("http://proxy.example:3128".into()),
            no_proxy: Some("db.example".into()),
        });
        let d = deployment(&input(&proxied), "m-config-abc", "abc");
        let env = d.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap();
        let value = |name: &str| {
            env.iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value.clone())
        };
        assert_eq!(
            value("HTTPS_PROXY").as_deref(),
            Some("http://proxy.example:3128")
        );
        assert_eq!(
            value("NO_PROXY").as_deref(),
            Some("db.example,localhost,127.0.0.1,.svc,.svc.cluster.local,.cluster.local")
        );
        // Unset, nothing changes: running Deployments do not roll for the new fields.
        let plain_pod = plain.spec.unwrap().template.spec.unwrap();
        assert_eq!(plain_pod.volumes.unwrap().len(), 2);
        assert!(plain_pod.image_pull_secrets.is_none() && plain_pod.service_account_name.is_none());
        let plain_env = plain_pod.containers[0].env.clone().unwrap_or_default();
        assert!(!plain_env.iter().any(|e| e.name.ends_with("_PROXY")));
    }

    #[test]
    fn a_scratch_class_asks_for_an_ephemeral_claim() {
        let mut spec = spec();
        spec.pod.scratch = Some(ScratchVolume {
            size: Some(Quantity("50Gi".into())),
            storage_class_name: Some("fast".into()),
        });
        let d = deployment(&input(&spec), "s", "h");
        let volumes = d.spec.unwrap().template.spec.unwrap().volumes.unwrap();
        let claim = volumes[1]
            .ephemeral
            .as_ref()
            .unwrap()
            .volume_claim_template
            .as_ref()
            .unwrap();
        assert_eq!(claim.spec.storage_class_name.as_deref(), Some("fast"));
        let requests = resources(&spec).requests.unwrap_or_default();
        assert!(
            !requests.contains_key("ephemeral-storage"),
            "a claimed volume is not node storage"
        );
    }
}
