//! A managed PostgreSQL: one engine with a database and a role per service, or one engine
//! per service. Each engine is a StatefulSet with a headless Service and a data claim from
//! its claim template; a bootstrap script run by the image's first start creates the roles
//! and databases from passwords generated once into a Secret. Pure builders.

use std::collections::BTreeMap;
use strum::VariantArray;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, ExecAction,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodTemplateSpec, Probe, Secret,
    SecretKeySelector, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::clair::{ClairInput, ConnStrings};
use super::cloudnative_pg;
use super::pod::{POSTGRES_UID, restricted_container, restricted_pod, with_default_requests};
use crate::api::ServiceKind;
use crate::api::clair::{DatabaseEngine, ManagedDatabase};
use crate::api::labels;
use crate::database::connstring;

pub const DEFAULT_IMAGE: &str = "docker.io/library/postgres:17";
pub const DEFAULT_MAX_CONNECTIONS: i32 = 200;
const DEFAULT_SIZE: &str = "50Gi";
const PORT: i32 = 5432;
/// The superuser's key in the passwords Secret; each role's is `ROLE-password`.
pub const SUPERUSER_KEY: &str = "postgres-password";
pub const COMPONENT: &str = "database";
/// Tells the engines of a per-service database apart.
const ENGINE_LABEL: &str = "clair.projectquay.io/engine";

/// The passwords Secret's key for `role`.
pub fn password_key(role: ServiceKind) -> String {
    format!("{}-password", role.as_str())
}

/// Every key of the passwords Secret.
pub fn password_keys() -> Vec<String> {
    std::iter::once(SUPERUSER_KEY.to_string())
        .chain(ServiceKind::VARIANTS.iter().map(|r| password_key(*r)))
        .collect()
}

/// One engine and the services it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Engine {
    /// Name of its StatefulSet and Service.
    pub name: String,
    pub roles: Vec<ServiceKind>,
}

/// The engines of a managed database: one shared, or one per service.
pub fn engines(input: &ClairInput, managed: &ManagedDatabase) -> Vec<Engine> {
    let shared = format!("{}-database", input.name);
    if managed.per_service {
        ServiceKind::VARIANTS
            .iter()
            .map(|role| Engine {
                name: format!("{shared}-{}", role.as_str()),
                roles: vec![*role],
            })
            .collect()
    } else {
        vec![Engine {
            name: shared,
            roles: ServiceKind::VARIANTS.to_vec(),
        }]
    }
}

/// The engine serving `role`.
pub fn engine_of(engines: &[Engine], role: ServiceKind) -> Option<&Engine> {
    engines.iter().find(|e| e.roles.contains(&role))
}

/// The PostgreSQL image of a managed engine: `managed.image`, else the default.
pub fn engine_image(managed: &ManagedDatabase) -> String {
    managed.image.clone().unwrap_or_else(|| {
        match managed.engine() {
            DatabaseEngine::BuiltIn => DEFAULT_IMAGE,
            DatabaseEngine::CloudNativePg => cloudnative_pg::DEFAULT_IMAGE,
        }
        .to_string()
    })
}

pub fn passwords_secret_name(input: &ClairInput) -> String {
    format!("{}-database", input.name)
}

fn bootstrap_name(input: &ClairInput) -> String {
    format!("{}-database-bootstrap", input.name)
}

