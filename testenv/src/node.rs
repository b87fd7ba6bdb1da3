//! A real node beside the control plane: containerd and runc (Debian's packages), the CNI
//! bridge plugin, a kubelet, kube-proxy in iptables mode and CoreDNS serving the cluster's
//! names, all as host processes in the control plane's folder. Images come from
//! `tools/images/build.sh` and are imported under the names the operator renders; nothing is
//! pulled. The host state they change is recorded and put back by [`crate::host`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::binaries::Binaries;
use crate::host::{
    self, BRIDGE, EGRESS_CHAIN, HostState, NODE_IP, POD_CIDR, SERVICE_CIDR, UNPROXIED_CHAIN,
};
use crate::process::{Process, wait_while_running};
use crate::{Error, Result, io_error};

/// The node's name, as it registers itself.
pub const NODE_NAME: &str = "real-node";
/// The sandbox image containerd runs for every pod, built here (it cannot be pulled).
const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// What the node needs from the control plane.
pub(crate) struct NodeInputs<'a> {
    pub dir: &'a Path,
    pub binaries: &'a Binaries,
    /// A kubeconfig for the kubelet, kube-proxy and CoreDNS.
    pub kubeconfig: &'a Path,
    /// The CA the apiserver's kubelet client certificate is signed by.
    pub client_ca: &'a Path,
    /// Image archives to import (docker-archive tars).
    pub images: &'a [PathBuf],
    /// The CoreDNS binary.
    pub coredns: &'a Path,
}

/// The running node. Stop it (or drop it) before the control plane.
pub struct RealNode {
    host: Option<HostState>,
    dir: PathBuf,
    // Stopped in reverse order: CoreDNS, kube-proxy, kubelet, containerd.
    processes: Vec<Process>,
}

impl RealNode {
    /// Takes the machine's node lock and prepares the host: the node's address (which the
    /// apiserver then listens on, so pods reach it), forwarding, the egress rule, the CNI
    /// configuration. From here on, dropping the node restores the host.
    pub(crate) fn prepare(control_plane_dir: &Path) -> Result<Self> {
        preflight()?;
        let host = HostState::acquire()?;
        let node = Self {
            host: Some(host),
            dir: control_plane_dir.join("node"),
            processes: Vec::new(),
        };
        node.prepare_host()?;
        Ok(node)
    }

    /// Starts containerd (importing the images), the kubelet, kube-proxy and CoreDNS. The
    /// node registers itself; the caller waits for it to become Ready.
    pub(crate) fn start(&mut self, inputs: NodeInputs<'_>) -> Result<()> {
        self.start_containerd(inputs.dir)?;
        self.import_images(inputs.images)?;
        self.start_kubelet(&inputs)?;
        self.start_kube_proxy(&inputs)?;
        self.start_coredns(&inputs)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn prepare_host(&self) -> Result<()> {
        for sub in [
            "cni/net.d",
            "cni/ipam",
            "containerd",
            "kubelet",
            "pod-logs",
            "volume-plugins",
        ] {
            std::fs::create_dir_all(self.path(sub))
                .map_err(io_error(format!("create {}", self.path(sub).display())))?;
        }
        host::set_sysctl("net/ipv4/ip_forward", "1")?;
        // Replies from a Service's pod to a pod on the same bridge must pass conntrack.
        if !Path::new("/proc/sys/net/bridge").exists() {
            host::run_quiet("modprobe", &["br_netfilter"]);
        }
        host::set_sysctl("net/bridge/bridge-nf-call-iptables", "1")?;
        host::run(
            "ip",
            &["address", "add", &format!("{NODE_IP}/32"), "dev", "lo"],
        )?;
        // Pods talk to pods, Services and this host only: nothing they send is forwarded off
        // the machine. In the mangle table, ahead of anything kube-proxy or Docker accepts in
        // the filter table's FORWARD chain.
        let iptables = |args: &[&str]| {
            let mut all = vec!["-w", "10", "-t", "mangle"];
            all.extend_from_slice(args);
            host::run("iptables", &all)
        };
        iptables(&["-N", EGRESS_CHAIN])?;
        iptables(&["-A", EGRESS_CHAIN, "-d", POD_CIDR, "-j", "RETURN"])?;
        iptables(&["-A", EGRESS_CHAIN, "-j", "DROP"])?;
        iptables(&["-I", "FORWARD", "1", "-s", POD_CIDR, "-j", EGRESS_CHAIN])?;
        // The host's own packets to a Service address kube-proxy has not translated (yet):
        // refused, not routed off the machine. The filter table's OUTPUT sees them after
        // the nat table's, so a programmed Service passes as a pod's address.
        let filter = |args: &[&str]| {
            let mut all = vec!["-w", "10", "-t", "filter"];
            all.extend_from_slice(args);
            host::run("iptables", &all)
        };
        filter(&["-N", UNPROXIED_CHAIN])?;
        filter(&["-A", UNPROXIED_CHAIN, "-j", "REJECT"])?;
        filter(&[
            "-I",
            "OUTPUT",
            "1",
            "-d",
            SERVICE_CIDR,
            "-j",
            UNPROXIED_CHAIN,
        ])?;
        let cni = serde_json::json!({
            "cniVersion": "0.4.0",
            "name": "clair-testenv",
            "plugins": [{
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": self.path("cni/ipam"),
                },
            }],
        });
        write(
            &self.path("cni/net.d/10-clair-testenv.conflist"),
            &cni.to_string(),
        )
    }

