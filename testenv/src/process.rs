//! One control-plane process: output to a log file, stopped on drop, and killed by the kernel
//! if the process that started it dies (so no etcd or apiserver outlives a crashed test run).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Error, Result, io_error};

/// A process tied to the life of the one that started it; stopped on drop.
pub struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `program` with `args`, its output appended to `log_dir/NAME.log`.
    ///
    /// The child gets `PR_SET_PDEATHSIG`: the kernel sends it SIGKILL when the thread that
    /// started it exits. Start processes from a thread that lives as long as the control
    /// plane (the test binary's or the CLI's main thread).
    pub fn spawn(name: &str, program: &Path, args: &[String], log_dir: &Path) -> Result<Self> {
        Self::spawn_with_env(name, program, args, &[], log_dir)
    }

    /// As [`Process::spawn`], with extra environment variables.
    pub fn spawn_with_env(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &Path)],
        log_dir: &Path,
    ) -> Result<Self> {
        let mut command = Command::new(program);
        command.args(args).envs(env.iter().copied());
        Self::spawn_command(name, command, log_dir)
    }

    /// As [`Process::spawn`], for a command already set up (user, environment, ...).
    pub fn spawn_command(name: &str, mut command: Command, log_dir: &Path) -> Result<Self> {
        let log = log_dir.join(format!("{name}.log"));
        // Appended: a component started again (a fault test) keeps its earlier lines.
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(io_error(format!("create {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(io_error(format!("open {}", log.display())))?;
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let program = command.get_program().to_string_lossy().into_owned();
        let child = command
            .spawn()
            .map_err(io_error(format!("start {program}")))?;
        Ok(Self {
            name: name.to_string(),
            child,
            log,
        })
    }

    /// Fails with the end of the log when the process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(Error::Exited {
                name: self.name.clone(),
                status: status.to_string(),
                log: self.log.display().to_string(),
                tail: self.tail(40),
            }),
            Err(e) => Err(io_error(format!("wait for {}", self.name))(e)),
        }
    }

    /// The last `lines` lines of the log.
    pub fn tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id, to read `/proc/PID/status` or send it a signal.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// SIGTERM, a few seconds' grace, then SIGKILL; always reaps the child.
    pub fn stop(&mut self) {
        self.stop_within(Duration::from_secs(5));
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace` (a profiled operator
    /// writes its heap profile on the way out).
    pub fn stop_within(&mut self, grace: Duration) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: sending a signal to our own child's pid.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until `ready` holds, polling every `every`: fails at once with the end of its log
/// when one of `processes` has exited, and after `timeout` with each one's last lines.
pub(crate) fn wait_while_running(
    processes: &mut [Process],
    what: &str,
    timeout: Duration,
    every: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<()> {
    let start = Instant::now();
    while !ready() {
        processes.iter_mut().try_for_each(Process::check_running)?;
        if start.elapsed() > timeout {
            let tails: Vec<String> = processes
                .iter()
                .map(|p| format!("--- {} ---\n{}", p.name(), p.tail(10)))
                .collect();
            return Err(Error::Timeout {
                what: what.to_string(),
                seconds: timeout.as_secs(),
                detail: format!("; last log lines:\n{}", tails.join("\n")),
            });
        }
        std::thread::sleep(every);
    }
    Ok(())
}

/// A future run on a thread of its own (a current-thread runtime, so the harness's own
/// runtime is not needed), until this is dropped: dropping it ends the future and joins
/// the thread.
pub(crate) struct Background {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    pub(crate) fn spawn<F, Fut>(task: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()>,
    {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                tokio::select! {
                    _ = task() => {}
                    _ = stopped => {}
                }
            });
        });
        Self {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Every process of the machine: its id, command line (NUL-separated) and `/proc` folder.
pub(crate) fn processes() -> impl Iterator<Item = (i32, Vec<u8>, PathBuf)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flat_map(|entries| entries.flatten())
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            Some((pid, cmdline, entry.path()))
        })
}
