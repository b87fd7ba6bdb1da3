//! The objects a `Clair` owns, apart from its database, routing and `clairctl` pods
//! (`clairctl.rs`): the generated root config (a Secret: it holds connection strings), the
//! pre-shared key for integrators and the three service resources, with the names and image
//! tags they share. Pure builders.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use serde_json::{Value, json};

use super::pod::PodUsers;
use super::service::{API_PORT, INTROSPECTION_PORT, url};
use super::sizing;
use crate::api::ServiceKind;
use crate::api::clair::{ServiceOverrides, UpdaterMode};
use crate::api::common::PodOverrides;
use crate::api::keys;
use crate::api::labels;
use crate::api::service::ClairService;
use crate::api::{ClairSpec, ConfigSource, ConfigSpec, DEFAULT_IMAGE, KeyReference, ServiceSpec};
use crate::database::connstring;

/// The key of the generated root config. YAML, so the user's `.yaml` and `.yaml-patch`
/// drop-ins apply to it as Clair applies drop-ins (the extension must match the root's);
/// the text is JSON, which is YAML too.
pub const ROOT_KEY: &str = "config.yaml";
/// Keys of the pre-shared key Secret.
pub const PSK_KEY: &str = "key";
pub const PSK_ISSUERS_KEY: &str = "issuers";
/// The JWT issuers the pre-shared key is accepted from: Quay, and `clairctl` (its default
/// `--issuer`). Clair adds its own intraservice issuer.
pub const PSK_ISSUERS: [&str; 2] = ["quay", "clairctl"];

/// What the builders need to know about one `Clair`.
pub struct ClairInput<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    /// The controller owner reference to the `Clair`.
    pub owner: OwnerReference,
    pub spec: &'a ClairSpec,
    /// Whether pods name their user or the platform assigns one.
    pub users: PodUsers,
}

/// Each service's connection string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnStrings {
    pub indexer: String,
    pub matcher: String,
    /// `None` while the notifier is disabled.
    pub notifier: Option<String>,
}

impl ConnStrings {
    /// The string of `role`; `None` for a disabled notifier.
    pub fn of(&self, role: ServiceKind) -> Option<&str> {
        match role {
            ServiceKind::Indexer => Some(&self.indexer),
            ServiceKind::Matcher => Some(&self.matcher),
            ServiceKind::Notifier => self.notifier.as_deref(),
        }
    }
}

impl ClairInput<'_> {
    pub fn notifier_enabled(&self) -> bool {
        self.spec
            .notifier
            .as_ref()
            .and_then(|n| n.enabled)
            .unwrap_or(true)
    }

    pub fn enabled(&self, role: ServiceKind) -> bool {
        role != ServiceKind::Notifier || self.notifier_enabled()
    }

    /// `NAME-indexer` and so on: the service resource, its Deployment and its Service.
    pub fn child_name(&self, role: ServiceKind) -> String {
        child_name(self.name, role)
    }

    pub fn image(&self) -> String {
        image(self.spec)
    }

    /// The image of one service: its own override, else `spec.image`.
    pub fn service_image(&self, role: ServiceKind) -> String {
        self.overrides(role)
            .and_then(|o| o.image.clone())
            .unwrap_or_else(|| self.image())
    }

    pub fn updater_mode(&self) -> UpdaterMode {
        self.spec
            .updaters
            .as_ref()
            .and_then(|u| u.mode)
            .unwrap_or_default()
    }

    pub fn overrides(&self, role: ServiceKind) -> Option<&ServiceOverrides> {
        self.spec.overrides(role)
    }

    pub fn config_secret_name(&self) -> String {
        format!("{}-config", self.name)
    }

    pub fn psk_secret_name(&self) -> String {
        format!("{}-psk", self.name)
    }

    /// The settings of every pod this Clair runs (`spec.pod`); a service's own win.
    pub fn pod_settings(&self) -> &PodOverrides {
        static NONE: std::sync::LazyLock<PodOverrides> = std::sync::LazyLock::new(Default::default);
        self.spec.pod.as_deref().unwrap_or(&NONE)
    }

    /// The pod settings a service's pods get: its own over the Clair's.
    pub fn service_pod_settings(&self, role: ServiceKind) -> PodOverrides {
        self.overrides(role)
            .and_then(|o| o.pod.clone())
            .unwrap_or_default()
            .over(self.pod_settings())
    }

    /// The CPU limit of a service's pods, in millicores (its pod settings over the Clair's).
    pub fn cpu_limit_millis(&self, role: ServiceKind) -> Option<u32> {
        sizing::cpu_limit_millis(&self.service_pod_settings(role))
    }

    /// `pool_max_conns` for a service's pods, where its connection string sets none: from
    /// their CPU limit, if any.
    pub fn pool_size(&self, role: ServiceKind) -> Option<u32> {
        sizing::pool(role, self.cpu_limit_millis(role))
    }

    /// A service's connection string as its pods get it: `pool_max_conns` added where the
    /// string sets none and the pods have a CPU limit (pgxpool's default follows the node's
    /// cores, not the pod's).
    pub fn pooled(&self, role: ServiceKind, text: &str) -> String {
        match self.pool_size(role) {
            Some(pool) => connstring::with_default(text, "pool_max_conns", &pool.to_string()),
            None => text.to_string(),
        }
    }

    /// The CA bundle a service's pods trust: its own, else the Clair's (what
    /// [`Self::service_pod_settings`] would give, without merging the rest).
    pub fn ca_bundle(&self, role: ServiceKind) -> Option<&crate::api::common::CaBundle> {
        self.overrides(role)
            .and_then(|o| o.pod.as_ref()?.ca_bundle.as_ref())
            .or(self.pod_settings().ca_bundle.as_ref())
    }

    pub fn cronjob_name(&self) -> String {
        format!("{}-updaters", self.name)
    }

    pub(super) fn metadata(&self, name: String, component: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.to_string()),
            labels: Some(labels::all(self.name, component)),
            owner_references: Some(vec![self.owner.clone()]),
            ..Default::default()
        }
    }
}