/// The Secret of generated passwords (`passwords` by key), created once and never changed.
/// It lives as long as the data: the roles in a kept data volume have these passwords, so
/// unless the claims are deleted with the `Clair` it has no owner and is kept too, for a
/// `Clair` of the same name to find again.
pub fn passwords_secret(
    input: &ClairInput,
    managed: &ManagedDatabase,
    passwords: &BTreeMap<String, String>,
) -> Secret {
    let mut metadata = input.metadata(passwords_secret_name(input), COMPONENT);
    if !managed.delete_claims {
        metadata.owner_references = None;
    }
    Secret {
        metadata,
        data: Some(
            passwords
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        type_: Some("Opaque".to_string()),
        ..Default::default()
    }
}

/// The first-start script: a role and a database per service, passwords read from the
/// environment (never on a command line, never in a log).
const BOOTSTRAP: &str = r#"#!/bin/bash
# Run once by the postgres image on an empty data directory: one role and one database per
# Clair service, each role owning its database. Passwords come from the environment.
set -euo pipefail
for role in $CLAIR_ROLES; do
  password_var="${role^^}_PASSWORD"
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    -v role="$role" -v password="${!password_var}" <<'SQL'
CREATE ROLE :"role" LOGIN PASSWORD :'password';
CREATE DATABASE :"role" OWNER :"role";
SQL
done
"#;

/// The ConfigMap holding the bootstrap script.
pub fn bootstrap(input: &ClairInput) -> ConfigMap {
    ConfigMap {
        metadata: input.metadata(bootstrap_name(input), COMPONENT),
        data: Some(BTreeMap::from([(
            "10-clair-roles.sh".to_string(),
            BOOTSTRAP.to_string(),
        )])),
        ..Default::default()
    }
}

/// Each service's connection string to its managed database: the engine's Service (on
/// CloudNativePG, the read-write one that follows the primary).
pub fn conn_strings(
    input: &ClairInput,
    managed: &ManagedDatabase,
    engines: &[Engine],
    passwords: &BTreeMap<String, String>,
) -> ConnStrings {
    let on_cloudnative_pg = managed.engine() == DatabaseEngine::CloudNativePg;
    let string = |role: ServiceKind| {
        let host = engine_of(engines, role).map_or(String::new(), |e| {
            let service = match on_cloudnative_pg {
                true => cloudnative_pg::read_write_service(e),
                false => e.name.clone(),
            };
            format!("{service}.{}.svc", input.namespace)
        });
        let password = passwords
            .get(&password_key(role))
            .cloned()
            .unwrap_or_default();
        let port = PORT.to_string();
        connstring::render(&[
            ("host", &host),
            ("port", &port),
            ("dbname", role.as_str()),
            ("user", role.as_str()),
            ("password", &password),
            // The built-in engine has no certificate. CloudNativePG serves TLS with a CA
            // of its own, which Clair is not given: encrypted, not verified (in-cluster).
            (
                "sslmode",
                if on_cloudnative_pg {
                    "require"
                } else {
                    "disable"
                },
            ),
        ])
    };
    ConnStrings {
        indexer: string(ServiceKind::Indexer),
        matcher: string(ServiceKind::Matcher),
        notifier: input
            .notifier_enabled()
            .then(|| string(ServiceKind::Notifier)),
    }
}

fn engine_labels(input: &ClairInput, engine: &Engine) -> BTreeMap<String, String> {
    let mut labels = labels::selector(input.name, COMPONENT);
    labels.insert(ENGINE_LABEL.to_string(), engine.name.clone());
    labels
}

/// The engines' NetworkPolicy's name.
pub fn network_policy_name(input: &ClairInput) -> String {
    format!("{}-{COMPONENT}", input.name)
}

/// The NetworkPolicy that lets only the `Clair`'s own pods reach its engines: its service
/// resources' pods (`NAME-indexer`, ...), and its updater and upgrade pods (`NAME`).
pub fn network_policy(input: &ClairInput) -> NetworkPolicy {
    NetworkPolicy {
        metadata: input.metadata(network_policy_name(input), COMPONENT),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(labels::selector(input.name, COMPONENT)),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(super::policy::own_pods(input)),
                    ..Default::default()
                }]),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(
                        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(PORT),
                    ),
                    protocol: Some("TCP".to_string()),
                    ..Default::default()
                }]),
            }]),
            ..Default::default()
        }),
    }
}

/// The engine's headless Service (the StatefulSet's governing Service, and the address the
/// services connect to).
pub fn service(input: &ClairInput, engine: &Engine) -> Service {
    Service {
        metadata: input.metadata(engine.name.clone(), COMPONENT),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(engine_labels(input, engine)),
            ports: Some(vec![ServicePort {
                name: Some("postgres".to_string()),
                port: PORT,
                target_port: Some(
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(
                        "postgres".to_string(),
                    ),
                ),
                ..Default::default()
            }]),
            publish_not_ready_addresses: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_string(),
                key: key.to_string(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn plain_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        ..Default::default()
    }
}

fn volume_mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        ..Default::default()
    }
}

