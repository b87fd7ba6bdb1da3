//! Starting and stopping the control plane, and handing out clients and kubeconfigs.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

use crate::addons::{AddonBinaries, AddonInputs, Addons};
use crate::binaries::{Binaries, build_images, coredns_binary};
use crate::host::NODE_IP;
use crate::node::{NODE_NAME, NodeInputs, RealNode};
use crate::pki;
use crate::process::Process;
use crate::{Error, Result, io_error};

/// What to start.
#[derive(Clone, Debug)]
pub struct Options {
    /// kwok fake nodes to create.
    pub nodes: usize,
    /// Users besides the admin, authenticated by token and given no permissions: tests
    /// grant them what they need with RBAC.
    pub users: Vec<String>,
    /// Keep the folder (logs, kubeconfigs, etcd data) after stopping.
    pub keep_dir: bool,
    /// Also start a real node (containerd, kubelet, kube-proxy, CoreDNS) where containers
    /// truly run, with these images imported. One per machine at a time: a second waits.
    pub real_node: Option<RealNodeImages>,
}

/// The images a real node imports: Clair's at the versions given (each a folder holding
/// `clair` and `clairctl`, with the tag to import it under), the operator's, PostgreSQL and
/// the pod sandbox, built by `tools/images/build.sh`.
#[derive(Clone, Debug, Default)]
pub struct RealNodeImages {
    pub clair: Vec<(PathBuf, String)>,
    /// The operator's release binary, imported as the image `deploy/base` names.
    pub operator: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            nodes: 2,
            users: vec!["alice".to_string(), "bob".to_string()],
            keep_dir: std::env::var_os("CLAIR_TESTENV_KEEP").is_some(),
            real_node: None,
        }
    }
}

/// A running control plane. Dropping it stops every process.
pub struct ControlPlane {
    binaries: Binaries,
    dir: PathBuf,
    keep_dir: bool,
    server: String,
    /// The apiserver's port (in `server`).
    api_port: u16,
    ca_cert: String,
    tokens: Vec<(String, String)>,
    // Stopped first, while the apiserver still answers: the add-ons, then the node.
    addons: Option<Addons>,
    node: Option<RealNode>,
    // Stopped in reverse start order: kwok first, etcd last. Behind a lock so a fault test
    // can stop and start one while others read the plane.
    processes: std::sync::Mutex<Vec<Process>>,
    /// Each component's arguments, to start it again.
    commands: std::collections::BTreeMap<String, Vec<String>>,
}

const ADMIN: &str = "admin";
/// The real node's components (kubelet, kube-proxy, CoreDNS) act as this user.
const NODE_USER: &str = "node";
/// The identity the operator runs as in tests and local runs (group `system:masters`), so
/// the audit log tells its requests apart from everyone else's.
pub const OPERATOR: &str = "clair-operator";

const AUDIT_POLICY: &str = r#"{
  "apiVersion": "audit.k8s.io/v1",
  "kind": "Policy",
  "omitStages": ["RequestReceived"],
  "rules": [
    {"level": "Metadata", "users": ["clair-operator", "system:serviceaccount:clair-operator:clair-operator"]},
    {"level": "None", "verbs": ["get", "list", "watch"]},
    {"level": "Metadata"}
  ]
}"#;
const START_TIMEOUT: Duration = Duration::from_secs(120);