#[cfg(test)]
impl ConnStrings {
    /// A connection string per service, for the builders' tests.
    pub fn example() -> Self {
        ConnStrings {
            indexer: "host=db user=indexer".into(),
            matcher: "host=db user=matcher".into(),
            notifier: Some("host=db user=notifier".into()),
        }
    }
}

#[cfg(test)]
impl<'a> ClairInput<'a> {
    /// `clair` in namespace `scan` with `spec`, for the builders' tests.
    pub fn example(spec: &'a ClairSpec) -> Self {
        ClairInput {
            name: "clair",
            namespace: "scan",
            owner: OwnerReference::default(),
            spec,
            users: PodUsers::Numeric,
        }
    }
}

/// The Clair image of a `Clair`: `spec.image`, else the default.
pub fn image(spec: &ClairSpec) -> String {
    spec.image
        .clone()
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string())
}

pub fn child_name(clair: &str, role: ServiceKind) -> String {
    format!("{clair}-{}", role.as_str())
}

/// The generated root config: listen addresses, each service's connection string (with
/// its pool size) and the addresses of the others (full URLs), the pre-shared key,
/// Prometheus metrics, and the indexer's admission limit when its pods have a CPU limit.
pub fn root_config(input: &ClairInput, connections: &ConnStrings, psk: &str) -> Value {
    let address = |role| url(&input.child_name(role), input.namespace);
    let mut config = json!({
        "http_listen_addr": format!(":{API_PORT}"),
        "introspection_addr": format!(":{INTROSPECTION_PORT}"),
        "log_level": "info",
        "indexer": {
            "connstring": input.pooled(ServiceKind::Indexer, &connections.indexer),
            "migrations": true,
        },
        "matcher": {
            "connstring": input.pooled(ServiceKind::Matcher, &connections.matcher),
            "indexer_addr": address(ServiceKind::Indexer),
            "migrations": true,
        },
        "auth": {"psk": {"key": psk, "iss": PSK_ISSUERS}},
        "metrics": {"name": "prometheus"},
    });
    if let Some(millis) = input.cpu_limit_millis(ServiceKind::Indexer) {
        config["indexer"]["index_report_request_concurrency"] =
            sizing::admitted_index_requests(millis).into();
    }
    if input.updater_mode() == UpdaterMode::CronJob {
        config["matcher"]["disable_updaters"] = Value::Bool(true);
    }
    if let Some(notifier) = &connections.notifier {
        config["notifier"] = json!({
            "connstring": input.pooled(ServiceKind::Notifier, notifier),
            "indexer_addr": address(ServiceKind::Indexer),
            "matcher_addr": address(ServiceKind::Matcher),
            "migrations": true,
        });
        if let Some(Value::Object(quay)) = super::quay::notifier_config(input)
            && let Some(section) = config["notifier"].as_object_mut()
        {
            section.extend(quay);
        }
    }
    config
}

