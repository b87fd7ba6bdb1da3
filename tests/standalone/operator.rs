//! `clair-operator run` as a process: the binary cargo built for these tests, acting as the
//! ServiceAccount `deploy/` installs (the test control plane's operator user impersonates
//! it, so the audit log tells its requests apart), its log in the control plane's folder.

use std::path::PathBuf;
use std::process::Command;
use std::time::SystemTime;

use anyhow::Context;
use clair_testenv::{OPERATOR, Process};
use kube::config::Kubeconfig;

use crate::support::{OPERATOR_SERVICE_ACCOUNT, TestEnv};

pub struct OperatorProcess {
    process: Process,
    /// When it started, for reading its requests from the audit log.
    pub started: SystemTime,
}

impl OperatorProcess {
    /// Starts `clair-operator run ARGS` as `name` (its log: `logs/NAME.log`; its identity in
    /// the leader election: `NAME`; in the audit log, the ServiceAccount with the extra group
    /// `clair-operator-test:NAME`, so two processes' requests can be told apart).
    pub fn start(env: &TestEnv, name: &str, args: &[&str]) -> anyhow::Result<Self> {
        let kubeconfig = kubeconfig(env, name)?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_clair-operator"));
        command
            .arg("run")
            // Loopback only, on a free port.
            .args(["--metrics-listen", "127.0.0.1:0"])
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", name)
            .env("RUST_LOG", "info,clair_operator=debug");
        let started = SystemTime::now();
        let process = Process::spawn_command(name, command, &env.plane.dir().join("logs"))?;
        Ok(Self { process, started })
    }

    /// Kills it at once (SIGKILL), as a node failure or the OOM killer would.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        let pid = self.process.id().to_string();
        let killed = Command::new("kill").args(["-KILL", &pid]).status()?;
        anyhow::ensure!(killed.success(), "kill -KILL {pid}");
        Ok(())
    }

    /// The peak resident memory of the process so far, in bytes (`VmHWM`).
    pub fn peak_rss(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.process.id()))?;
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .context("no VmHWM in /proc/PID/status")?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()?;
        Ok(kib * 1024)
    }

    /// How many TCP connections the process holds open to `port` (any address): its sockets
    /// (`/proc/PID/fd`) matched against the kernel's table of connections (`/proc/PID/net/tcp`,
    /// `tcp6`), established ones only.
    pub fn connections_to(&self, port: u16) -> anyhow::Result<usize> {
        let pid = self.process.id();
        let mut sockets = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
            // A descriptor closed since the listing is simply not counted.
            if let Ok(target) = std::fs::read_link(entry?.path())
                && let Some(inode) = target
                    .to_str()
                    .and_then(|t| t.strip_prefix("socket:["))
                    .and_then(|t| t.strip_suffix(']'))
            {
                sockets.insert(inode.to_string());
            }
        }
        let remote = format!(":{port:04X}");
        let mut count = 0;
        for table in ["tcp", "tcp6"] {
            let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))?;
            // Columns: sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            for line in text.lines().skip(1) {
                let columns: Vec<&str> = line.split_whitespace().collect();
                if let [_, _, rem, state, _, _, _, _, _, inode, ..] = columns[..]
                    && rem.ends_with(&remote)
                    && state == "01"
                    && sockets.contains(inode)
                {
                    count += 1;
                }
            }
        }
        Ok(count)
    }

    /// Fails with the end of its log if it has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        Ok(self.process.check_running()?)
    }

    /// Its metrics as Prometheus text, from the address its log names.
    pub fn metrics(&self) -> anyhow::Result<String> {
        let log = self.log();
        let address = log
            .lines()
            .filter(|l| l.contains("serving metrics and health"))
            .find_map(|l| l.split("listen=").nth(1)?.split_whitespace().next())
            .context("the operator has not said where it serves metrics yet")?;
        let mut response = ureq::get(&format!("http://{address}/metrics")).call()?;
        Ok(response.body_mut().read_to_string()?)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.process.log()).unwrap_or_default()
    }
}

/// Installs `deploy/namespaced` (`overlay`) or `deploy/base` as the README says.
/// `--webhook-listen` and `--webhook-url` for a webhook on a free loopback port, which the
/// apiserver calls by URL.
pub fn loopback_webhook() -> anyhow::Result<Vec<String>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    Ok(vec![
        "--webhook-listen".to_string(),
        format!("127.0.0.1:{port}"),
        "--webhook-url".to_string(),
        format!("https://127.0.0.1:{port}"),
    ])
}

/// Deletes the webhook configurations an operator process with a [`loopback_webhook`]
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
    crate::support::clair::external_databases(env, &client, &ns).await?;
    crate::support::clair::notifier_dropin(&client, &ns, "http://quay.example.com/notify").await?;
    Ok((client, ns))
}

/// The operator user's kubeconfig, impersonating the operator's ServiceAccount (with the
/// group naming the process `name`).
fn kubeconfig(env: &TestEnv, name: &str) -> anyhow::Result<PathBuf> {
    let mut kubeconfig = Kubeconfig::read_from(env.plane.kubeconfig_path(OPERATOR))?;
    for user in &mut kubeconfig.auth_infos {
        if let Some(auth) = user.auth_info.as_mut() {
            auth.impersonate = Some(OPERATOR_SERVICE_ACCOUNT.to_string());
            auth.impersonate_groups = Some(vec![
                "system:serviceaccounts".to_string(),
                "system:authenticated".to_string(),
                format!("{TEST_GROUP}{name}"),
            ]);
        }
    }
    let path = env.plane.dir().join(format!("{name}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&kubeconfig)?)?;
    Ok(path)
}

/// The group prefix naming an operator process in the audit log.
pub const TEST_GROUP: &str = "clair-operator-test:";

/// The audit log's entries of requests made as the operator's ServiceAccount since `since`.
pub fn requests_since(env: &TestEnv, since: SystemTime) -> anyhow::Result<Vec<serde_json::Value>> {
    crate::support::audited_since(env, since, |entry| {
        entry["impersonatedUser"]["username"] == OPERATOR_SERVICE_ACCOUNT
    })
}
