//! A database served with a certificate of a private CA, reached with
//! `sslmode=verify-full`: without the CA the operator's own check refuses it (and nothing is
//! deployed); with the CA given once in the Clair's `spec.pod.caBundle`, the operator's check
//! trusts it and so do Clair's pods (the bundle mounted in a folder of their `SSL_CERT_DIR`),
//! which connect, migrate and turn Ready.

use anyhow::ensure;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde_json::{Value, json};

use crate::scan::{START, restricted_namespace, until_available};
use crate::support::TestEnv;
use crate::support::clair::{
    apply_json, condition, create_clair, databases_secret, external_spec_without_notifier,
    patch_spec, wait_clair,
};

const PASSWORD: &str = "private-ca-password";

pub async fn a_database_behind_a_private_ca_is_trusted_through_the_ca_bundle(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = restricted_namespace(env, "private-ca").await?;
    let prefix = ns.replace('-', "_");
    let mut strings = serde_json::Map::new();
    for service in ["indexer", "matcher"] {
        let role = format!("{prefix}_{service}");
        env.postgres.create_role_and_database(&role, PASSWORD)?;
        let string = env
            .postgres
            .connstring(&role, PASSWORD, &role)
            .replace("sslmode=disable", "sslmode=verify-full");
        strings.insert(service.to_string(), Value::String(string));
    }
    databases_secret(&client, &ns, strings).await?;
    apply_json::<ConfigMap>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "corporate-ca"}, "data": {"ca.crt": env.postgres.ca_pem()}}),
    )
    .await?;
    create_clair(&client, &ns, "clair", external_spec_without_notifier()).await?;

    // Without the CA: the certificate is not trusted, nothing is deployed.
    let refused = wait_clair(
        &client,
        &ns,
        "clair",
        "DatabaseReady False for an unknown issuer",
        // Past the first check (checks run apart from the reconcile: until one ends, the
        // database is not checked yet).
        |c| {
            condition(c, "DatabaseReady")
                .is_some_and(|c| c.status == "False" && c.reason != "DatabaseNotChecked")
        },
    )
    .await?;
    let message = &condition(&refused, "DatabaseReady")
        .expect("waited for it")
        .message;
    ensure!(
        message.to_lowercase().contains("certificate") || message.contains("issuer"),
        "DatabaseReady does not say the certificate is the problem: {message}"
    );
    ensure!(
        !message.contains(PASSWORD),
        "the condition quotes the password: {message}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    ensure!(
        deployments
            .list(&Default::default())
            .await?
            .items
            .is_empty(),
        "services were deployed against an untrusted database"
    );

    // The CA, given once for every pod of the Clair.
    patch_spec(
        &client,
        &ns,
        "clair",
        json!({"pod": {"caBundle": {"configMap": "corporate-ca"}}}),
    )
    .await?;
    until_available(
        env,
        &client,
        &ns,
        START,
        "clair Available with verify-full through the caBundle",
    )
    .await?;
    // The pods trusted it themselves: each mounts the bundle where SSL_CERT_DIR looks.
    for name in ["clair-indexer", "clair-matcher"] {
        let deployment = deployments.get(name).await?;
        let pod = deployment
            .spec
            .and_then(|s| s.template.spec)
            .expect("a pod template");
        let mounted = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == "/var/run/certs");
        ensure!(mounted, "{name} does not mount the caBundle");
    }
    Ok(())
}
