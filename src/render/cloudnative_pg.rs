//! A managed database on CloudNativePG (`postgresql.cnpg.io/v1`): one `Cluster` per engine
//! (the engines of `database::engines`, shared or per service), its roles declared in the
//! Cluster's `managed.roles` with passwords from Secrets the operator writes (the ones it
//! generated once, in the passwords Secret), a `Database` per role, and the services
//! connecting to the Cluster's read-write Service, which CloudNativePG points at whichever
//! instance is the primary. Pure builders, and the reading of a Cluster's status.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use super::clair::ClairInput;
use super::database::{COMPONENT, DEFAULT_MAX_CONNECTIONS, Engine, engine_image, password_key};
use super::pod::with_default_requests;
use crate::api::ServiceKind;
use crate::api::clair::ManagedDatabase;

/// An operand image: PostgreSQL with what CloudNativePG's instance manager needs.
pub const DEFAULT_IMAGE: &str = "ghcr.io/cloudnative-pg/postgresql:17";
pub const DEFAULT_INSTANCES: i32 = 2;
const DEFAULT_SIZE: &str = "50Gi";
/// Marks a Secret whose change CloudNativePG applies at once (a managed role's password).
const RELOAD_LABEL: &str = "cnpg.io/reload";

pub fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("postgresql.cnpg.io", "v1", "Cluster"),
        "clusters",
    )
}

pub fn database_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("postgresql.cnpg.io", "v1", "Database"),
        "databases",
    )
}

/// The Service CloudNativePG points at the current primary: `CLUSTER-rw`.
pub fn read_write_service(engine: &Engine) -> String {
    format!("{}-rw", engine.name)
}

/// The Secret holding `role`'s login for CloudNativePG (`kubernetes.io/basic-auth`).
pub fn role_secret_name(input: &ClairInput, role: ServiceKind) -> String {
    format!("{}-database-{}-login", input.name, role.as_str())
}

/// The Cluster's data lives as long as the Cluster: CloudNativePG's claims are owned by it.
/// So, as the built-in engine's claims outlive the `Clair` unless `deleteClaims` is set,
/// the Cluster has no owner then (and is kept, for a `Clair` of the same name to find).
fn metadata_of(
    input: &ClairInput,
    managed: &ManagedDatabase,
    name: String,
) -> kube::api::ObjectMeta {
    let mut metadata = input.metadata(name, COMPONENT);
    if !managed.delete_claims {
        metadata.owner_references = None;
    }
    metadata
}

/// `role`'s login, with the password generated once (`passwords`, by key).
pub fn role_secret(
    input: &ClairInput,
    role: ServiceKind,
    passwords: &BTreeMap<String, String>,
) -> Secret {
    let mut metadata = input.metadata(role_secret_name(input, role), COMPONENT);
    metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(RELOAD_LABEL.to_string(), "true".to_string());
    let password = passwords
        .get(&password_key(role))
        .cloned()
        .unwrap_or_default();
    Secret {
        metadata,
        data: Some(BTreeMap::from([
            (
                "username".to_string(),
                ByteString(role.as_str().as_bytes().to_vec()),
            ),
            ("password".to_string(), ByteString(password.into_bytes())),
        ])),
        type_: Some("kubernetes.io/basic-auth".to_string()),
        ..Default::default()
    }
}

/// The Cluster of `engine`: its instances, image, storage, resources and `max_connections`
/// from the spec, and a login role per service it serves.
pub fn cluster(input: &ClairInput, managed: &ManagedDatabase, engine: &Engine) -> DynamicObject {
    let resource = cluster_resource();
    let mut object = DynamicObject::new(&engine.name, &resource);
    object.metadata = metadata_of(input, managed, engine.name.clone());
    let storage = managed.storage.clone().unwrap_or_default();
    let mut storage_spec = json!({
        "size": storage.size.map_or_else(|| DEFAULT_SIZE.to_string(), |q| q.0),
    });
    if let Some(class) = storage.storage_class_name {
        storage_spec["storageClass"] = json!(class);
    }
    let roles: Vec<Value> = engine
        .roles
        .iter()
        .map(|role| {
            json!({
                "name": role.as_str(),
                "ensure": "present",
                "login": true,
                "passwordSecret": {"name": role_secret_name(input, *role)},
            })
        })
        .collect();
    let max_connections = managed.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
    let instances = managed.instances.unwrap_or(DEFAULT_INSTANCES);
    let mut postgresql = json!({
        "parameters": {"max_connections": max_connections.to_string()},
    });
    if instances > 1 {
        // A commit waits for one standby while one is healthy: what a Clair indexed is on
        // the instance a failover promotes. With no standby healthy, commits go on alone
        // (`preferred`) rather than block every index.
        postgresql["synchronous"] = json!({
            "method": "any",
            "number": 1,
            "dataDurability": "preferred",
        });
    }
    object.data = json!({
        "spec": {
            "instances": instances,
            "imageName": engine_image(managed),
            "storage": storage_spec,
            "resources": with_default_requests(managed.resources.clone(), "100m", "256Mi"),
            "postgresql": postgresql,
            // Clair's pools keep their connections open, so a smart shutdown (waiting for
            // every client to leave) always runs out its whole window before the fast one:
            // a switchover would wait three minutes for nothing.
            "smartShutdownTimeout": 0,
            "managed": {"roles": roles},
        }
    });
    object
}

