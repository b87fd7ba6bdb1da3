//! What every test tier shares (the kwok tier `tests/integration`, the real-node tier
//! `tests/realnode`, the standalone tier `tests/standalone`): the control plane with the CRDs
//! installed, the operator started in this process through the library's launcher, a
//! namespace per test, clients and kubectl, the audit log's reading, the test runner.

pub mod clair;
pub mod dashboards;
pub mod runner;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use clair_operator::{crdgen, launch, webhook};
use clair_testenv::{ControlPlane, NODE_IP, OPERATOR, Options, POD_CIDR, Postgres, RealNodeImages};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, ResourceExt};

pub const FIELD_MANAGER: &str = "clair-operator-tests";
/// The identity `deploy/base` gives the operator.
pub const OPERATOR_SERVICE_ACCOUNT: &str = "system:serviceaccount:clair-operator:clair-operator";

pub struct TestEnv {
    // Held for its Drop; declared first so it stops before the control plane does. None
    // when the operator runs in the cluster (the real-node tier) or in processes of the
    // tests' own (the standalone tier).
    operator: Option<Operator>,
    pub plane: ControlPlane,
    /// A real PostgreSQL on loopback, for the database tests.
    pub postgres: Postgres,
    /// [`TestEnv::scraper_token`], once made.
    scraper_token: std::sync::Mutex<Option<String>>,
}

/// The operator, run in this process on a thread of its own by [`launch::run`], as the
/// `clair-operator` user impersonating `deploy/base`'s ServiceAccount.
struct Operator {
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Where its `/metrics`, `/healthz` and `/readyz` answer.
    metrics: std::net::SocketAddr,
}

impl Operator {
    fn start(plane: &ControlPlane) -> anyhow::Result<Self> {
        let mut kubeconfig = Kubeconfig::read_from(plane.kubeconfig_path(OPERATOR))?;
        for user in &mut kubeconfig.auth_infos {
            if let Some(auth) = user.auth_info.as_mut() {
                auth.impersonate = Some(OPERATOR_SERVICE_ACCOUNT.to_string());
            }
        }
        let log = std::fs::File::create(plane.dir().join("logs/operator.log"))?;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let [metrics_port, webhook_port] = clair_testenv::free_ports::<2>()?;
        let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], metrics_port));
        let settings = launch::Settings {
            metrics_listen: metrics,
            // As deployed: TLS, a self-signed certificate, each scrape reviewed.
            metrics: launch::MetricsSecurity::Secure { cert_dir: None },
            webhook: Some(webhook_settings(plane, webhook_port)),
            platform: platform(),
            namespaces: Vec::new(),
            // Quick, so the database-loss test sees a probe soon.
            available_recheck: Duration::from_secs(10),
            election: None,
        };
        let thread = std::thread::Builder::new()
            .name("operator".into())
            .spawn(move || {
                let _ = tracing_subscriber::fmt()
                    .with_env_filter(
                        tracing_subscriber::EnvFilter::try_from_default_env()
                            .unwrap_or_else(|_| "info,clair_operator=debug".into()),
                    )
                    .with_ansi(false)
                    .with_writer(std::sync::Mutex::new(log))
                    .try_init();
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => return eprintln!("operator: cannot start a runtime: {e}"),
                };
                let ran = runtime.block_on(async move {
                    let config = kube::Config::from_custom_kubeconfig(
                        kubeconfig,
                        &KubeConfigOptions::default(),
                    )
                    .await?;
                    let telemetry = clair_operator::metrics::Telemetry::new();
                    let client = clair_operator::metrics::client::counted_client(
                        config,
                        telemetry.metrics.clone(),
                    )?;
                    let until_stopped = async move {
                        let _ = stopped.wait_for(|s| *s).await;
                    };
                    launch::run(client, telemetry, settings, until_stopped).await?;
                    anyhow::Ok(())
                });
                if let Err(e) = ran {
                    eprintln!("operator: {e:#}");
                }
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
            metrics,
        })
    }
}

/// The images the test operator allows: those the tests run, as a platform team would list
/// its mirrors (`--allowed-images`).
pub fn allowed_images() -> clair_operator::images::ImagePolicy {
    clair_operator::images::ImagePolicy::new([
        "quay.io/projectquay/".to_string(),
        "docker.io/library/postgres".to_string(),
        "ghcr.io/cloudnative-pg/postgresql".to_string(),
        "registry.k8s.io/pause".to_string(),
    ])
}

