//! The host state a real node changes outside its own folder, put back afterwards.
//!
//! A kubelet, containerd, the CNI bridge plugin and kube-proxy write to fixed places on the
//! host: sysctls, iptables chains, a link and an address, network namespaces, cgroups, a few
//! folders under `/var` and `/run`. One real node runs per machine at a time (an exclusive
//! lock on [`STATE_DIR`]), and what it changes is recorded there first, so the next start
//! (after a crash as much as after a clean stop) can sweep leftovers and restore the values.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Error, Result, io_error};

/// Fixed, because what it guards is fixed: one real node per machine.
pub const STATE_DIR: &str = "/run/clair-testenv-node";
/// The node's address, on `lo`: the kubelet refuses a loopback node IP, and logs, exec and
/// port-forward need one the apiserver can reach. Pods reach host services listening on it.
pub const NODE_IP: &str = "10.77.0.1";
/// The pods' addresses: one bridge, one /24, the bridge's gateway `.1`.
pub const POD_CIDR: &str = "10.244.77.0/24";
pub const BRIDGE: &str = "cni-clair0";
/// The Services' addresses (the apiserver's `--service-cluster-ip-range`).
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// Our own iptables chain: pods may talk to each other, to Services and to the host, and to
/// nothing else (tests send no traffic off the machine).
pub const EGRESS_CHAIN: &str = "CLAIR-TESTENV-EGRESS";
/// Our chain in the filter table's OUTPUT: a packet from the host still addressed to a
/// Service after kube-proxy's NAT (a Service kube-proxy has not programmed yet) is refused
/// here. Without it the default route takes it off the machine, and whatever answers there
/// (here, something answered 404 with no body) passes for the Service.
pub const UNPROXIED_CHAIN: &str = "CLAIR-TESTENV-UNPROXIED";
/// What every chain of ours is named after.
const CHAIN_PREFIX: &str = "CLAIR-TESTENV-";

/// Sysctls the kubelet, kube-proxy and the node set: saved before, restored after.
const SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_max",
];

/// Folders the kubelet and containerd create at fixed paths; removed afterwards when they
/// did not exist before the first node started.
const FIXED_DIRS: &[&str] = &[
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/run/containerd",
    "/var/run/netns",
];
// (`/run/containerd` holds the shims' sockets and runc's state even with containerd's own
// root and state elsewhere.)

/// The lock and the record of what to restore. Dropping it releases the lock (the sweep is
/// [`HostState::restore`], called by the node's stop).
pub struct HostState {
    _lock: File,
    dir: PathBuf,
}

impl HostState {
    /// Takes the machine's node lock (waiting for another node to stop), sweeps what an
    /// earlier node left behind, and records the values to restore.
    pub fn acquire() -> Result<Self> {
        let dir = PathBuf::from(STATE_DIR);
        std::fs::create_dir_all(&dir).map_err(io_error(format!("create {STATE_DIR}")))?;
        let lock = File::create(dir.join("lock")).map_err(io_error("create the node lock"))?;
        wait_for_lock(&lock)?;
        let state = Self { _lock: lock, dir };
        // A record left by an earlier node means it did not stop cleanly: put back what it
        // saved before taking a new record. Without one, anything that looks like a node is
        // someone else's, and the clean-up (which kills every process in the pods' cgroups
        // and drops `KUBE-` chains) would take it down.
        if state.dir.join("sysctls").exists() {
            tracing::warn!("an earlier real node did not stop cleanly: sweeping what it left");
            state.restore();
        } else if let Some(other) = another_node() {
            return Err(Error::Missing(format!(
                "this machine already runs a Kubernetes node ({other}): the real-node tests \
                 need a machine without one"
            )));
        }
        // Checked before the record: an address someone else uses must neither be taken
        // nor removed by a restore.
        let addresses = Command::new("ip")
            .args(["-4", "-o", "address", "show"])
            .output()
            .map_err(io_error("run ip address show"))?;
        if String::from_utf8_lossy(&addresses.stdout).contains(&format!(" {NODE_IP}/")) {
            return Err(Error::Missing(format!(
                "{NODE_IP} is already assigned on this machine: the real node needs it"
            )));
        }
        state.record()?;
        Ok(state)
    }