impl ControlPlane {
    /// Builds what is missing, then starts etcd, kube-apiserver, kube-controller-manager,
    /// kube-scheduler and kwok, creates the fake nodes and waits until they are Ready.
    ///
    /// Call it from a thread that outlives the control plane (see [`Process::spawn`]).
    pub fn start(options: Options) -> Result<Self> {
        let binaries = Binaries::ensure()?;
        let dir = tempfile::Builder::new()
            .prefix("clair-testenv-")
            .tempdir()
            .map_err(io_error("create the control plane's folder"))?
            .keep();
        let mut plane = Self::prepare(binaries, dir, &options)?;
        plane.keep_dir = options.keep_dir;
        // Built before the host is changed and the machine's node lock taken (minutes cold).
        let node_parts = match &options.real_node {
            Some(images) => Some((
                build_images(images)?,
                coredns_binary()?,
                AddonBinaries::ensure()?,
            )),
            None => None,
        };
        if node_parts.is_some() {
            plane.node = Some(RealNode::prepare(&plane.dir)?);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io_error("start a runtime"))?;
        runtime.block_on(plane.launch(options.nodes))?;
        if let Some((archives, coredns, addons)) = &node_parts {
            plane.start_real_node(archives, coredns)?;
            runtime.block_on(plane.wait_for_real_node())?;
            plane.start_addons(addons)?;
        }
        Ok(plane)
    }