/// The Secret holding the generated root config, labelled for the validating webhook.
pub fn config_secret(input: &ClairInput, config: &Value) -> Secret {
    let mut metadata = input.metadata(input.config_secret_name(), "config");
    if let Some(labels) = metadata.labels.as_mut() {
        labels.insert(keys::VALIDATE_CONFIG.to_string(), "true".to_string());
    }
    metadata.annotations = Some(BTreeMap::from([(
        keys::CONFIG.to_string(),
        ROOT_KEY.to_string(),
    )]));
    Secret {
        metadata,
        data: Some(BTreeMap::from([(
            ROOT_KEY.to_string(),
            ByteString(pretty(config).into_bytes()),
        )])),
        type_: Some("Opaque".to_string()),
        ..Default::default()
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// The pre-shared key Secret: `key` (base64, as Clair's `auth.psk.key` wants it) and
/// `issuers`. Integrators such as Quay read it to sign their requests.
pub fn psk_secret(input: &ClairInput, key: &str) -> Secret {
    Secret {
        metadata: input.metadata(input.psk_secret_name(), "psk"),
        data: Some(BTreeMap::from([
            (PSK_KEY.to_string(), ByteString(key.as_bytes().to_vec())),
            (
                PSK_ISSUERS_KEY.to_string(),
                ByteString(PSK_ISSUERS.join(",").into_bytes()),
            ),
        ])),
        type_: Some("Opaque".to_string()),
        ..Default::default()
    }
}

/// The config every service resource gets: the generated root plus the user's drop-ins.
pub fn child_config(input: &ClairInput) -> ConfigSpec {
    ConfigSpec {
        root: ConfigSource {
            config_map: None,
            secret: Some(KeyReference {
                name: input.config_secret_name(),
                key: ROOT_KEY.to_string(),
            }),
        },
        dropins: input.spec.dropins.clone(),
    }
}

/// The service resource of `role`, of kind `K`. `database_pod`: the UID of the managed
/// engine's pod it connects to, when known, as a pod annotation, so that the service rolls
/// when the engine is replaced (its pooled connections would hang on the old address).
pub fn child<K: ClairService + Resource>(
    input: &ClairInput,
    role: ServiceKind,
    database_pod: Option<&str>,
) -> K {
    let overrides = input.overrides(role).cloned().unwrap_or_default();
    let mut pod = input.service_pod_settings(role);
    if let Some(uid) = database_pod {
        pod.annotations
            .insert(crate::api::keys::DATABASE_POD.to_string(), uid.to_string());
    }
    let spec = ServiceSpec {
        image: Some(input.service_image(role)),
        config: child_config(input),
        replicas: overrides.replicas.unwrap_or(1),
        autoscaling: overrides.autoscaling.map(Box::new),
        pod: Box::new(pod),
        tracing: input.spec.tracing.clone(),
    };
    let mut object = K::with_spec(&input.child_name(role), spec);
    *object.meta_mut() = input.metadata(input.child_name(role), role.as_str());
    object
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Indexer;
    use crate::api::clair::{DatabaseSpec, NotifierOverrides, UpdatersSpec, UpgradeStep};
    use crate::render::clairctl::{updater_cronjob, upgrade_job};

    fn spec() -> ClairSpec {
        ClairSpec {
            database: DatabaseSpec::default(),
            dropins: vec![ConfigSource {
                config_map: Some(KeyReference {
                    name: "extra".into(),
                    key: "notifier.yaml".into(),
                }),
                secret: None,
            }],
            ..Default::default()
        }
    }

    fn input(spec: &ClairSpec) -> ClairInput<'_> {
        ClairInput::example(spec)
    }

    #[test]
    fn addresses_are_full_urls() {
        let spec = spec();
        let config = root_config(&input(&spec), &ConnStrings::example(), "c2VjcmV0");
        assert_eq!(
            config["matcher"]["indexer_addr"],
            "http://clair-indexer.scan.svc:6060"
        );
        assert_eq!(
            config["notifier"]["matcher_addr"],
            "http://clair-matcher.scan.svc:6060"
        );
        assert_eq!(config["auth"]["psk"]["iss"], json!(["quay", "clairctl"]));
        assert!(config["matcher"].get("disable_updaters").is_none());
    }

    #[test]
    fn a_cpu_limit_renders_the_admission_limit_and_the_pools() {
        let limited = crate::render::sizing::tests::cpu_limited;
        let mut spec = spec();
        let config = root_config(&input(&spec), &ConnStrings::example(), "c2VjcmV0");
        assert!(
            config["indexer"]
                .get("index_report_request_concurrency")
                .is_none()
        );
        assert_eq!(config["indexer"]["connstring"], "host=db user=indexer");
        // The indexer's own limit, the matcher's from the Clair's pod settings.
        spec.indexer = Some(Box::new(ServiceOverrides {
            pod: Some(limited("500m")),
            ..Default::default()
        }));
        spec.pod = Some(Box::new(limited("2")));
        let mut connections = ConnStrings::example();
        connections.notifier = Some("host=db user=notifier pool_max_conns=12".into());
        let config = root_config(&input(&spec), &connections, "c2VjcmV0");
        assert_eq!(config["indexer"]["index_report_request_concurrency"], 4);
        assert_eq!(
            config["indexer"]["connstring"],
            "host=db user=indexer pool_max_conns=5"
        );
        assert_eq!(
            config["matcher"]["connstring"],
            "host=db user=matcher pool_max_conns=4"
        );
        assert_eq!(
            config["notifier"]["connstring"], "host=db user=notifier pool_max_conns=12",
            "a tenant's pool size is kept"
        );
    }

    #[test]
    fn cronjob_mode_disables_the_matchers_updaters() {
        let mut spec = spec();
        spec.updaters = Some(UpdatersSpec {
            mode: Some(UpdaterMode::CronJob),
            schedule: Some("*/30 * * * *".into()),
            ..Default::default()
        });
        let input = input(&spec);
        let config = root_config(&input, &ConnStrings::example(), "c2VjcmV0");
        assert_eq!(config["matcher"]["disable_updaters"], true);
        let cron = updater_cronjob(&input).unwrap();
        let cron_spec = cron.spec.unwrap();
        assert_eq!(cron_spec.schedule, "*/30 * * * *");
        let pod = cron_spec.job_template.spec.unwrap().template.spec.unwrap();
        let command = pod.containers[0].command.clone().unwrap();
        assert!(
            command[2].contains("export-updaters | clairctl"),
            "{command:?}"
        );
        let projected = pod.volumes.unwrap()[0].projected.clone().unwrap();
        let paths: Vec<String> = projected
            .sources
            .unwrap()
            .iter()
            .flat_map(|s| {
                let items = s
                    .secret
                    .as_ref()
                    .and_then(|x| x.items.clone())
                    .or_else(|| s.config_map.as_ref().and_then(|x| x.items.clone()));
                items.unwrap_or_default().into_iter().map(|i| i.path)
            })
            .collect();
        assert_eq!(paths, ["config.yaml", "config.yaml.d/00-notifier.yaml"]);
    }

    #[test]
    fn the_clairs_pod_settings_reach_every_pod_and_a_services_own_win() {
        use crate::api::common::{CaBundle, PodOverrides, ProxySettings};
        use k8s_openapi::api::core::v1::{LocalObjectReference, Volume, VolumeMount};
        let mut spec = spec();
        spec.updaters = Some(UpdatersSpec {
            mode: Some(UpdaterMode::CronJob),
            schedule: Some("@daily".into()),
            ..Default::default()
        });
        spec.pod = Some(Box::new(PodOverrides {
            image_pull_secrets: vec![LocalObjectReference {
                name: "mirror-pull".into(),
            }],
            priority_class_name: Some("scanners".into()),
            labels: [("team".to_string(), "sec".to_string())].into(),
            ca_bundle: Some(CaBundle {
                config_map: Some("corporate-ca".into()),
                secret: None,
            }),
            proxy: Some(ProxySettings {
                https_proxy: Some("http://proxy.example:3128".into()),
                ..Default::default()
            }),
            volumes: vec![Volume {
                name: "mirror-auth".into(),
                ..Default::default()
            }],
            volume_mounts: vec![VolumeMount {
                name: "mirror-auth".into(),
                mount_path: "/etc/mirror".into(),
                ..Default::default()
            }],
            ..Default::default()
        }));
        spec.matcher = Some(Box::new(ServiceOverrides {
            pod: Some(PodOverrides {
                priority_class_name: Some("matchers".into()),
                labels: [("team".to_string(), "matching".to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        }));
        let input = input(&spec);
        let cronjob = updater_cronjob(&input).unwrap();
        let template = cronjob.spec.unwrap().job_template.spec.unwrap().template;
        let job = upgrade_job(&input, UpgradeStep::Pre, "v4.9.0")
            .spec
            .unwrap()
            .template;
        for template in [template, job] {
            let labels = template.metadata.unwrap().labels.unwrap();
            assert_eq!(labels["team"], "sec");
            assert!(
                labels.contains_key(labels::COMPONENT),
                "the operator's labels stay"
            );
            let pod = template.spec.unwrap();
            assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "mirror-pull");
            assert_eq!(pod.priority_class_name.as_deref(), Some("scanners"));
            let volumes: Vec<String> = pod.volumes.unwrap().into_iter().map(|v| v.name).collect();
            assert!(volumes.contains(&"ca-bundle".to_string()), "{volumes:?}");
            assert!(volumes.contains(&"mirror-auth".to_string()), "{volumes:?}");
            let container = &pod.containers[0];
            let paths: Vec<&str> = container
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| m.mount_path.as_str())
                .collect();
            assert!(paths.contains(&"/var/run/certs") && paths.contains(&"/etc/mirror"));
            let env = container.env.clone().unwrap();
            assert!(env.iter().any(|e| e.name == "HTTPS_PROXY"));
            // clairctl's own variable stays.
            assert!(env.iter().any(|e| e.name == "TMPDIR"));
        }
        // The services inherit; the matcher's own settings win, its labels merge over.
        let indexer: Indexer = child(&input, ServiceKind::Indexer, None);
        assert_eq!(
            indexer.spec.service.pod.priority_class_name.as_deref(),
            Some("scanners")
        );
        let matcher: crate::api::Matcher = child(&input, ServiceKind::Matcher, None);
        let pod = &matcher.spec.service.pod;
        assert_eq!(pod.priority_class_name.as_deref(), Some("matchers"));
        assert_eq!(pod.labels["team"], "matching");
        assert_eq!(pod.image_pull_secrets[0].name, "mirror-pull");
        assert_eq!(pod.volume_mounts[0].mount_path, "/etc/mirror");
        // Without spec.pod the pods are as before.
        let plain = super::tests::spec();
        let plain_input = ClairInput::example(&plain);
        let plain_job = upgrade_job(&plain_input, UpgradeStep::Pre, "v4.9.0");
        let plain_pod = plain_job.spec.unwrap().template.spec.unwrap();
        assert!(plain_pod.image_pull_secrets.is_none() && plain_pod.priority_class_name.is_none());
        assert_eq!(plain_pod.volumes.unwrap().len(), 2);
    }

    #[test]
    fn a_disabled_notifier_has_no_config_and_no_resource() {
        let mut spec = spec();
        spec.notifier = Some(Box::new(NotifierOverrides {
            enabled: Some(false),
            service: Default::default(),
        }));
        let input = input(&spec);
        assert!(!input.enabled(ServiceKind::Notifier));
        let mut c = ConnStrings::example();
        c.notifier = None;
        assert!(root_config(&input, &c, "a2V5").get("notifier").is_none());
    }

    #[test]
    fn children_take_the_generated_root_and_the_users_dropins() {
        let mut spec = spec();
        spec.image = Some("example/clair:4.9.0".into());
        spec.indexer = Some(Box::new(ServiceOverrides {
            replicas: Some(3),
            ..Default::default()
        }));
        let indexer: Indexer = child(&input(&spec), ServiceKind::Indexer, None);
        assert_eq!(indexer.metadata.name.as_deref(), Some("clair-indexer"));
        let s = &indexer.spec.service;
        assert_eq!(s.replicas, 3);
        assert_eq!(s.image.as_deref(), Some("example/clair:4.9.0"));
        assert_eq!(s.config.root.secret.as_ref().unwrap().name, "clair-config");
        assert_eq!(s.config.dropins.len(), 1);
        assert!(s.pod.annotations.is_empty());
    }

    #[test]
    fn a_replaced_database_pod_changes_the_services_pods() {
        let spec = spec();
        let before: Indexer = child(&input(&spec), ServiceKind::Indexer, Some("uid-1"));
        let after: Indexer = child(&input(&spec), ServiceKind::Indexer, Some("uid-2"));
        let annotation =
            |i: &Indexer| i.spec.service.pod.annotations[crate::api::keys::DATABASE_POD].clone();
        assert_eq!(annotation(&before), "uid-1");
        assert_ne!(annotation(&before), annotation(&after));
    }
}