    fn record(&self) -> Result<()> {
        // A bridge sysctl that does not exist yet (br_netfilter not loaded) is recorded as 0:
        // bridged traffic did not pass iptables before, and must not after.
        let sysctls: String = SYSCTLS
            .iter()
            .filter_map(|key| {
                let value = match std::fs::read_to_string(Path::new("/proc/sys").join(key)) {
                    Ok(value) => value.trim().to_string(),
                    Err(_) if key.starts_with("net/bridge/") => "0".to_string(),
                    Err(_) => return None,
                };
                Some(format!("{key}={value}\n"))
            })
            .collect();
        // Pods' network namespaces are named `cni-…`, as podman's are: only those that
        // appear after this record are the node's.
        std::fs::write(
            self.dir.join("netns-before"),
            pod_network_namespaces().join("\n"),
        )
        .map_err(io_error("record the network namespaces"))?;
        let absent: String = FIXED_DIRS
            .iter()
            .filter(|dir| !Path::new(dir).exists())
            .map(|dir| format!("{dir}\n"))
            .collect();
        std::fs::write(self.dir.join("absent-dirs"), absent)
            .map_err(io_error("record the node's folders"))?;
        // Written last: its presence says the record is complete.
        std::fs::write(self.dir.join("sysctls"), sysctls)
            .map_err(io_error("record the node's sysctls"))
    }

    /// Puts the host back: kills every process left in the pods' cgroups and every shim of
    /// a node's containerd, unmounts what is mounted in a node's folders and the pods'
    /// network namespaces, removes those, the cgroups, iptables chains, the bridge and the
    /// node address, the fixed folders that did not exist before, and restores the sysctls.
    /// Best effort: each step goes on when one fails. Everything it touches is a node's own
    /// (a path in a `clair-testenv-` folder, a `cni-` namespace that appeared after the
    /// record, a `KUBE-` chain):
    /// another containerd or Docker on the machine is left alone.
    pub fn restore(&self) {
        kill_pod_processes();
        kill_shims();
        let before = std::fs::read_to_string(self.dir.join("netns-before")).unwrap_or_default();
        remove_pod_network_namespaces(&before.lines().collect::<Vec<_>>());
        remove_log_links();
        unmount_node_folders();
        remove_pod_cgroups();
        for family in ["iptables", "ip6tables"] {
            drop_chains(family);
        }
        run_quiet("ip", &["link", "delete", BRIDGE]);
        run_quiet(
            "ip",
            &["address", "delete", &format!("{NODE_IP}/32"), "dev", "lo"],
        );
        let absent = std::fs::read_to_string(self.dir.join("absent-dirs")).unwrap_or_default();
        for dir in absent.lines().filter(|l| !l.is_empty()) {
            if let Err(e) = std::fs::remove_dir_all(dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!("cannot remove {dir}: {e}");
            }
        }
        let sysctls = std::fs::read_to_string(self.dir.join("sysctls")).unwrap_or_default();
        for line in sysctls.lines() {
            if let Some((key, value)) = line.split_once('=') {
                let _ = std::fs::write(Path::new("/proc/sys").join(key), value);
            }
        }
        let _ = std::fs::remove_file(self.dir.join("sysctls"));
        let _ = std::fs::remove_file(self.dir.join("absent-dirs"));
        let _ = std::fs::remove_file(self.dir.join("netns-before"));
    }
}

/// How long a second real node waits for the first to stop.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1800);

