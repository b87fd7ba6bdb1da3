//! `clair-operator run` as a process, through the harness's launcher: the binary cargo built
//! for these tests, acting as the ServiceAccount `deploy/` installs (the test control plane's
//! operator user impersonates it, so the audit log tells its requests apart); and the
//! installs, webhook arguments and audit readings the standalone tests share.

use std::path::Path;
use std::time::SystemTime;

use clair_testenv::Launch;
pub use clair_testenv::OperatorProcess;

use crate::support::{OPERATOR_SERVICE_ACCOUNT, TestEnv};

/// Starts `clair-operator run ARGS` as `name` (its log: `logs/NAME.log`; its identity in
/// the leader election: `NAME`; in the audit log, the ServiceAccount with the extra group
/// `clair-operator-test:NAME`, so two processes' requests can be told apart).
pub fn start(env: &TestEnv, name: &str, args: &[&str]) -> anyhow::Result<OperatorProcess> {
    launch(env, name, args, false)
}

/// [`start`], the admission webhook served on a free loopback port, which the apiserver calls
/// by URL (see [`remove_webhook_configurations`]).
pub fn start_with_webhook(
    env: &TestEnv,
    name: &str,
    args: &[&str],
) -> anyhow::Result<OperatorProcess> {
    launch(env, name, args, true)
}

fn launch(
    env: &TestEnv,
    name: &str,
    args: &[&str],
    loopback_webhook: bool,
) -> anyhow::Result<OperatorProcess> {
    let launch = Launch {
        name: name.to_string(),
        impersonate: Some((
            OPERATOR_SERVICE_ACCOUNT.to_string(),
            vec![
                "system:serviceaccounts".to_string(),
                "system:authenticated".to_string(),
                format!("{TEST_GROUP}{name}"),
            ],
        )),
        loopback_webhook,
        args: args.iter().map(|a| a.to_string()).collect(),
        env: vec![(
            "RUST_LOG".to_string(),
            "info,clair_operator=debug".to_string(),
        )],
    };
    let binary = Path::new(env!("CARGO_BIN_EXE_clair-operator"));
    Ok(env.plane.start_operator(binary, &launch)?)
}

/// Deletes the webhook configurations an operator process [`start_with_webhook`]
/// registered, once it is gone: they would send every labelled write to a port nobody
/// listens on (`failurePolicy: Fail`), and the next tests' operators could write no config.
pub async fn remove_webhook_configurations(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    use kube::api::{Api, DeleteParams};
    let name = clair_operator::webhook::CONFIGURATION_NAME;
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    crate::support::eventually(
        std::time::Duration::from_secs(10),
        "webhook configurations gone",
        || {
            let api = Api::<ValidatingWebhookConfiguration>::all(client.clone());
            async move { Ok(api.get_opt(name).await?.is_none()) }
        },
    )
    .await
}

/// `deploy/namespaced` as the README installs it, without the cluster-wide binding an
/// earlier test's `deploy/base` left: RoleBindings per namespace are then the only grants.
pub fn install_namespaced(env: &TestEnv) -> anyhow::Result<()> {
    install(env, "namespaced")?;
    env.kubectl_ok(
        "default",
        &[
            "delete",
            "clusterrolebinding",
            "clair-operator",
            "--ignore-not-found",
        ],
    )?;
    Ok(())
}

/// Installs `deploy/OVERLAY` (`namespaced` or `base`) as the README says.
pub fn install(env: &TestEnv, overlay: &str) -> anyhow::Result<()> {
    let path = format!("{}/deploy/{overlay}", env!("CARGO_MANIFEST_DIR"));
    env.kubectl_ok(
        "clair-operator",
        &["apply", "--server-side", "--force-conflicts", "-k", &path],
    )?;
    Ok(())
}

/// For the fault tests: the operator installed cluster-wide (`deploy/base`, no process yet)
/// and a namespace `name` ready for Clairs with external databases and a notifier drop-in.
/// The test's client and the namespace.
pub async fn fleet_namespace(env: &TestEnv, name: &str) -> anyhow::Result<(kube::Client, String)> {
    let client = env.client().await?;
    install(env, "base")?;
    let ns = env.namespace(name).await?;
    crate::support::clair::external_inputs(env, &client, &ns).await?;
    Ok((client, ns))
}

/// The group prefix naming an operator process in the audit log.
pub const TEST_GROUP: &str = "clair-operator-test:";

/// The audit log's entries of requests made as the operator's ServiceAccount since `since`.
pub fn requests_since(env: &TestEnv, since: SystemTime) -> anyhow::Result<Vec<serde_json::Value>> {
    crate::support::audited_since(env, since, |entry| {
        entry["impersonatedUser"]["username"] == OPERATOR_SERVICE_ACCOUNT
    })
}