/// The database of `role` on `engine`, owned by the role. Kept in PostgreSQL when the
/// resource goes (`retain`): the data is never dropped by a resource's deletion.
pub fn database(
    input: &ClairInput,
    managed: &ManagedDatabase,
    engine: &Engine,
    role: ServiceKind,
) -> DynamicObject {
    let resource = database_resource();
    // As a per-service engine is named: one name per role whichever engine serves it.
    let name = format!("{}-database-{}", input.name, role.as_str());
    let mut object = DynamicObject::new(&name, &resource);
    object.metadata = metadata_of(input, managed, name);
    object.data = json!({
        "spec": {
            "cluster": {"name": engine.name},
            "name": role.as_str(),
            "owner": role.as_str(),
            "ensure": "present",
            "databaseReclaimPolicy": "retain",
        }
    });
    object
}

/// The pod serving as a Cluster's primary, from its status: `currentPrimary`, when it is
/// the one CloudNativePG wants (`targetPrimary`: they differ during a switchover or a
/// failover) and among the healthy instances. `None` while no primary serves.
pub fn serving_primary(cluster: &Value) -> Option<String> {
    let status = cluster.get("status")?;
    let current = status.get("currentPrimary")?.as_str()?;
    let target = status
        .get("targetPrimary")
        .and_then(Value::as_str)
        .unwrap_or(current);
    let healthy = status.pointer("/instancesStatus/healthy")?.as_array()?;
    (!current.is_empty() && current == target && healthy.iter().any(|h| h == current))
        .then(|| current.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ClairSpec;
    use crate::api::clair::DatabaseEngine;
    use crate::render::database::engines;

    fn managed() -> ManagedDatabase {
        ManagedDatabase {
            engine: Some(DatabaseEngine::CloudNativePg),
            ..Default::default()
        }
    }

    #[test]
    fn a_shared_cluster_declares_a_login_role_and_a_database_per_service() {
        let spec = ClairSpec::default();
        let input = ClairInput::example(&spec);
        let managed = managed();
        let engine = &engines(&input, &managed)[0];
        let cluster = cluster(&input, &managed, engine);
        assert_eq!(cluster.metadata.name.as_deref(), Some("clair-database"));
        let spec = &cluster.data["spec"];
        assert_eq!(spec["instances"], DEFAULT_INSTANCES);
        assert_eq!(spec["imageName"], DEFAULT_IMAGE);
        assert_eq!(spec["postgresql"]["parameters"]["max_connections"], "200");
        assert_eq!(spec["postgresql"]["synchronous"]["number"], 1);
        let roles: Vec<&str> = spec["managed"]["roles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["passwordSecret"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            [
                "clair-database-indexer-login",
                "clair-database-matcher-login",
                "clair-database-notifier-login"
            ]
        );
        let db = database(&input, &managed, engine, ServiceKind::Matcher);
        assert_eq!(db.metadata.name.as_deref(), Some("clair-database-matcher"));
        assert_eq!(db.data["spec"]["cluster"]["name"], "clair-database");
        assert_eq!(db.data["spec"]["owner"], "matcher");
        assert_eq!(db.data["spec"]["databaseReclaimPolicy"], "retain");
    }

    #[test]
    fn one_instance_replicates_to_nobody_and_services_connect_to_the_primary_over_tls() {
        let spec = ClairSpec::default();
        let input = ClairInput::example(&spec);
        let single = ManagedDatabase {
            instances: Some(1),
            ..managed()
        };
        let engine = &engines(&input, &single)[0];
        let spec = cluster(&input, &single, engine).data["spec"].clone();
        assert!(spec["postgresql"].get("synchronous").is_none());
        let strings = crate::render::database::conn_strings(
            &input,
            &single,
            &engines(&input, &single),
            &BTreeMap::new(),
        );
        let indexer = crate::database::connstring::parse(&strings.indexer).unwrap();
        assert_eq!(indexer.get("host"), Some("clair-database-rw.scan.svc"));
        assert_eq!(indexer.get("sslmode"), Some("require"));
    }

    #[test]
    fn the_cluster_outlives_the_clair_unless_its_claims_are_deleted_with_it() {
        let spec = ClairSpec::default();
        let input = ClairInput::example(&spec);
        let kept = managed();
        let engine = &engines(&input, &kept)[0];
        assert!(
            cluster(&input, &kept, engine)
                .metadata
                .owner_references
                .is_none()
        );
        let deleted = ManagedDatabase {
            delete_claims: true,
            ..managed()
        };
        assert!(
            cluster(&input, &deleted, engine)
                .metadata
                .owner_references
                .is_some()
        );
    }

    #[test]
    fn a_role_secret_is_a_basic_auth_login_cloudnative_pg_reloads() {
        let spec = ClairSpec::default();
        let input = ClairInput::example(&spec);
        let passwords = BTreeMap::from([("indexer-password".to_string(), "s3cret".to_string())]);
        let secret = role_secret(&input, ServiceKind::Indexer, &passwords);
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/basic-auth"));
        let data = secret.data.unwrap();
        assert_eq!(data["username"].0, b"indexer");
        assert_eq!(data["password"].0, b"s3cret");
        assert_eq!(secret.metadata.labels.unwrap()[RELOAD_LABEL], "true");
    }

    #[test]
    fn only_a_healthy_wanted_primary_serves() {
        let status = |current: &str, target: &str, healthy: &[&str]| {
            json!({"status": {
                "currentPrimary": current,
                "targetPrimary": target,
                "instancesStatus": {"healthy": healthy},
            }})
        };
        assert_eq!(
            serving_primary(&status("db-1", "db-1", &["db-1", "db-2"])).as_deref(),
            Some("db-1")
        );
        // Failing over: CloudNativePG wants db-2, which is not promoted yet.
        assert_eq!(serving_primary(&status("db-1", "db-2", &["db-2"])), None);
        // The primary's pod is gone.
        assert_eq!(serving_primary(&status("db-1", "db-1", &["db-2"])), None);
        assert_eq!(serving_primary(&json!({})), None);
    }
}