/// Takes the lock, saying so while another run holds it, for [`LOCK_WAIT`] at most.
fn wait_for_lock(lock: &File) -> Result<()> {
    use std::os::fd::AsRawFd;
    let start = std::time::Instant::now();
    let mut told = false;
    loop {
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        if start.elapsed() > LOCK_WAIT {
            return Err(Error::Timeout {
                what: format!("the real-node lock {STATE_DIR}/lock (another run holds it)"),
                seconds: LOCK_WAIT.as_secs(),
                detail: String::new(),
            });
        }
        if !told {
            eprintln!("waiting for another run's real node to stop ({STATE_DIR}/lock)");
            told = true;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// What shows that a Kubernetes node not ours runs here, if anything does.
fn another_node() -> Option<String> {
    if let Some(cgroup) = pod_cgroups().first() {
        return Some(format!("cgroup {} exists", cgroup.display()));
    }
    let chains = Command::new("iptables-save")
        .args(["-t", "nat"])
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(":KUBE-"))
        .unwrap_or(false);
    chains.then(|| "iptables has KUBE- chains".to_string())
}

/// Sets a sysctl (`net/ipv4/ip_forward` form).
pub fn set_sysctl(key: &str, value: &str) -> Result<()> {
    std::fs::write(Path::new("/proc/sys").join(key), value)
        .map_err(io_error(format!("set sysctl {key}")))
}

/// The cgroup hierarchies mounted on this host (cgroup v1: one per controller; v2: one).
fn cgroup_roots() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() > 2 && (fields[2] == "cgroup" || fields[2] == "cgroup2"))
                .then(|| PathBuf::from(fields[1]))
        })
        .collect()
}

/// Every cgroup folder below `kubepods` in every hierarchy, deepest first.
fn pod_cgroups() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&entry.path(), out);
                }
            }
        }
        out.push(dir.to_path_buf());
    }
    let mut out = Vec::new();
    for root in cgroup_roots() {
        for name in ["kubepods", "kubepods.slice"] {
            let pods = root.join(name);
            if pods.is_dir() {
                walk(&pods, &mut out);
            }
        }
    }
    out
}

