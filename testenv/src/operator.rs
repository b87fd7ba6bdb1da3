//! `clair-operator run` as a process of its own, the one way the harness starts the binary
//! (the standalone tier, `clair-dev`, the benchmark): its name, the identity it acts as, its
//! arguments; its metrics address chosen here and passed to it, never read back from its
//! log.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use kube::config::Kubeconfig;

use crate::controlplane::{ControlPlane, OPERATOR, free_ports};
use crate::{Error, Process, Result, io_error};

/// How to start one operator process.
#[derive(Clone, Debug, Default)]
pub struct Launch {
    /// Its name: its log is `logs/NAME.log` in the control plane's folder, and `POD_NAME`
    /// (its identity in the leader election and in its Events).
    pub name: String,
    /// Act as this user (a ServiceAccount's name), with these groups, instead of as the
    /// control plane's `clair-operator` user itself: the operator user impersonates it.
    pub impersonate: Option<(String, Vec<String>)>,
    /// Serve the admission webhook on a free loopback port, which the apiserver calls by
    /// URL (no Service reaches a process here); else the arguments say what to do.
    pub loopback_webhook: bool,
    /// The arguments after `run` (the metrics address is added).
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

/// A running `clair-operator run`, stopped when dropped.
pub struct OperatorProcess {
    process: Process,
    metrics: SocketAddr,
    /// When it started, for reading its requests from the audit log.
    pub started: SystemTime,
}

impl ControlPlane {
    /// Starts `binary run` as `launch` says, against this control plane.
    pub fn start_operator(&self, binary: &Path, launch: &Launch) -> Result<OperatorProcess> {
        let [metrics_port, webhook_port] = free_ports::<2>()?;
        let metrics = SocketAddr::from(([127, 0, 0, 1], metrics_port));
        let kubeconfig = self.operator_kubeconfig(launch)?;
        let mut command = Command::new(binary);
        command
            .arg("run")
            .arg(format!("--metrics-listen={metrics}"))
            // Scraped by the tests alone, on loopback: the kwok tier's in-process operator
            // checks the secure serving.
            .arg("--metrics-insecure")
            .args(&launch.args)
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", &launch.name)
            .envs(launch.env.iter().map(|(k, v)| (k, v)));
        // The harness's databases are on loopback, which a deployed operator's checks
        // refuse by default: reached unless the arguments say otherwise.
        if !launch
            .args
            .iter()
            .any(|arg| arg.starts_with("--database-networks-refused"))
        {
            command.arg("--database-networks-refused=none");
        }
        if launch.loopback_webhook {
            command.args([
                format!("--webhook-listen=127.0.0.1:{webhook_port}"),
                format!("--webhook-url=https://127.0.0.1:{webhook_port}"),
            ]);
        }
        let started = SystemTime::now();
        let process = Process::spawn_command(&launch.name, command, &self.dir().join("logs"))?;
        Ok(OperatorProcess {
            process,
            metrics,
            started,
        })
    }

    /// The operator user's kubeconfig, impersonating `launch`'s identity when it names one.
    fn operator_kubeconfig(&self, launch: &Launch) -> Result<PathBuf> {
        let path = self.kubeconfig_path(OPERATOR);
        let Some((user, groups)) = &launch.impersonate else {
            return Ok(path);
        };
        let mut kubeconfig = Kubeconfig::read_from(&path)
            .map_err(|e| Error::Kubeconfig(format!("{}: {e}", path.display())))?;
        for auth in kubeconfig
            .auth_infos
            .iter_mut()
            .filter_map(|user| user.auth_info.as_mut())
        {
            auth.impersonate = Some(user.clone());
            auth.impersonate_groups = Some(groups.clone());
        }
        let path = self.dir().join(format!("{}.kubeconfig", launch.name));
        let text = serde_json::to_string(&kubeconfig).map_err(|e| Error::Invalid {
            what: "kubeconfig",
            detail: e.to_string(),
        })?;
        std::fs::write(&path, text).map_err(io_error(format!("write {}", path.display())))?;
        Ok(path)
    }
}

impl OperatorProcess {
    /// Its process id.
    pub fn id(&self) -> u32 {
        self.process.id()
    }

    /// Where it serves `/metrics`, `/healthz` and `/readyz`.
    pub fn metrics_address(&self) -> SocketAddr {
        self.metrics
    }

    /// Its metrics as Prometheus text.
    pub fn metrics(&self) -> Result<String> {
        let url = format!("http://{}/metrics", self.metrics);
        let failed =
            |e: ureq::Error| io_error(format!("GET {url}"))(std::io::Error::other(e.to_string()));
        let mut response = ureq::get(&url).call().map_err(failed)?;
        response.body_mut().read_to_string().map_err(failed)
    }

    /// Kills it at once (SIGKILL), as a node failure or the OOM killer would.
    pub fn kill(&mut self) -> Result<()> {
        let pid = libc::pid_t::try_from(self.process.id()).map_err(|e| Error::Invalid {
            what: "process id",
            detail: e.to_string(),
        })?;
        // SAFETY: kill(2) with a pid of a child of ours; no memory is shared.
        if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
            return Err(io_error(format!("kill -KILL {pid}"))(
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// The peak resident memory of the process so far, in bytes (`VmHWM`).
    pub fn peak_rss(&self) -> Result<u64> {
        let path = format!("/proc/{}/status", self.process.id());
        let status = std::fs::read_to_string(&path).map_err(io_error(format!("read {path}")))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .ok_or_else(|| Error::Missing(format!("no VmHWM in {path}")))
    }

    /// How many TCP connections the process holds open to `port` (any address): its sockets
    /// (`/proc/PID/fd`) matched against the kernel's table of connections (`/proc/PID/net/tcp`,
    /// `tcp6`), established ones only.
    pub fn connections_to(&self, port: u16) -> Result<usize> {
        let pid = self.process.id();
        let read_dir = format!("/proc/{pid}/fd");
        let mut sockets = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(&read_dir).map_err(io_error(format!("read {read_dir}")))? {
            // A descriptor closed since the listing is simply not counted.
            if let Ok(target) = entry.and_then(|e| std::fs::read_link(e.path()))
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
            let path = format!("/proc/{pid}/net/{table}");
            let text = std::fs::read_to_string(&path).map_err(io_error(format!("read {path}")))?;
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

    /// Stops it (SIGTERM), waiting up to `grace` before killing it.
    pub fn stop_within(&mut self, grace: std::time::Duration) {
        self.process.stop_within(grace);
    }

    /// Fails with the end of its log if it has exited.
    pub fn check_running(&mut self) -> Result<()> {
        self.process.check_running()
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.process.log()).unwrap_or_default()
    }

    /// Where its log is.
    pub fn log_path(&self) -> &Path {
        self.process.log()
    }
}