/// A loopback address the test operator's database checks may not reach: it stands for a
/// network the platform refuses (the harness's PostgreSQL answers there too).
pub const REFUSED_DATABASE_HOST: &str = "127.0.0.2";

/// What the test operator lets tenants name: the images the tests run, any Prometheus, and
/// databases anywhere but [`REFUSED_DATABASE_HOST`] and link-local addresses (the harness's
/// own are on loopback, which a deployed operator refuses by default).
pub fn platform() -> clair_operator::platform::Platform {
    let refused = [
        format!("{REFUSED_DATABASE_HOST}/32"),
        "169.254.0.0/16".to_string(),
    ];
    clair_operator::platform::Platform {
        images: allowed_images(),
        prometheus: Default::default(),
        databases: clair_operator::database::networks::Networks::parse(&[], Some(&refused))
            .expect("valid networks"),
    }
}

/// The webhook on loopback `port`, called by the apiserver by URL.
fn webhook_settings(plane: &ControlPlane, port: u16) -> webhook::register::Settings {
    webhook::register::Settings {
        name: webhook::CONFIGURATION_NAME.to_string(),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        target: webhook::register::Target::Url(format!("https://127.0.0.1:{port}")),
        hosts: vec!["127.0.0.1".to_string()],
        namespace: "clair-operator".to_string(),
        // Quick, so a test that deletes the certificate sees it reissued soon.
        recheck: Duration::from_secs(1),
        mounted: None,
        register: true,
        platform: platform(),
        namespaces: Vec::new(),
        // The apiserver alone, by its webhook client certificate, as a platform team that
        // controls its control plane would run it (docs/security.md).
        callers: webhook::callers::Callers::Apiserver {
            ca: plane.webhook_client_ca(),
            names: vec![clair_testenv::WEBHOOK_CLIENT_NAME.to_string()],
        },
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl TestEnv {
    /// Starts the control plane (kwok nodes) and installs the CRDs as the code generates
    /// them.
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(Options::default())
    }

    /// As [`TestEnv::start`], with a real node and no kwok nodes: every pod truly runs.
    /// PostgreSQL also listens on the node's address, where pods reach it. With an operator
    /// image, the operator runs in the cluster as `deploy/base` installs it (its webhook
    /// called through its Service), not in this process.
    pub fn start_real_node(images: RealNodeImages) -> anyhow::Result<Self> {
        Self::start_with(Options {
            nodes: 0,
            real_node: Some(images),
            ..Options::default()
        })
    }

    /// The control plane (kwok nodes) with the CRDs and PostgreSQL, and no operator at all:
    /// for tests that run the operator as processes of their own (`tests/standalone`),
    /// scoped, killed or doubled, installing its RBAC themselves.
    pub fn start_without_operator() -> anyhow::Result<Self> {
        let plane = ControlPlane::start(Options::default())?;
        let postgres = Postgres::start_reachable(&plane.dir().join("logs"), None)
            .context("start PostgreSQL for the database tests")?;
        let env = Self {
            operator: None,
            plane,
            postgres,
            scraper_token: Default::default(),
        };
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(env.install_crds())?;
        Ok(env)
    }

    fn start_with(options: Options) -> anyhow::Result<Self> {
        let real_node = options.real_node.is_some();
        let in_cluster = options
            .real_node
            .as_ref()
            .is_some_and(|images| images.operator.is_some());
        let plane = ControlPlane::start(options)?;
        eprintln!(
            "control plane up at {} (folder {})",
            plane.server(),
            plane.dir().display()
        );
        // The operator's namespace, ServiceAccount, RBAC and Deployment as shipped; the
        // operator under test then acts as that ServiceAccount, so every test also checks
        // that the shipped RBAC grants what the operator uses.
        // The real-node tier's overlay only shortens the webhook's recheck interval.
        let base = if in_cluster {
            clair_testenv::repo_root().join("tests/realnode/deploy")
        } else {
            clair_testenv::repo_root().join("deploy/base")
        };
        let base = base.display().to_string();
        let output = plane
            .kubectl()
            .args(["apply", "--server-side", "--force-conflicts", "-k", &base])
            .output()?;
        if !output.status.success() {
            bail!(
                "kubectl apply -k deploy/base: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        // The in-cluster operator exports its reconcile spans to the harness's collector
        // (its address is known only now: it listens on a free port).
        if let Some(collector) = in_cluster.then(|| plane.addons()).flatten() {
            let endpoint = format!(
                "OTEL_EXPORTER_OTLP_ENDPOINT={}",
                collector.collector().otlp_http
            );
            let output = plane
                .kubectl()
                .args(["--namespace", "clair-operator", "set", "env"])
                .args(["deployment/clair-operator", &endpoint])
                .output()?;
            if !output.status.success() {
                bail!(
                    "kubectl set env deployment/clair-operator: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
        let postgres = Postgres::start_reachable(
            &plane.dir().join("logs"),
            real_node.then_some((NODE_IP, POD_CIDR)),
        )
        .context("start PostgreSQL for the database tests")?;
        let operator = if in_cluster {
            let output = plane
                .kubectl()
                .args(["--namespace", "clair-operator", "rollout", "status"])
                .args(["deployment/clair-operator", "--timeout=180s"])
                .output()?;
            if !output.status.success() {
                bail!(
                    "the operator's Deployment did not become available: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            None
        } else {
            Some(Operator::start(&plane)?)
        };
        let env = Self {
            operator,
            plane,
            postgres,
            scraper_token: Default::default(),
        };
        // The harness's Prometheus scrapes the in-cluster operator as a ServiceAccount bound
        // to its reader role, as deploy/monitoring binds kube-prometheus's.
        if let Some(addons) = env.plane.addons().filter(|_| in_cluster) {
            let token = env.token_of("prometheus", Some("clair-operator-metrics-reader"))?;
            std::fs::write(addons.prometheus_token_file(), token)?;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(env.install_crds())?;
        Ok(env)
    }

    async fn install_crds(&self) -> anyhow::Result<()> {
        let client = self.client().await?;
        let api: Api<CustomResourceDefinition> = Api::all(client);
        for crd in crdgen::all() {
            let name = crd.name_any();
            api.patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
            .with_context(|| format!("apply CRD {name}"))?;
        }
        for crd in crdgen::all() {
            let name = crd.name_any();
            eventually(
                Duration::from_secs(30),
                &format!("CRD {name} Established"),
                || {
                    let api = api.clone();
                    let name = name.clone();
                    async move { Ok(established(&api.get(&name).await?)) }
                },
            )
            .await?;
        }
        Ok(())
    }

    /// The base URL of the in-process operator's metrics and health endpoints.
    pub fn operator_metrics_url(&self) -> anyhow::Result<String> {
        let operator = self
            .operator
            .as_ref()
            .context("no operator runs in this test process")?;
        Ok(format!("https://{}", operator.metrics))
    }

    /// A token of a ServiceAccount bound to deploy/base's `clair-operator-metrics-reader`,
    /// made once (`clair-operator-tests/metrics-scraper`), valid six hours: what Prometheus
    /// scrapes the operator with.
    pub fn scraper_token(&self) -> anyhow::Result<String> {
        let mut kept = self.scraper_token.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(token) = kept.as_ref() {
            return Ok(token.clone());
        }
        let token = self.token_of("metrics-scraper", Some("clair-operator-metrics-reader"))?;
        *kept = Some(token.clone());
        Ok(token)
    }

    /// A token of the ServiceAccount `name` in `clair-operator-tests` (made if missing),
    /// bound to the ClusterRole `role` if given.
    pub fn token_of(&self, name: &str, role: Option<&str>) -> anyhow::Result<String> {
        let mut objects = format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: clair-operator-tests, labels: {{clair-operator-tests: \"true\"}}}}\n---\n\
             apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {name}, namespace: clair-operator-tests}}\n"
        );
        if let Some(role) = role {
            objects.push_str(&format!(
                "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
                 metadata: {{name: tests-{name}}}\n\
                 roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\n\
                 subjects: [{{kind: ServiceAccount, name: {name}, namespace: clair-operator-tests}}]\n"
            ));
        }
        let mut apply = self
            .plane
            .kubectl()
            .args(["apply", "--server-side", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        use std::io::Write as _;
        apply
            .stdin
            .take()
            .context("kubectl's stdin")?
            .write_all(objects.as_bytes())?;
        let applied = apply.wait_with_output()?;
        anyhow::ensure!(
            applied.status.success(),
            "kubectl apply the ServiceAccount {name}: {}",
            String::from_utf8_lossy(&applied.stderr)
        );
        // The authorizer's cache takes the binding a moment later: wait for it, so no
        // first scrape is refused (and the refusal kept).
        if role.is_some() {
            let user = format!("system:serviceaccount:clair-operator-tests:{name}");
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let can = self
                    .kubectl("default")
                    .args(["auth", "can-i", "get", "/metrics", "--as", &user])
                    .output()?;
                if can.status.success() {
                    break;
                }
                anyhow::ensure!(
                    std::time::Instant::now() < deadline,
                    "{user} may not get /metrics 30 s after its binding"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let token = self
            .kubectl("clair-operator-tests")
            .args(["create", "token", name, "--duration=6h"])
            .output()?;
        anyhow::ensure!(
            token.status.success(),
            "kubectl create token {name}: {}",
            String::from_utf8_lossy(&token.stderr)
        );
        Ok(String::from_utf8(token.stdout)?.trim().to_string())
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        Ok(self.plane.client().await?)
    }

    /// A fresh namespace named `PREFIX-xxxxx`, for one test.
    pub async fn namespace(&self, prefix: &str) -> anyhow::Result<String> {
        let client = self.client().await?;
        let api: Api<Namespace> = Api::all(client);
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"generateName": format!("{prefix}-"), "labels": {"clair-operator-tests": "true"}}
        }))?;
        let created = api.create(&PostParams::default(), &namespace).await?;
        Ok(created.name_any())
    }

    /// `kubectl` at the pinned version, as the admin, in `namespace`.
    pub fn kubectl(&self, namespace: &str) -> Command {
        let mut command = self.plane.kubectl();
        command.args(["--namespace", namespace]);
        command
    }

    /// Runs kubectl and returns its standard output, failing with its standard error.
    pub fn kubectl_ok(&self, namespace: &str, args: &[&str]) -> anyhow::Result<String> {
        let outcome = self.kubectl_run(namespace, args, None)?;
        if !outcome.success {
            bail!("kubectl {} failed: {}", args.join(" "), outcome.stderr);
        }
        Ok(outcome.stdout)
    }

    /// Runs kubectl, with `input` on its standard input, and reports how it went.
    ///
    /// While any CRD changes (some tests install one) the apiserver rebuilds its discovery
    /// and OpenAPI documents, and kubectl briefly cannot find resources; while the webhook
    /// certificate rotates, the apiserver briefly cannot call it. Such failures are retried
    /// for a few seconds.
    pub fn kubectl_run(
        &self,
        namespace: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> anyhow::Result<KubectlOutcome> {
        self.kubectl_run_as("admin", namespace, args, input)
    }

    /// As [`TestEnv::kubectl_run`], as `user` (`admin`, `alice`, `bob`).
    pub fn kubectl_run_as(
        &self,
        user: &str,
        namespace: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> anyhow::Result<KubectlOutcome> {
        use std::io::Write;
        const TRANSIENT: &[&str] = &[
            "couldn't find resource",
            "the server could not find the requested resource",
            "no matches for kind",
            "failed calling webhook",
            // `kubectl wait --for=condition` on an object whose status has no conditions
            // yet (a CRD just created) fails at once instead of waiting.
            ".status.conditions accessor error",
        ];
        let mut attempt = 0;
        loop {
            let mut child = self
                .kubectl(namespace)
                .env("KUBECONFIG", self.plane.kubeconfig_path(user))
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()?;
            let mut stdin = child.stdin.take().context("kubectl stdin")?;
            stdin.write_all(input.unwrap_or_default().as_bytes())?;
            drop(stdin);
            let output = child.wait_with_output()?;
            let outcome = KubectlOutcome {
                success: output.status.success(),
                stdout: String::from_utf8(output.stdout)?,
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            };
            attempt += 1;
            if outcome.success
                || attempt >= 30
                || !TRANSIENT.iter().any(|t| outcome.stderr.contains(t))
            {
                return Ok(outcome);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// What a kubectl run printed and whether it succeeded.
pub struct KubectlOutcome {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Installs a minimal CRD (schema left open) for `group`/v1 `kind` and waits until it is
/// established. `approval`: the annotation a `*.k8s.io` group needs.
pub async fn install_open_crd(
    client: &Client,
    group: &str,
    kind: &str,
    plural: &str,
    approval: Option<&str>,
) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = format!("{plural}.{group}");
    let mut annotations = serde_json::Map::new();
    if let Some(approval) = approval {
        annotations.insert(
            "api-approved.kubernetes.io".into(),
            serde_json::json!(approval),
        );
    }
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))?;
    crds.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    eventually(
        Duration::from_secs(30),
        &format!("the {kind} CRD established"),
        || {
            let crds = crds.clone();
            let name = name.clone();
            async move { Ok(established(&crds.get(&name).await?)) }
        },
    )
    .await
}

/// Installs Gateway API's released CRDs (HTTPRoute, Gateway, GatewayClass; standard channel)
/// at `version` (`clair_testenv::GATEWAY_API` or `GATEWAY_API_BEFORE_TIMEOUTS`), over any
/// installed before, and waits until they are established.
pub fn install_gateway_api(env: &TestEnv, version: &str) -> anyhow::Result<()> {
    let dir = clair_testenv::gateway_api_crds(version)
        .context("fetching Gateway API's CRDs (tools/gateway-api/fetch.sh)")?;
    let dir = dir.display().to_string();
    env.kubectl_ok(
        "default",
        &["apply", "--server-side", "--force-conflicts", "-f", &dir],
    )?;
    env.kubectl_ok(
        "default",
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/httproutes.gateway.networking.k8s.io",
            "crd/gateways.gateway.networking.k8s.io",
            "crd/gatewayclasses.gateway.networking.k8s.io",
        ],
    )?;
    Ok(())
}

pub fn established(crd: &CustomResourceDefinition) -> bool {
    condition_true(crd, "Established")
}

pub fn condition_true(crd: &CustomResourceDefinition, type_: &str) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Polls `check` until it returns true, failing after `timeout` with the last error.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    let mut last = String::from("condition was false");
    while start.elapsed() < timeout {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => last = String::from("condition was false"),
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("timed out after {timeout:?} waiting for {what}: {last}")
}

/// Tests that change what the whole cluster serves (installing the ServiceMonitor CRD makes
/// the operator apply a ServiceMonitor for every service resource; removing the templating
/// webhook for a moment) take this for writing; tests that count the operator's writes or
/// need the templating webhook take it for reading, so one cannot disturb the other.
pub static CLUSTER_WIDE_CHANGES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The audit log's entries received after `since` that `keep` keeps.
pub fn audited_since(
    env: &TestEnv,
    since: SystemTime,
    keep: impl Fn(&serde_json::Value) -> bool,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(env.plane.audit_log())?;
    let since = k8s_openapi::jiff::Timestamp::try_from(since)?;
    let mut entries = Vec::new();
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if !keep(&entry) {
            continue;
        }
        let at: k8s_openapi::jiff::Timestamp = entry["requestReceivedTimestamp"]
            .as_str()
            .unwrap_or_default()
            .parse()?;
        if at >= since {
            entries.push(entry);
        }
    }
    Ok(entries)
}

/// The audit log's entries of the operator's requests in `ns` received after `since`.
pub fn operator_requests(
    env: &TestEnv,
    ns: &str,
    since: SystemTime,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let requests = audited_since(env, since, |entry| {
        entry["user"]["username"] == OPERATOR && entry["objectRef"]["namespace"] == ns
    })?;
    for entry in &requests {
        anyhow::ensure!(
            entry["impersonatedUser"]["username"] == OPERATOR_SERVICE_ACCOUNT,
            "an operator request not made as its ServiceAccount: {entry}"
        );
    }
    Ok(requests)
}

/// `VERB RESOURCE[/SUBRESOURCE] NAME` of an audit entry.
pub fn request_line(entry: &serde_json::Value) -> String {
    let object = &entry["objectRef"];
    let subresource = object["subresource"]
        .as_str()
        .map(|s| format!("/{s}"))
        .unwrap_or_default();
    format!(
        "{} {}{subresource} {}",
        entry["verb"].as_str().unwrap_or_default(),
        object["resource"].as_str().unwrap_or_default(),
        object["name"].as_str().unwrap_or_default()
    )
}

/// Operator writes (create, update, patch, delete) in `ns` after `since`, from the audit log.
pub fn operator_writes(env: &TestEnv, ns: &str, since: SystemTime) -> anyhow::Result<Vec<String>> {
    const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];
    Ok(operator_requests(env, ns, since)?
        .iter()
        .filter(|e| WRITES.contains(&e["verb"].as_str().unwrap_or_default()))
        .map(request_line)
        .collect())
}

/// A webhook server of a test's own (`webhook::register::run` with `settings`, sealing with a
/// key of `key` bytes), until `true` is sent on the returned sender; its task's handle.
pub fn spawn_webhook(
    client: Client,
    settings: webhook::register::Settings,
    key: u8,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<Result<(), webhook::register::Error>>,
) {
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let seal = clair_operator::templating::seal::Seal::from_key(vec![key; 32]);
    let server = tokio::spawn(webhook::register::run(
        client,
        settings,
        seal,
        clair_operator::metrics::Telemetry::new(),
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        },
    ));
    (stop, server)
}
