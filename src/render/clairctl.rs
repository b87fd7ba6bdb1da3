//! The pods that run `clairctl` for a `Clair`: the updater CronJob (fetch and load, load an
//! export for air-gapped clusters, or make one) and the upgrade Jobs (`clairctl admin pre`
//! and `post`), each with the config the services get. Pure builders.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapProjection, Container, KeyToPath, PersistentVolumeClaimVolumeSource, PodSpec,
    PodTemplateSpec, ProjectedVolumeSource, SecretProjection, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::clair::{ClairInput, ROOT_KEY};
use super::pod::{CLAIR_UID, restricted_container, restricted_pod, with_default_requests};
use super::settings;
use crate::api::clair::{UpdaterMode, UpgradeStep};
use crate::api::labels;

/// Where the pods running `clairctl` mount their config.
const CLAIRCTL_CONFIG_DIR: &str = "/config";
const IMPORT_DIR: &str = "/import";
const EXPORT_DIR: &str = "/export";

/// The shell command the updater CronJob runs: fetch and load (`export-updaters` piped into
/// `import-updaters`), load an export made elsewhere for air-gapped clusters, or make one.
pub fn updater_command(input: &ClairInput) -> String {
    let clairctl = format!("clairctl --config {CLAIRCTL_CONFIG_DIR}/{ROOT_KEY}");
    let updaters = input.spec.updaters.as_ref();
    if let Some(claim) = updaters.and_then(|u| u.export.as_ref()) {
        // Written beside the target, then renamed over it: an importer never reads half.
        let target = format!("{EXPORT_DIR}/{}", claim.path.trim_start_matches('/'));
        let partial = shell_quote(&format!("{target}.partial"));
        let target = shell_quote(&target);
        return format!(
            "mkdir -p \"$(dirname {target})\" && {clairctl} export-updaters --strict {partial} && mv -f {partial} {target}"
        );
    }
    let import = updaters.and_then(|u| u.import.as_ref());
    match import {
        Some(import) => {
            let from = match (&import.url, &import.persistent_volume_claim) {
                (Some(url), _) => shell_quote(url),
                (None, Some(claim)) => shell_quote(&format!(
                    "{IMPORT_DIR}/{}",
                    claim.path.trim_start_matches('/')
                )),
                (None, None) => "-".to_string(),
            };
            format!("{clairctl} import-updaters {from}")
        }
        None => format!(
            "set -o pipefail 2>/dev/null || true; {clairctl} export-updaters | {clairctl} import-updaters -"
        ),
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The projected config of a `clairctl` pod: the generated root and the user's drop-ins in
/// `config.yaml.d/`, in order, so `clairctl` merges them as the services do.
fn clairctl_config_volume(input: &ClairInput) -> Volume {
    let mut sources = vec![VolumeProjection {
        secret: Some(SecretProjection {
            name: input.config_secret_name(),
            items: Some(vec![KeyToPath {
                key: ROOT_KEY.to_string(),
                path: ROOT_KEY.to_string(),
                mode: None,
            }]),
            optional: Some(false),
        }),
        ..Default::default()
    }];
    for (index, dropin) in input.spec.dropins.iter().enumerate() {
        let Some(reference) = dropin.key() else {
            continue;
        };
        let item = KeyToPath {
            key: reference.key.clone(),
            path: format!("{ROOT_KEY}.d/{index:02}-{}", reference.key),
            mode: None,
        };
        sources.push(if dropin.secret.is_some() {
            VolumeProjection {
                secret: Some(SecretProjection {
                    name: reference.name.clone(),
                    items: Some(vec![item]),
                    optional: Some(false),
                }),
                ..Default::default()
            }
        } else {
            VolumeProjection {
                config_map: Some(ConfigMapProjection {
                    name: reference.name.clone(),
                    items: Some(vec![item]),
                    optional: Some(false),
                }),
                ..Default::default()
            }
        });
    }
    Volume {
        name: "config".to_string(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(sources),
            default_mode: Some(0o440),
        }),
        ..Default::default()
    }
}

/// A pod running `clairctl` with the config the services get (generated root and the
/// user's drop-ins), a scratch `/tmp`, and `extra` volumes mounted at their paths.
fn clairctl_pod(
    input: &ClairInput,
    name: &str,
    command: Vec<String>,
    resources: Option<k8s_openapi::api::core::v1::ResourceRequirements>,
    extra: Vec<(Volume, VolumeMount)>,
    restart_policy: &str,
) -> PodSpec {
    let mut volumes = vec![
        clairctl_config_volume(input),
        Volume {
            name: "tmp".to_string(),
            empty_dir: Some(Default::default()),
            ..Default::default()
        },
    ];
    let mut mounts = vec![
        VolumeMount {
            name: "config".to_string(),
            mount_path: CLAIRCTL_CONFIG_DIR.to_string(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: "tmp".to_string(),
            mount_path: "/tmp".to_string(),
            ..Default::default()
        },
    ];
    for (volume, mount) in extra {
        volumes.push(volume);
        mounts.push(mount);
    }
    let container = Container {
        name: name.to_string(),
        image: Some(input.image()),
        command: Some(command),
        resources: Some(with_default_requests(resources, "100m", "128Mi")),
        volume_mounts: Some(mounts),
        // clairctl writes its scratch files under $TMPDIR.
        env: Some(vec![k8s_openapi::api::core::v1::EnvVar {
            name: "TMPDIR".to_string(),
            value: Some("/tmp".to_string()),
            ..Default::default()
        }]),
        ..restricted_container()
    };
    let mut pod = PodSpec {
        restart_policy: Some(restart_policy.to_string()),
        containers: vec![container],
        volumes: Some(volumes),
        ..restricted_pod(input.users, CLAIR_UID)
    };
    // The Clair's pod settings: its registry, CAs, proxy and scheduling reach clairctl too.
    settings::apply(&mut pod, input.pod_settings(), &["TMPDIR"]);
    pod
}

/// The pod template of a `clairctl` pod: `pod` with the Clair's pod labels and annotations
/// under the operator's own.
fn clairctl_template(input: &ClairInput, component: &str, pod: PodSpec) -> PodTemplateSpec {
    let settings = input.pod_settings();
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(settings::labels(
                settings,
                labels::all(input.name, component),
            )),
            annotations: settings::annotations(settings, BTreeMap::new()),
            ..Default::default()
        }),
        spec: Some(pod),
    }
}