    fn socket(&self) -> PathBuf {
        self.path("containerd/containerd.sock")
    }

    fn start_containerd(&mut self, log_parent: &Path) -> Result<()> {
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # runc cannot lower oom_score_adj here (no CAP_SYS_RESOURCE): every sandbox would fail.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
"#,
            root = self.path("containerd/root").display(),
            state = self.path("containerd/state").display(),
            socket = self.socket().display(),
            opt = self.path("containerd/opt").display(),
            cni = self.path("cni/net.d").display(),
        );
        let file = self.path("containerd/config.toml");
        write(&file, &config)?;
        // Every image is imported; a pull (a missing or `:latest` image) must fail here, not
        // reach out: registry requests go to a closed loopback port instead of the network.
        // (Go ignores an empty NO_PROXY and reads no_proxy then: neither may be inherited.)
        let closed = "http://127.0.0.1:9";
        let mut command = std::process::Command::new("containerd");
        command
            .args(["--config", &file.display().to_string()])
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .envs([
                ("HTTPS_PROXY", closed),
                ("https_proxy", closed),
                ("HTTP_PROXY", closed),
                ("http_proxy", closed),
            ]);
        let process = Process::spawn_command("containerd", command, &log_parent.join("logs"))?;
        self.processes.push(process);
        let socket = self.socket();
        self.wait("containerd's socket", Duration::from_secs(30), || {
            socket.exists()
        })
    }

    fn import_images(&mut self, images: &[PathBuf]) -> Result<()> {
        let socket = self.socket().display().to_string();
        for image in images {
            host::run(
                "ctr",
                &[
                    "--address",
                    &socket,
                    "--namespace",
                    "k8s.io",
                    "images",
                    "import",
                    &image.display().to_string(),
                ],
            )?;
        }
        Ok(())
    }

    fn start_kubelet(&mut self, inputs: &NodeInputs<'_>) -> Result<()> {
        let [port, healthz] = crate::controlplane::free_ports()?;
        // Pods with dnsPolicy Default get no resolver of the host's: nothing resolves
        // outside the cluster.
        write(
            &self.path("resolv.conf"),
            "# no upstream resolvers in tests\n",
        )?;
        let socket = format!("unix://{}", self.socket().display());
        let config = serde_json::json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz,
            "containerRuntimeEndpoint": socket,
            "imageServiceEndpoint": socket,
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": false,
            "failSwapOn": false,
            "podLogsDir": self.path("pod-logs"),
            "volumePluginDir": self.path("volume-plugins"),
            "authentication": {
                "x509": {"clientCAFile": inputs.client_ca},
                "webhook": {"enabled": false},
                "anonymous": {"enabled": false},
            },
            "authorization": {"mode": "AlwaysAllow"},
            // A busy shared disk must not evict the tests' pods.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
                "imagefs.inodesFree": "1%",
            },
            // The imported images cannot be pulled again: never collect them.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "clusterDNS": [NODE_IP],
            "clusterDomain": "cluster.local",
            "resolvConf": self.path("resolv.conf"),
            "serializeImagePulls": false,
            "maxPods": 110,
        });
        let file = self.path("kubelet.yaml");
        write(&file, &config.to_string())?;
        let args = vec![
            format!("--config={}", file.display()),
            format!("--kubeconfig={}", inputs.kubeconfig.display()),
            format!("--root-dir={}", self.path("kubelet").display()),
            format!("--cert-dir={}", self.path("kubelet/pki").display()),
            format!("--hostname-override={NODE_NAME}"),
            format!("--node-ip={NODE_IP}"),
            "--v=1".to_string(),
        ];
        let process = Process::spawn(
            "kubelet",
            &inputs.binaries.path("kubelet"),
            &args,
            &inputs.dir.join("logs"),
        )?;
        self.processes.push(process);
        Ok(())
    }

    fn start_kube_proxy(&mut self, inputs: &NodeInputs<'_>) -> Result<()> {
        let [healthz, metrics] = crate::controlplane::free_ports()?;
        let config = serde_json::json!({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": inputs.kubeconfig},
            "mode": "iptables",
            "clusterCIDR": POD_CIDR,
            "hostnameOverride": NODE_NAME,
            "healthzBindAddress": format!("127.0.0.1:{healthz}"),
            "metricsBindAddress": format!("127.0.0.1:{metrics}"),
            // NodePorts only on the node's own address, never on the host's interfaces.
            "nodePortAddresses": [format!("{NODE_IP}/32")],
            // Leave the host's conntrack sizes and timeouts alone.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "iptables": {"minSyncPeriod": "1s", "syncPeriod": "30s", "localhostNodePorts": false},
        });
        let file = self.path("kube-proxy.yaml");
        write(&file, &config.to_string())?;
        let process = Process::spawn(
            "kube-proxy",
            &inputs.binaries.path("kube-proxy"),
            &[format!("--config={}", file.display())],
            &inputs.dir.join("logs"),
        )?;
        self.processes.push(process);
        Ok(())
    }

    fn start_coredns(&mut self, inputs: &NodeInputs<'_>) -> Result<()> {
        let [health] = crate::controlplane::free_ports()?;
        // No `forward`: a name outside the cluster is not resolved (tests send nothing off
        // the machine).
        let corefile = format!(
            ".:53 {{\n  bind {NODE_IP}\n  errors\n  health 127.0.0.1:{health}\n  \
             kubernetes cluster.local in-addr.arpa ip6.arpa {{\n    kubeconfig {} testenv\n    \
             pods insecure\n    fallthrough in-addr.arpa ip6.arpa\n  }}\n  cache 5\n}}\n",
            inputs.kubeconfig.display()
        );
        let file = self.path("Corefile");
        write(&file, &corefile)?;
        let process = Process::spawn(
            "coredns",
            inputs.coredns,
            &["-conf".to_string(), file.display().to_string()],
            &inputs.dir.join("logs"),
        )?;
        self.processes.push(process);
        Ok(())
    }

    fn wait(&mut self, what: &str, timeout: Duration, ready: impl FnMut() -> bool) -> Result<()> {
        wait_while_running(
            &mut self.processes,
            what,
            timeout,
            Duration::from_millis(100),
            ready,
        )
    }

    /// Fails with the end of its log when a node process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        self.processes
            .iter_mut()
            .try_for_each(Process::check_running)
    }

    /// Stops CoreDNS, kube-proxy, the kubelet, every pod's
    /// processes and containerd, then puts the host back as it was.
    pub fn stop(&mut self) {
        let Some(host) = self.host.take() else {
            return;
        };
        while let Some(mut process) = self.processes.pop() {
            process.stop();
        }
        // Not `kube-proxy --cleanup`: it also flushes every IPVS rule on the host. The
        // restore drops kube-proxy's chains with the rest.
        host.restore();
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the node needs from the machine, each missing part named with how to get it.
fn preflight() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::Missing(
            "a real node needs root (the kubelet, containerd and the CNI plugins change \
             cgroups, mounts, links and iptables): run the real-node tests as root"
                .into(),
        ));
    }
    let needed = [
        ("containerd", "containerd"),
        ("ctr", "containerd"),
        ("runc", "runc"),
        ("iptables", "iptables"),
        ("iptables-save", "iptables"),
        ("ip", "iproute2"),
    ];
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut missing: Vec<String> = needed
        .iter()
        .filter(|(program, _)| !std::env::split_paths(&path).any(|d| d.join(program).is_file()))
        .map(|(program, package)| format!("{program} (Debian package {package})"))
        .collect();
    for plugin in ["bridge", "host-local", "loopback"] {
        if !Path::new("/usr/lib/cni").join(plugin).is_file() {
            missing.push(format!(
                "/usr/lib/cni/{plugin} (Debian package containernetworking-plugins)"
            ));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Missing(format!(
        "the real node needs {}: run scripts/install-deps",
        missing.join(", ")
    )))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(io_error(format!("write {}", path.display())))
}