/// The engine's StatefulSet. Its data claim outlives the StatefulSet (and so the `Clair`)
/// unless `deleteClaims` is set: the claim retention policy does it, not the operator.
pub fn statefulset(input: &ClairInput, managed: &ManagedDatabase, engine: &Engine) -> StatefulSet {
    let passwords = passwords_secret_name(input);
    let roles: Vec<&str> = engine.roles.iter().map(|r| r.as_str()).collect();
    let mut env = vec![
        plain_env("POSTGRES_USER", "postgres"),
        secret_env("POSTGRES_PASSWORD", &passwords, SUPERUSER_KEY),
        plain_env("PGDATA", "/var/lib/postgresql/data/pgdata"),
        plain_env("CLAIR_ROLES", &roles.join(" ")),
    ];
    for role in &engine.roles {
        env.push(secret_env(
            &format!("{}_PASSWORD", role.as_str().to_ascii_uppercase()),
            &passwords,
            &password_key(*role),
        ));
    }
    let max_connections = managed.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
    let ready = Probe {
        exec: Some(ExecAction {
            command: Some(
                [
                    "pg_isready",
                    "--host",
                    "127.0.0.1",
                    "--username",
                    "postgres",
                ]
                .map(String::from)
                .to_vec(),
            ),
        }),
        period_seconds: Some(10),
        failure_threshold: Some(3),
        ..Default::default()
    };
    let container = Container {
        name: "postgres".to_string(),
        image: Some(engine_image(managed)),
        args: Some(vec![
            "-c".to_string(),
            format!("max_connections={max_connections}"),
        ]),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some("postgres".to_string()),
            container_port: PORT,
            protocol: Some("TCP".to_string()),
            ..Default::default()
        }]),
        readiness_probe: Some(ready.clone()),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(60),
            period_seconds: Some(30),
            ..ready
        }),
        resources: Some(with_default_requests(
            managed.resources.clone(),
            "100m",
            "256Mi",
        )),
        volume_mounts: Some(vec![
            volume_mount("data", "/var/lib/postgresql/data"),
            volume_mount("bootstrap", "/docker-entrypoint-initdb.d"),
            volume_mount("run", "/var/run/postgresql"),
            volume_mount("tmp", "/tmp"),
        ]),
        ..restricted_container()
    };
    let storage = managed.storage.clone().unwrap_or_default();
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".to_string()),
            labels: Some(labels::all(input.name, COMPONENT)),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_string()]),
            storage_class_name: storage.storage_class_name,
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    storage
                        .size
                        .unwrap_or_else(|| Quantity(DEFAULT_SIZE.to_string())),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let selector = engine_labels(input, engine);
    let mut pod_labels = labels::all(input.name, COMPONENT);
    pod_labels.extend(selector.clone());
    let empty_dir = |name: &str| Volume {
        name: name.to_string(),
        empty_dir: Some(Default::default()),
        ..Default::default()
    };
    let restricted = restricted_pod(input.users, POSTGRES_UID);
    StatefulSet {
        metadata: input.metadata(engine.name.clone(), COMPONENT),
        spec: Some(StatefulSetSpec {
            replicas: Some(1),
            service_name: Some(engine.name.clone()),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            },
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some(
                        if managed.delete_claims {
                            "Delete"
                        } else {
                            "Retain"
                        }
                        .to_string(),
                    ),
                    when_scaled: Some("Retain".to_string()),
                },
            ),
            volume_claim_templates: Some(vec![claim]),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..Default::default()
                }),
                spec: Some(k8s_openapi::api::core::v1::PodSpec {
                    containers: vec![container],
                    volumes: Some(vec![
                        Volume {
                            name: "bootstrap".to_string(),
                            config_map: Some(ConfigMapVolumeSource {
                                name: bootstrap_name(input),
                                default_mode: Some(0o555),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                        empty_dir("run"),
                        empty_dir("tmp"),
                    ]),
                    ..restricted
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_policy_admits_only_the_clairs_own_pods_to_the_engines() {
        let spec = crate::api::ClairSpec::default();
        let input = ClairInput::example(&spec);
        let policy = network_policy(&input).spec.unwrap();
        assert_eq!(
            policy.pod_selector.unwrap().match_labels.unwrap(),
            labels::selector("clair", COMPONENT)
        );
        let rule = &policy.ingress.unwrap()[0];
        let peer = rule.from.as_ref().unwrap()[0].pod_selector.clone().unwrap();
        assert_eq!(
            peer.match_expressions.clone().unwrap()[0]
                .values
                .clone()
                .unwrap(),
            ["clair", "clair-indexer", "clair-matcher", "clair-notifier"]
        );
        assert_eq!(
            rule.ports.as_ref().unwrap()[0].port,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(PORT))
        );
        // It covers the engines' pods, and lets in the labels the service controller gives
        // the services' pods and the updaters' (not another Clair's).
        let engine = &engines(&input, &ManagedDatabase::default())[0];
        let engine_pods = statefulset(&input, &ManagedDatabase::default(), engine)
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .labels
            .unwrap();
        let covered = network_policy(&input).spec.unwrap().pod_selector.unwrap();
        assert!(labels::selects(&covered, &engine_pods));
        for kind in ServiceKind::VARIANTS {
            let pods = labels::selector(&input.child_name(*kind), kind.as_str());
            assert!(labels::selects(&peer, &pods), "{kind:?}");
        }
        assert!(labels::selects(&peer, &labels::all(input.name, "updaters")));
        assert!(!labels::selects(
            &peer,
            &labels::selector("other-indexer", "indexer")
        ));
    }
    use crate::api::ClairSpec;

    fn input(spec: &ClairSpec) -> ClairInput<'_> {
        ClairInput::example(spec)
    }

    #[test]
    fn one_engine_or_one_per_service() {
        let spec = ClairSpec::default();
        let shared = engines(&input(&spec), &ManagedDatabase::default());
        assert_eq!(shared.len(), 1);
        assert_eq!(shared[0].name, "clair-database");
        let per = engines(
            &input(&spec),
            &ManagedDatabase {
                per_service: true,
                ..Default::default()
            },
        );
        assert_eq!(
            per.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
            [
                "clair-database-indexer",
                "clair-database-matcher",
                "clair-database-notifier"
            ]
        );
    }

    #[test]
    fn connection_strings_point_at_the_engine_with_the_roles_password() {
        let spec = ClairSpec::default();
        let input = input(&spec);
        let engines = engines(&input, &ManagedDatabase::default());
        let passwords = BTreeMap::from([
            ("indexer-password".to_string(), "i'pw".to_string()),
            ("matcher-password".to_string(), "mpw".to_string()),
            ("notifier-password".to_string(), "npw".to_string()),
        ]);
        let strings = conn_strings(&input, &ManagedDatabase::default(), &engines, &passwords);
        let indexer = connstring::parse(&strings.indexer).unwrap();
        assert_eq!(indexer.get("host"), Some("clair-database.scan.svc"));
        assert_eq!(indexer.get("password"), Some("i'pw"));
        assert_eq!(indexer.get("dbname"), Some("indexer"));
        assert!(strings.notifier.is_some());
    }

    #[test]
    fn claims_are_kept_unless_asked() {
        let spec = ClairSpec::default();
        let input = input(&spec);
        let managed = ManagedDatabase::default();
        let engine = &engines(&input, &managed)[0];
        let policy = |m: &ManagedDatabase| {
            statefulset(&input, m, engine)
                .spec
                .unwrap()
                .persistent_volume_claim_retention_policy
                .unwrap()
                .when_deleted
                .unwrap()
        };
        assert_eq!(policy(&managed), "Retain");
        assert_eq!(
            policy(&ManagedDatabase {
                delete_claims: true,
                ..Default::default()
            }),
            "Delete"
        );
        let set = statefulset(&input, &managed, engine);
        let container = &set.spec.unwrap().template.spec.unwrap().containers[0];
        let env = container.env.as_ref().unwrap();
        // Passwords only by reference.
        assert!(
            env.iter()
                .all(|e| !e.name.ends_with("PASSWORD") || e.value.is_none())
        );
        assert_eq!(
            container.args.as_ref().unwrap(),
            &["-c".to_string(), "max_connections=200".to_string()]
        );
    }
}