/// The updater CronJob, when `spec.updaters.mode` is `CronJob`.
pub fn updater_cronjob(input: &ClairInput) -> Option<CronJob> {
    let updaters = input.spec.updaters.as_ref()?;
    if input.updater_mode() == UpdaterMode::Matcher {
        return None;
    }
    let mut extra = Vec::new();
    if let Some(claim) = updaters.export.as_ref() {
        extra.push((
            Volume {
                name: "export".to_string(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.claim_name.clone(),
                    read_only: Some(false),
                }),
                ..Default::default()
            },
            VolumeMount {
                name: "export".to_string(),
                mount_path: EXPORT_DIR.to_string(),
                ..Default::default()
            },
        ));
    }
    if let Some(claim) = updaters
        .import
        .as_ref()
        .and_then(|i| i.persistent_volume_claim.as_ref())
    {
        extra.push((
            Volume {
                name: "import".to_string(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.claim_name.clone(),
                    read_only: Some(true),
                }),
                ..Default::default()
            },
            VolumeMount {
                name: "import".to_string(),
                mount_path: IMPORT_DIR.to_string(),
                read_only: Some(true),
                ..Default::default()
            },
        ));
    }
    let command = vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        updater_command(input),
    ];
    let pod = clairctl_pod(
        input,
        "updaters",
        command,
        updaters.resources.clone(),
        extra,
        "OnFailure",
    );
    let labels = labels::all(input.name, "updaters");
    Some(CronJob {
        metadata: input.metadata(input.cronjob_name(), "updaters"),
        spec: Some(CronJobSpec {
            schedule: updaters
                .schedule
                .clone()
                .unwrap_or_else(|| "0 */6 * * *".to_string()),
            concurrency_policy: Some("Forbid".to_string()),
            // A run the controller missed (it was down, or the last run still ran) starts
            // within this of its time or not at all: never hours late, into the next one.
            starting_deadline_seconds: Some(UPDATER_STARTING_DEADLINE_SECONDS),
            successful_jobs_history_limit: Some(3),
            failed_jobs_history_limit: Some(3),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(JobSpec {
                    backoff_limit: Some(2),
                    template: clairctl_template(input, "updaters", pod),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// How late an updater run may start (docs/decisions.md, "Updater runs").
pub const UPDATER_STARTING_DEADLINE_SECONDS: i64 = 3600;

/// How long an upgrade step may run unless the spec says otherwise.
pub const UPGRADE_STEP_TIMEOUT_SECONDS: i64 = 6 * 3600;

/// `NAME-upgrade-pre-v4-9-0`: one Job per step and target version.
pub fn upgrade_job_name(input: &ClairInput, step: UpgradeStep, version: &str) -> String {
    let version: String = version
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let name = format!("{}-upgrade-{}-{version}", input.name, step);
    // A Job's name goes into its pods' labels: 63 characters at most.
    name.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

/// The Job running `clairctl admin pre|post VERSION` with the new image and the services'
/// config.
pub fn upgrade_job(input: &ClairInput, step: UpgradeStep, version: &str) -> Job {
    let command = [
        "clairctl",
        "--config",
        &format!("{CLAIRCTL_CONFIG_DIR}/{ROOT_KEY}"),
        "admin",
        &step.to_string(),
        version,
    ]
    .map(String::from)
    .to_vec();
    Job {
        metadata: input.metadata(upgrade_job_name(input, step, version), "upgrade"),
        spec: Some(JobSpec {
            backoff_limit: Some(2),
            // A hung step fails (the Job's DeadlineExceeded) instead of upgrading forever.
            active_deadline_seconds: Some(
                input
                    .spec
                    .upgrade_step_timeout_seconds
                    .unwrap_or(UPGRADE_STEP_TIMEOUT_SECONDS),
            ),
            template: clairctl_template(
                input,
                "upgrade",
                clairctl_pod(input, "upgrade", command, None, Vec::new(), "Never"),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ClairSpec;
    use crate::api::clair::{ClaimFile, UpdaterImport, UpdatersSpec};
    use crate::render::clair::{ConnStrings, root_config};

    fn input(spec: &ClairSpec) -> ClairInput<'_> {
        ClairInput::example(spec)
    }

    fn spec() -> ClairSpec {
        ClairSpec::default()
    }

    fn connections() -> ConnStrings {
        ConnStrings {
            indexer: "host=db user=indexer".into(),
            matcher: "host=db user=matcher".into(),
            notifier: None,
        }
    }

    #[test]
    fn air_gapped_imports_from_the_claim() {
        let mut spec = spec();
        spec.updaters = Some(UpdatersSpec {
            mode: Some(UpdaterMode::CronJob),
            schedule: Some("@daily".into()),
            import: Some(UpdaterImport {
                url: None,
                persistent_volume_claim: Some(ClaimFile {
                    claim_name: "exports".into(),
                    path: "/it's/updates.json.zst".into(),
                }),
            }),
            ..Default::default()
        });
        let input = input(&spec);
        assert_eq!(
            updater_command(&input),
            r"clairctl --config /config/config.yaml import-updaters '/import/it'\''s/updates.json.zst'"
        );
    }

    #[test]
    fn export_mode_writes_the_export_whole_onto_the_claim() {
        let mut spec = spec();
        spec.updaters = Some(UpdatersSpec {
            mode: Some(UpdaterMode::Export),
            schedule: Some("@daily".into()),
            export: Some(ClaimFile {
                claim_name: "carry".into(),
                path: "out/updates.json.zst".into(),
            }),
            ..Default::default()
        });
        let input = input(&spec);
        assert_eq!(
            updater_command(&input),
            "mkdir -p \"$(dirname '/export/out/updates.json.zst')\" && clairctl --config /config/config.yaml export-updaters --strict '/export/out/updates.json.zst.partial' && mv -f '/export/out/updates.json.zst.partial' '/export/out/updates.json.zst'"
        );
        let cronjob = updater_cronjob(&input).unwrap().spec.unwrap();
        // A missed run starts within the hour or waits for the next.
        assert_eq!(cronjob.starting_deadline_seconds, Some(3600));
        assert_eq!(cronjob.concurrency_policy.as_deref(), Some("Forbid"));
        let pod = cronjob.job_template.spec.unwrap().template.spec.unwrap();
        let claim = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "export")
            .and_then(|v| v.persistent_volume_claim)
            .unwrap();
        assert_eq!(
            (claim.claim_name.as_str(), claim.read_only),
            ("carry", Some(false))
        );
        // The matcher keeps its own updaters.
        let config = root_config(&input, &connections(), "a2V5");
        assert!(config["matcher"].get("disable_updaters").is_none());
    }

    #[test]
    fn upgrade_jobs_run_clairctl_admin_with_the_new_image() {
        let mut spec = spec();
        spec.image = Some("quay.io/projectquay/clair:4.9.0".into());
        let input = input(&spec);
        let job = upgrade_job(&input, UpgradeStep::Pre, "v4.9.0");
        assert_eq!(
            job.metadata.name.as_deref(),
            Some("clair-upgrade-pre-v4-9-0")
        );
        let job_spec = job.spec.unwrap();
        // A hung step fails instead of holding the Clair in Upgrading.
        assert_eq!(
            job_spec.active_deadline_seconds,
            Some(UPGRADE_STEP_TIMEOUT_SECONDS)
        );
        let pod = job_spec.template.spec.unwrap();
        assert_eq!(
            pod.containers[0].command.as_ref().unwrap(),
            &[
                "clairctl",
                "--config",
                "/config/config.yaml",
                "admin",
                "pre",
                "v4.9.0"
            ]
        );
        assert_eq!(
            pod.containers[0].image.as_deref(),
            Some("quay.io/projectquay/clair:4.9.0")
        );
        let long = ClairInput {
            name: &"x".repeat(60),
            ..input
        };
        assert!(upgrade_job_name(&long, UpgradeStep::Post, "v4.9.0").len() <= 63);
    }
}