    fn prepare(binaries: Binaries, dir: PathBuf, options: &Options) -> Result<Self> {
        let pki = pki::generate()?;
        for (name, text) in [
            ("ca.crt", &pki.ca_cert),
            ("ca.key", &pki.ca_key),
            ("apiserver.crt", &pki.serving_cert),
            ("apiserver.key", &pki.serving_key),
            ("sa.key", &pki.service_account_key),
            ("sa.pub", &pki.service_account_public_key),
            ("kubelet-client.crt", &pki.kubelet_client_cert),
            ("kubelet-client.key", &pki.kubelet_client_key),
            ("webhook-client-ca.crt", &pki.webhook_client_ca),
            ("webhook-client.crt", &pki.webhook_client_cert),
            ("webhook-client.key", &pki.webhook_client_key),
            ("front-proxy-ca.crt", &pki.front_proxy_ca),
            ("front-proxy-client.crt", &pki.front_proxy_client_cert),
            ("front-proxy-client.key", &pki.front_proxy_client_key),
            ("addons/tls.crt", &pki.addon_cert),
            ("addons/tls.key", &pki.addon_key),
            ("addons/ca.crt", &pki.ca_cert),
        ] {
            write(&dir.join(name), text)?;
        }
        // The apiserver presents its webhook client certificate to every webhook that asks
        // for one (a kubeconfig whose user `*` matches every webhook's host).
        let webhook_kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: '*'\n  user:\n    client-certificate: {}\n    client-key: {}\n",
            dir.join("webhook-client.crt").display(),
            dir.join("webhook-client.key").display()
        );
        write(&dir.join("webhook-kubeconfig.yaml"), &webhook_kubeconfig)?;
        let plugin = |name: &str| {
            format!(
                "- name: {name}\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {}\n",
                dir.join("webhook-kubeconfig.yaml").display()
            )
        };
        write(
            &dir.join("admission.yaml"),
            &format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n{}{}",
                plugin("ValidatingAdmissionWebhook"),
                plugin("MutatingAdmissionWebhook")
            ),
        )?;
        let mut tokens = vec![
            (ADMIN.to_string(), random_token()?),
            (OPERATOR.to_string(), random_token()?),
            (NODE_USER.to_string(), random_token()?),
        ];
        for user in &options.users {
            tokens.push((user.clone(), random_token()?));
        }
        let csv: String = tokens
            .iter()
            .map(|(user, token)| {
                let groups = if user == ADMIN || user == OPERATOR || user == NODE_USER {
                    "system:masters"
                } else {
                    ""
                };
                format!("{token},{user},{user},\"{groups}\"\n")
            })
            .collect();
        write(&dir.join("tokens.csv"), &csv)?;
        write(&dir.join("audit-policy.json"), AUDIT_POLICY)?;
        std::fs::create_dir_all(dir.join("logs")).map_err(io_error("create logs folder"))?;
        Ok(Self {
            binaries,
            dir,
            keep_dir: false,
            server: String::new(),
            api_port: 0,
            ca_cert: pki.ca_cert,
            tokens,
            addons: None,
            node: None,
            processes: Default::default(),
            commands: Default::default(),
        })
    }

    async fn launch(&mut self, nodes: usize) -> Result<()> {
        let dir = self.dir.clone();
        let path = |name: &str| dir.join(name).display().to_string();
        let [
            etcd_port,
            etcd_peer,
            api_port,
            kcm_port,
            sched_port,
            kwok_port,
        ] = free_ports()?;
        // With a real node the apiserver listens on the node's address, where pods (the
        // operator's among them) reach it through the `kubernetes` Service; else loopback.
        let address = if self.node.is_some() {
            NODE_IP
        } else {
            "127.0.0.1"
        };
        self.server = format!("https://{address}:{api_port}");
        self.api_port = api_port;
        for user in self
            .tokens
            .iter()
            .map(|(u, _)| u.clone())
            .collect::<Vec<_>>()
        {
            write(&self.kubeconfig_path(&user), &self.kubeconfig_text(&user))?;
        }
        let admin = self.kubeconfig_path(ADMIN).display().to_string();

        self.spawn(
            "etcd",
            vec![
                format!("--data-dir={}", path("etcd")),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-cluster=default=http://127.0.0.1:{etcd_peer}"),
                "--unsafe-no-fsync".into(),
                "--quota-backend-bytes=4294967296".into(),
            ],
        )?;
        self.wait_for("etcd to listen", || async move {
            Ok(TcpStream::connect(("127.0.0.1", etcd_port)).is_ok())
        })
        .await?;

        self.spawn(
            "kube-apiserver",
            vec![
                format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
                format!("--bind-address={address}"),
                format!("--advertise-address={address}"),
                format!("--secure-port={api_port}"),
                format!("--cert-dir={}", path("apiserver-certs")),
                format!("--tls-cert-file={}", path("apiserver.crt")),
                format!("--tls-private-key-file={}", path("apiserver.key")),
                format!("--client-ca-file={}", path("ca.crt")),
                format!("--token-auth-file={}", path("tokens.csv")),
                // Room for hundreds of Services (the restart test makes 300) and their pods.
                format!("--service-cluster-ip-range={}", crate::host::SERVICE_CIDR),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", path("sa.pub")),
                format!("--service-account-signing-key-file={}", path("sa.key")),
                "--authorization-mode=RBAC".into(),
                "--allow-privileged=true".into(),
                // The `kubernetes` Service's endpoints: only pods on a real node use them.
                format!(
                    "--endpoint-reconciler-type={}",
                    if self.node.is_some() { "lease" } else { "none" }
                ),
                "--enable-priority-and-fairness=false".into(),
                "--profiling=false".into(),
                // Logs, exec and port-forward on a real node: by its address, with a client
                // certificate the kubelet trusts.
                format!(
                    "--kubelet-client-certificate={}",
                    path("kubelet-client.crt")
                ),
                format!("--kubelet-client-key={}", path("kubelet-client.key")),
                // Its client certificate towards admission webhooks (`webhook_client_ca`).
                format!("--admission-control-config-file={}", path("admission.yaml")),
                "--kubelet-preferred-address-types=InternalIP".into(),
                // The aggregation layer (metrics-server, KEDA's metrics apiserver beside a
                // real node): request headers trusted from the front-proxy client alone,
                // and aggregated servers reached at their endpoints' addresses (host
                // processes on the node's address), not through a Service's cluster IP.
                format!(
                    "--requestheader-client-ca-file={}",
                    path("front-proxy-ca.crt")
                ),
                format!(
                    "--requestheader-allowed-names={}",
                    pki::FRONT_PROXY_CLIENT_NAME
                ),
                "--requestheader-username-headers=X-Remote-User".into(),
                "--requestheader-group-headers=X-Remote-Group".into(),
                "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
                format!(
                    "--proxy-client-cert-file={}",
                    path("front-proxy-client.crt")
                ),
                format!("--proxy-client-key-file={}", path("front-proxy-client.key")),
                "--enable-aggregator-routing=true".into(),
                // Every write, one JSON line each: tests count who wrote what.
                format!("--audit-policy-file={}", path("audit-policy.json")),
                format!("--audit-log-path={}", path("logs/audit.log")),
                "--audit-log-format=json".into(),
            ],
        )?;
        let client = self.client().await?;
        self.wait_for("kube-apiserver /readyz", || {
            let client = client.clone();
            async move {
                let request = http::Request::get("/readyz")
                    .body(Vec::new())
                    .map_err(|e| Error::Invalid {
                        what: "request",
                        detail: e.to_string(),
                    })?;
                Ok(client.request_text(request).await.is_ok())
            }
        })
        .await?;

        self.spawn(
            "kube-controller-manager",
            vec![
                format!("--kubeconfig={admin}"),
                format!("--authentication-kubeconfig={admin}"),
                format!("--authorization-kubeconfig={admin}"),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={kcm_port}"),
                format!("--cert-dir={}", path("kcm-certs")),
                format!("--service-account-private-key-file={}", path("sa.key")),
                format!("--root-ca-file={}", path("ca.crt")),
                "--use-service-account-credentials=false".into(),
                // kwok renews node leases from the same two cores the tests load; under a
                // full build the default grace (50 s) can pass and every pod turns unready.
                // No test relies on detecting a dead node.
                "--node-monitor-grace-period=5m".into(),
            ],
        )?;
        self.spawn(
            "kube-scheduler",
            vec![
                format!("--kubeconfig={admin}"),
                format!("--authentication-kubeconfig={admin}"),
                format!("--authorization-kubeconfig={admin}"),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={sched_port}"),
                format!("--cert-dir={}", path("scheduler-certs")),
            ],
        )?;
        self.spawn(
            "kwok",
            vec![
                format!("--kubeconfig={admin}"),
                // Only the fake nodes: a real node beside them runs its own kubelet.
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
                "--cidr=10.128.0.0/16".into(),
                "--node-ip=127.0.0.1".into(),
                format!("--server-address=127.0.0.1:{kwok_port}"),
                // Node Leases, renewed every 10 s: without them (kwok's default) a node's only
                // heartbeat is its status, which kwok posts about every five minutes, so the
                // node controller's grace period raced it, marked every pod unready for a
                // moment, and kwok never made them ready again.
                "--node-lease-duration-seconds=40".into(),
            ],
        )?;

        let node_api: Api<Node> = Api::all(client.clone());
        for i in 0..nodes {
            let node: Node =
                serde_json::from_value(fake_node(&format!("kwok-node-{i}"))).map_err(|e| {
                    Error::Invalid {
                        what: "fake node",
                        detail: e.to_string(),
                    }
                })?;
            node_api.create(&PostParams::default(), &node).await?;
        }
        self.wait_for("the kwok nodes to become Ready", || {
            let node_api = node_api.clone();
            async move {
                let list = node_api.list(&Default::default()).await?;
                Ok(list.items.len() == nodes && list.items.iter().all(node_ready))
            }
        })
        .await?;
        // The default ServiceAccount appears once the controller manager works.
        let accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
        self.wait_for("kube-controller-manager to create ServiceAccounts", || {
            let accounts = accounts.clone();
            async move { Ok(accounts.get_opt("default").await?.is_some()) }
        })
        .await?;
        Ok(())
    }

    fn start_real_node(&mut self, archives: &[PathBuf], coredns: &Path) -> Result<()> {
        let kubeconfig = self.kubeconfig_path(NODE_USER);
        let client_ca = self.dir.join("ca.crt");
        let inputs = NodeInputs {
            dir: &self.dir,
            binaries: &self.binaries,
            kubeconfig: &kubeconfig,
            client_ca: &client_ca,
            images: archives,
            coredns,
        };
        match self.node.as_mut() {
            Some(node) => node.start(inputs),
            None => Err(Error::Missing("the real node was not prepared".into())),
        }
    }

    /// Starts the metrics pipeline beside the real node and waits until the apiserver serves
    /// `metrics.k8s.io` and `external.metrics.k8s.io` through it.
    fn start_addons(&mut self, binaries: &AddonBinaries) -> Result<()> {
        let crds = Addons::keda_crds(binaries);
        self.kubectl_ok(&["create", "namespace", "keda"])?;
        let crds = crds.display().to_string();
        self.kubectl_ok(&["apply", "--server-side", "-f", &crds])?;
        // KEDA's parts fail at start where their kinds are not served yet.
        self.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            &crds,
        ])?;
        // CloudNativePG's operator fails at start where its kinds are not served yet.
        let cnpg_crds = Addons::cloudnative_pg_crds(binaries).display().to_string();
        self.kubectl_ok(&[
            "create",
            "namespace",
            crate::addons::CLOUDNATIVE_PG_NAMESPACE,
        ])?;
        self.kubectl_ok(&["apply", "--server-side", "-f", &cnpg_crds])?;
        self.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            &cnpg_crds,
        ])?;
        let admin = self.admin_kubeconfig();
        let (addons, registrations) = Addons::start(
            binaries,
            &AddonInputs {
                dir: &self.dir,
                admin_kubeconfig: &admin,
                ca_cert: &self.ca_cert,
            },
        )?;
        self.addons = Some(addons);
        let file = self.dir.join("addons/registrations.yaml");
        write(&file, &registrations)?;
        self.kubectl_ok(&["apply", "--server-side", "-f", &file.display().to_string()])?;
        let kubectl = self.binaries.path("kubectl");
        let available = |api: &str| {
            std::process::Command::new(&kubectl)
                .env("KUBECONFIG", &admin)
                .args([
                    "get",
                    "apiservice",
                    api,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
                ])
                .output()
                .is_ok_and(|out| out.stdout == b"True")
        };
        let addons = self
            .addons
            .as_mut()
            .ok_or_else(|| Error::Missing("the add-ons were not started".into()))?;
        let collector = addons.collector().clone();
        addons.wait(
            "metrics-server and KEDA's metrics apiserver to be Available, and Jaeger to answer",
            START_TIMEOUT,
            || {
                available("v1beta1.metrics.k8s.io")
                    && available("v1beta1.external.metrics.k8s.io")
                    && collector.answers()
            },
        )
    }

    /// The metrics pipeline beside the real node (Prometheus's address among it), if one runs.
    pub fn addons(&self) -> Option<&Addons> {
        self.addons.as_ref()
    }

    async fn wait_for_real_node(&mut self) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.client().await?);
        self.wait_for("the real node to become Ready", || {
            let nodes = nodes.clone();
            async move {
                Ok(nodes
                    .get_opt(NODE_NAME)
                    .await?
                    .as_ref()
                    .is_some_and(node_ready))
            }
        })
        .await
    }

    fn spawn(&mut self, name: &str, args: Vec<String>) -> Result<()> {
        let process = Process::spawn(
            name,
            &self.binaries.path(name),
            &args,
            &self.dir.join("logs"),
        )?;
        self.commands.insert(name.to_string(), args);
        self.processes_mut().push(process);
        Ok(())
    }

    fn processes_mut(&self) -> std::sync::MutexGuard<'_, Vec<Process>> {
        // A panic while holding it leaves nothing half-done: the list is still whole.
        self.processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stops one component (`etcd`, `kube-apiserver`, ...): SIGTERM, then SIGKILL after 5 s.
    /// For fault tests; [`ControlPlane::start_component`] starts it again.
    pub fn stop_component(&self, name: &str) -> Result<()> {
        let mut processes = self.processes_mut();
        let process = processes
            .iter_mut()
            .find(|p| p.name() == name)
            .ok_or_else(|| Error::Missing(format!("the control plane has no component {name}")))?;
        process.stop();
        Ok(())
    }

    /// Starts a stopped component again with its arguments (its log appended); nothing if
    /// it runs. Call it
    /// from a thread that outlives the control plane (see [`Process::spawn`]).
    pub fn start_component(&self, name: &str) -> Result<()> {
        if let Some(running) = self.processes_mut().iter_mut().find(|p| p.name() == name)
            && running.check_running().is_ok()
        {
            return Ok(());
        }
        let args = self
            .commands
            .get(name)
            .ok_or_else(|| Error::Missing(format!("the control plane has no component {name}")))?;
        let started = Process::spawn(
            name,
            &self.binaries.path(name),
            args,
            &self.dir.join("logs"),
        )?;
        let mut processes = self.processes_mut();
        if let Some(slot) = processes.iter_mut().find(|p| p.name() == name) {
            // The stopped one is reaped already; replaced in place, so the stop order holds.
            *slot = started;
        }
        Ok(())
    }

    /// Waits until the apiserver answers `/readyz` again (after a fault test).
    pub async fn wait_until_ready(&self, timeout: Duration) -> Result<()> {
        let client = self.client().await?;
        let start = Instant::now();
        loop {
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| Error::Invalid {
                    what: "request",
                    detail: e.to_string(),
                })?;
            if client.request_text(request).await.is_ok() {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(Error::Timeout {
                    what: "kube-apiserver /readyz".to_string(),
                    seconds: timeout.as_secs(),
                    detail: String::new(),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn check_processes(&mut self) -> Result<()> {
        if let Some(node) = self.node.as_mut() {
            node.check_running()?;
        }
        if let Some(addons) = self.addons.as_mut() {
            addons.check_running()?;
        }
        self.processes_mut()
            .iter_mut()
            .try_for_each(Process::check_running)
    }

    async fn wait_for<F, Fut>(&mut self, what: &str, mut ready: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<bool>>,
    {
        let start = Instant::now();
        loop {
            self.check_processes()?;
            // Errors while components come up (connection refused, 403 before RBAC is
            // bootstrapped) mean "not yet"; the timeout reports the last one.
            match ready().await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) if start.elapsed() >= START_TIMEOUT => {
                    return Err(Error::Timeout {
                        what: what.to_string(),
                        seconds: START_TIMEOUT.as_secs(),
                        detail: format!(" (last error: {e})"),
                    });
                }
                Err(_) => {}
            }
            self.timed_out(what, start)?;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn timed_out(&self, what: &str, start: Instant) -> Result<()> {
        if start.elapsed() < START_TIMEOUT {
            return Ok(());
        }
        let logs: Vec<String> = self
            .processes_mut()
            .iter()
            .map(|p| format!("--- {} ---\n{}", p.name(), p.tail(15)))
            .collect();
        Err(Error::Timeout {
            what: what.to_string(),
            seconds: START_TIMEOUT.as_secs(),
            detail: format!("; last log lines:\n{}", logs.join("\n")),
        })
    }

    /// `https://127.0.0.1:PORT`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The apiserver's port: `PORT` of [`ControlPlane::server`].
    pub fn api_port(&self) -> u16 {
        self.api_port
    }

    /// The control plane's folder: logs in `logs/`, kubeconfigs, certificates.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The pinned binaries, for `kubectl` among others.
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// The CA that signed the apiserver's certificate, as PEM.
    /// The CA of the apiserver's client certificate towards admission webhooks (its common
    /// name [`crate::WEBHOOK_CLIENT_NAME`]): give it to an operator so that it answers the
    /// apiserver alone (`--webhook-client-ca`).
    pub fn webhook_client_ca(&self) -> PathBuf {
        self.dir.join("webhook-client-ca.crt")
    }

    pub fn ca_cert(&self) -> &str {
        &self.ca_cert
    }

    /// The kubeconfig file of `user` (`admin`, or one of [`Options::users`]).
    pub fn kubeconfig_path(&self, user: &str) -> PathBuf {
        self.dir.join(format!("{user}.kubeconfig"))
    }

    /// The audit log: one JSON line per write request (reads are not logged).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("logs/audit.log")
    }

    /// The admin's kubeconfig (group `system:masters`).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.kubeconfig_path(ADMIN)
    }

    fn kubeconfig_text(&self, user: &str) -> String {
        let token = self
            .tokens
            .iter()
            .find(|(u, _)| u == user)
            .map(|(_, t)| t.as_str())
            .unwrap_or_default();
        let ca = BASE64.encode(self.ca_cert.as_bytes());
        json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "testenv", "cluster": {"server": self.server, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "testenv", "context": {"cluster": "testenv", "user": user}}],
            "current-context": "testenv",
        })
        .to_string()
    }

    /// A client acting as `user`.
    pub async fn client_as(&self, user: &str) -> Result<Client> {
        let text = self.kubeconfig_text(user);
        let kubeconfig =
            Kubeconfig::from_yaml(&text).map_err(|e| Error::Kubeconfig(e.to_string()))?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        Ok(Client::try_from(config)?)
    }

    /// An admin client.
    pub async fn client(&self) -> Result<Client> {
        self.client_as(ADMIN).await
    }

    /// `kubectl` at the pinned version, as the admin.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(self.binaries.path("kubectl"));
        command.env("KUBECONFIG", self.admin_kubeconfig());
        command
    }

    /// Runs kubectl with `args` against this control plane; a failure carries its stderr.
    pub fn kubectl_ok(&self, args: &[&str]) -> Result<()> {
        let mut attempt = 0;
        let output = loop {
            let output = self
                .kubectl()
                .args(args)
                .output()
                .map_err(io_error("run kubectl"))?;
            attempt += 1;
            // `kubectl wait --for=condition` on an object whose status has no conditions yet
            // (a CRD just created) fails at once instead of waiting: asked again.
            let early = String::from_utf8_lossy(&output.stderr)
                .contains(".status.conditions accessor error");
            if output.status.success() || !early || attempt >= 30 {
                break output;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        };
        if output.status.success() {
            return Ok(());
        }
        Err(Error::Kubectl {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }

    /// The operator's CRDs from the repository's `crds/` (as a user installs them), applied
    /// and Established, and its own `clair-operator` namespace (where it keeps its webhook
    /// certificate and template seal, as `deploy/base` does).
    pub fn install_operator_prerequisites(&self) -> Result<()> {
        let crds = crate::repo_root().join("crds");
        self.kubectl_ok(&["apply", "--server-side", "-k", &crds.display().to_string()])?;
        self.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=60s",
        ])?;
        self.kubectl_ok(&["create", "namespace", "clair-operator"])
    }

    /// Stops every process (kwok first, etcd last) and removes the folder unless asked to
    /// keep it.
    pub fn stop(&mut self) {
        if let Some(mut addons) = self.addons.take() {
            addons.stop();
        }
        if let Some(mut node) = self.node.take() {
            node.stop();
        }
        while let Some(mut process) = self.processes_mut().pop() {
            process.stop();
        }
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(io_error(format!("create {}", parent.display())))?;
    }
    std::fs::write(path, text).map_err(io_error(format!("write {}", path.display())))
}

/// Free loopback ports, all bound at once so they differ, then released for the components
/// (or the operator) to bind.
pub fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(io_error("find a free port"))?;
    let mut ports = [0u16; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener
            .local_addr()
            .map_err(io_error("find a free port"))?
            .port();
    }
    Ok(ports)
}

fn random_token() -> Result<String> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes)
        .map_err(|e| io_error("generate a token")(std::io::Error::other(e.to_string())))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn fake_node(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "topology.kubernetes.io/zone": "zone-a",
            },
        },
        "status": {
            // Room for the scale tests (1,000 Clairs: 3,000 pods of 100m, 256Mi and 10Gi of
            // scratch disk): the real default of 110 pods a node made 100 Clairs
            // unschedulable on two nodes.
            "allocatable": {"cpu": "1000", "memory": "4Ti", "ephemeral-storage": "32Ti", "pods": "2000"},
            "capacity": {"cpu": "1000", "memory": "4Ti", "ephemeral-storage": "32Ti", "pods": "2000"},
        },
    })
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
