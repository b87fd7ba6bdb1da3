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
    /// Starts `clair-operator run ARGS` as `name` (its log: `logs/NAME.log`).
    pub fn start(env: &TestEnv, name: &str, args: &[&str]) -> anyhow::Result<Self> {
        let kubeconfig = kubeconfig(env)?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_clair-operator"));
        command
            .arg("run")
            // Loopback only, on a free port.
            .args(["--metrics-listen", "127.0.0.1:0"])
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info,clair_operator=debug");
        let started = SystemTime::now();
        let process = Process::spawn_command(name, command, &env.plane.dir().join("logs"))?;
        Ok(Self { process, started })
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

    /// Fails with the end of its log if it has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        Ok(self.process.check_running()?)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.process.log()).unwrap_or_default()
    }
}

/// The operator user's kubeconfig, impersonating the operator's ServiceAccount.
fn kubeconfig(env: &TestEnv) -> anyhow::Result<PathBuf> {
    let mut kubeconfig = Kubeconfig::read_from(env.plane.kubeconfig_path(OPERATOR))?;
    for user in &mut kubeconfig.auth_infos {
        if let Some(auth) = user.auth_info.as_mut() {
            auth.impersonate = Some(OPERATOR_SERVICE_ACCOUNT.to_string());
        }
    }
    let path = env
        .plane
        .dir()
        .join("operator-as-service-account.kubeconfig");
    std::fs::write(&path, serde_json::to_string(&kubeconfig)?)?;
    Ok(path)
}

/// The audit log's entries of requests made as the operator's ServiceAccount since `since`.
pub fn requests_since(env: &TestEnv, since: SystemTime) -> anyhow::Result<Vec<serde_json::Value>> {
    crate::support::audited_since(env, since, |entry| {
        entry["impersonatedUser"]["username"] == OPERATOR_SERVICE_ACCOUNT
    })
}