fn kill_pod_processes() {
    for _ in 0..50 {
        let mut found = false;
        for cgroup in pod_cgroups() {
            let procs = std::fs::read_to_string(cgroup.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                found = true;
                // SAFETY: signalling a process id read from the pods' cgroup.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        if !found {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    tracing::warn!("processes remain in the pods' cgroups");
}

/// containerd's shims outlive containerd itself: find those of a node's containerd (its
/// socket lives in a `clair-testenv-` folder) and kill them.
fn kill_shims() {
    for (pid, cmdline, _) in crate::process::processes() {
        let mut args = cmdline.split(|b| *b == 0);
        let first = args.next().unwrap_or_default();
        let ours = args.any(|arg| arg.windows(NODE_FOLDER.len()).any(|w| w == NODE_FOLDER));
        if ours && first.ends_with(b"containerd-shim-runc-v2") {
            // SAFETY: signalling a shim process found by its command line.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// What every node folder's path holds: the control plane's temporary folder prefix.
const NODE_FOLDER: &[u8] = b"/clair-testenv-";

/// The paths of the `cni-…` network namespaces (containerd's for pods, and podman's).
fn pod_network_namespaces() -> Vec<String> {
    ["/var/run/netns", "/run/netns"]
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flat_map(|entries| entries.flatten())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("cni-"))
        .map(|entry| entry.path().display().to_string())
        .collect()
}

/// The pods' network namespaces (those not in `before`), unmounted and removed.
fn remove_pod_network_namespaces(before: &[&str]) {
    for path in pod_network_namespaces() {
        if !before.contains(&path.as_str()) {
            unmount(&path);
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The kubelet's links in `/var/log/containers` to the node's pod logs.
fn remove_log_links() {
    let Ok(entries) = std::fs::read_dir("/var/log/containers") else {
        return;
    };
    let marker = String::from_utf8_lossy(NODE_FOLDER).into_owned();
    for entry in entries.flatten() {
        if std::fs::read_link(entry.path()).is_ok_and(|t| t.to_string_lossy().contains(&marker)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn unmount(point: &str) {
    if let Ok(c) = std::ffi::CString::new(point) {
        // SAFETY: a valid NUL-terminated path.
        unsafe {
            libc::umount2(c.as_ptr(), libc::MNT_DETACH);
        }
    }
}

/// Unmounts (lazily, deepest first) every mount point in a node's folder: the kubelet's
/// bind mount of its root, volumes, container root filesystems.
fn unmount_node_folders() {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let marker = String::from_utf8_lossy(NODE_FOLDER).into_owned();
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4).map(unescape_mount))
        .filter(|point| point.contains(&marker))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points.dedup();
    for point in points {
        unmount(&point);
    }
}

/// `/proc/self/mountinfo` escapes spaces and the like as `\NNN` (octal).
fn unescape_mount(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(v) = u8::from_str_radix(&field[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn remove_pod_cgroups() {
    for cgroup in pod_cgroups() {
        let _ = std::fs::remove_dir(&cgroup);
    }
}

/// Deletes the rules that jump to, and the chains named, `KUBE-…` or ours, in every table,
/// leaving every other rule alone: a `--noflush` script of `-D`, `-F` and `-X` lines.
fn drop_chains(family: &str) {
    for table in ["filter", "nat", "mangle"] {
        let Ok(saved) = Command::new(format!("{family}-save"))
            .args(["-t", table])
            .stderr(Stdio::null())
            .output()
        else {
            return;
        };
        let text = String::from_utf8_lossy(&saved.stdout);
        let script = removal_script(table, &text);
        if script.is_empty() {
            continue;
        }
        let restored = Command::new(format!("{family}-restore"))
            .args(["--noflush", "-w", "10"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                if let Some(mut stdin) = child.stdin.take() {
                    stdin.write_all(script.as_bytes())?;
                }
                child.wait_with_output()
            });
        match restored {
            Ok(out) if out.status.success() => {}
            Ok(out) => tracing::warn!(
                "{family}-restore -t {table}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => tracing::warn!("{family}-restore -t {table}: {e}"),
        }
    }
}

fn ours(chain: &str) -> bool {
    chain.starts_with("KUBE-") || chain.starts_with(CHAIN_PREFIX)
}

/// From `iptables-save -t TABLE` output: the script that deletes, in built-in and foreign
/// chains, each rule jumping to one of ours, then flushes and deletes ours. Empty when there
/// is nothing of ours.
fn removal_script(table: &str, saved: &str) -> String {
    let chains: Vec<&str> = saved
        .lines()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| ours(c))
        .collect();
    let jumps: Vec<String> = saved
        .lines()
        .filter_map(|l| l.strip_prefix("-A "))
        .filter(|rule| {
            let chain = rule.split_whitespace().next().unwrap_or_default();
            !ours(chain) && rule.split_whitespace().any(ours)
        })
        .map(|rule| format!("-D {rule}\n"))
        .collect();
    if chains.is_empty() && jumps.is_empty() {
        return String::new();
    }
    let mut script = format!("*{table}\n");
    script.extend(jumps);
    script.extend(chains.iter().map(|c| format!("-F {c}\n")));
    script.extend(chains.iter().map(|c| format!("-X {c}\n")));
    script.push_str("COMMIT\n");
    script
}

/// Runs a command, ignoring its output and failure (for clean-up steps that may find
/// nothing to do).
pub(crate) fn run_quiet(program: &str, args: &[&str]) {
    let _ = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Runs a command and fails with its output when it fails.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<()> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(io_error(format!("run {program}")))?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Missing(format!(
        "{program} {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_rules_and_chains_are_removed() {
        let saved = "*nat\n:PREROUTING ACCEPT [0:0]\n:DOCKER - [0:0]\n:KUBE-SERVICES - [0:0]\n\
                     -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
                     -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER\n\
                     -A KUBE-SERVICES -d 10.0.0.1/32 -j KUBE-SVC-X\nCOMMIT\n";
        let script = removal_script("nat", saved);
        assert_eq!(
            script,
            "*nat\n-D PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
             -F KUBE-SERVICES\n-X KUBE-SERVICES\nCOMMIT\n"
        );
        assert_eq!(
            removal_script(
                "filter",
                "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j DOCKER\nCOMMIT\n"
            ),
            ""
        );
        let unproxied = format!(
            "*filter\n:OUTPUT ACCEPT [0:0]\n:{UNPROXIED_CHAIN} - [0:0]\n\
             -A OUTPUT -d {SERVICE_CIDR} -j {UNPROXIED_CHAIN}\n-A {UNPROXIED_CHAIN} -j REJECT\nCOMMIT\n"
        );
        assert_eq!(
            removal_script("filter", &unproxied),
            format!(
                "*filter\n-D OUTPUT -d {SERVICE_CIDR} -j {UNPROXIED_CHAIN}\n\
                 -F {UNPROXIED_CHAIN}\n-X {UNPROXIED_CHAIN}\nCOMMIT\n"
            )
        );
    }
}
