//! The metrics pipeline beside a real node, from real parts, as host processes in the control
//! plane's folder: metrics-server (the `metrics.k8s.io` API resource-metric HPAs read),
//! Prometheus (Debian's package) scraping every pod's `introspection` and `metrics` ports
//! (found through the harness's HTTP discovery: Debian builds it without Kubernetes'),
//! and KEDA (operator, metrics apiserver registered as `external.metrics.k8s.io`, admission
//! webhook for ScaledObjects), CloudNativePG's operator (its admission webhooks for Clusters
//! and Databases; its instance pods run images `tools/images/build.sh` makes), and Jaeger's
//! all-in-one as the trace collector (OTLP over HTTP and gRPC in, the query API out, spans
//! kept in memory). metrics-server, KEDA, CloudNativePG and Jaeger are built by their
//! `tools/` scripts from the Go module proxy and cached. They listen on the
//! node's address (the apiserver reaches the aggregated servers at their Endpoints there);
//! they send nothing off the machine. Beside them, the ingress stand-in (`router`: Debian's
//! nginx configured from the cluster's Ingresses).

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::binaries::{cloudnative_pg_dir, jaeger_binary, keda_dir, metrics_server_binary};
use crate::controlplane::free_ports;
use crate::host::NODE_IP;
use crate::process::{Background, Process, wait_while_running};
use crate::router::Router;
use crate::{Error, Result, io_error};

/// The built parts, found (or built) before the host is changed.
pub(crate) struct AddonBinaries {
    metrics_server: PathBuf,
    keda: PathBuf,
    prometheus: PathBuf,
    jaeger: PathBuf,
    /// CloudNativePG's `manager` and its CRDs (`crds/`).
    cloudnative_pg: PathBuf,
}

impl AddonBinaries {
    pub(crate) fn ensure() -> Result<Self> {
        let prometheus = PathBuf::from("/usr/bin/prometheus");
        if !prometheus.is_file() {
            return Err(Error::Missing(
                "the real node's metrics pipeline needs a Prometheus server at \
                 /usr/bin/prometheus (Debian package prometheus): run scripts/install-deps"
                    .into(),
            ));
        }
        Ok(Self {
            metrics_server: metrics_server_binary()?,
            keda: keda_dir()?,
            prometheus,
            jaeger: jaeger_binary()?,
            cloudnative_pg: cloudnative_pg_dir()?,
        })
    }
}

/// What the add-ons need from the control plane.
pub(crate) struct AddonInputs<'a> {
    /// The control plane's folder (certificates in `addons/`, logs in `logs/`).
    pub dir: &'a Path,
    pub admin_kubeconfig: &'a Path,
    pub ca_cert: &'a str,
}

/// The running add-ons. Stopped before the node and the control plane.
pub struct Addons {
    processes: Vec<Process>,
    // Stopped after Prometheus, which asks it.
    _discovery: Discovery,
    prometheus_url: String,
    /// The bearer token Prometheus scrapes the operator with, written by whoever deploys it.
    prometheus_token: PathBuf,
    collector: Collector,
    router: Router,
}

/// Jaeger's addresses.
#[derive(Clone, Debug)]
pub struct Collector {
    /// OTLP over HTTP, `http://NODE_IP:PORT` (pods and host processes reach it).
    pub otlp_http: String,
    /// OTLP over gRPC, `NODE_IP:PORT`.
    pub otlp_grpc: String,
    /// The query API (`/api/services`, `/api/traces`), `http://NODE_IP:PORT`.
    pub query: String,
}

impl Collector {
    /// Whether the query API answers (Jaeger serves it once its storage is up).
    pub(crate) fn answers(&self) -> bool {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        agent
            .get(format!("{}/api/services", self.query))
            .call()
            .is_ok()
    }
}

impl Addons {
    /// Starts the processes; returns them with the objects that register them with the
    /// apiserver (applied by the caller, who then waits for them to be Available).
    pub(crate) fn start(
        binaries: &AddonBinaries,
        inputs: &AddonInputs<'_>,
    ) -> Result<(Self, String)> {
        let [
            metrics_port,
            prometheus_port,
            keda_grpc,
            keda_metrics,
            keda_probe,
            adapter_port,
            webhook_port,
            webhook_metrics,
            webhook_probe,
            otlp_http,
            otlp_grpc,
            query_http,
            query_grpc,
            cnpg_webhook,
            cnpg_metrics,
        ] = free_ports()?;
        let dir = inputs.dir;
        let logs = dir.join("logs");
        let file = |name: &str| dir.join(name).display().to_string();
        let admin = inputs.admin_kubeconfig.display().to_string();
        let certs = file("addons");
        let mut processes = Vec::new();

        processes.push(Process::spawn(
            "metrics-server",
            &binaries.metrics_server,
            &[
                format!("--kubeconfig={admin}"),
                format!("--authentication-kubeconfig={admin}"),
                format!("--authorization-kubeconfig={admin}"),
                format!("--bind-address={NODE_IP}"),
                format!("--secure-port={metrics_port}"),
                format!("--tls-cert-file={certs}/tls.crt"),
                format!("--tls-private-key-file={certs}/tls.key"),
                // The kubelet's serving certificate is its own self-signed one.
                "--kubelet-insecure-tls".into(),
                "--kubelet-preferred-address-types=InternalIP".into(),
                // The kubelet listens on a free port, which its Node status names.
                "--kubelet-use-node-status-port".into(),
                format!(
                    "--kubelet-client-certificate={}",
                    file("kubelet-client.crt")
                ),
                format!("--kubelet-client-key={}", file("kubelet-client.key")),
                // HPAs see a pod's CPU within a quarter minute (the resolution must exceed
                // the kubelet request timeout).
                "--metric-resolution=15s".into(),
                "--kubelet-request-timeout=5s".into(),
            ],
            &logs,
        )?);

        let prometheus_dir = dir.join("prometheus");
        std::fs::create_dir_all(&prometheus_dir)
            .map_err(io_error("create the Prometheus folder"))?;
        let discovery = Discovery::start(inputs.admin_kubeconfig)?;
        let config = prometheus_dir.join("prometheus.yml");
        // Read at each scrape: empty (the operator refuses the scrape) until the operator
        // is deployed and its reader role bound.
        let prometheus_token = prometheus_dir.join("operator-token");
        write(&prometheus_token, "")?;
        write(
            &config,
            &prometheus_config(&discovery.url, &prometheus_token),
        )?;
        let prometheus_url = format!("http://{NODE_IP}:{prometheus_port}");
        processes.push(Process::spawn(
            "prometheus",
            &binaries.prometheus,
            &[
                format!("--config.file={}", config.display()),
                format!(
                    "--storage.tsdb.path={}",
                    prometheus_dir.join("data").display()
                ),
                "--storage.tsdb.retention.time=3h".into(),
                format!("--web.listen-address={NODE_IP}:{prometheus_port}"),
            ],
            &logs,
        )?);

        let jaeger_config = dir.join("jaeger.yaml");
        write(
            &jaeger_config,
            &jaeger_config_text(otlp_http, otlp_grpc, query_http, query_grpc),
        )?;
        processes.push(Process::spawn(
            "jaeger",
            &binaries.jaeger,
            &[format!("--config={}", jaeger_config.display())],
            &logs,
        )?);
        let collector = Collector {
            otlp_http: format!("http://{NODE_IP}:{otlp_http}"),
            otlp_grpc: format!("{NODE_IP}:{otlp_grpc}"),
            query: format!("http://{NODE_IP}:{query_http}"),
        };

        let keda_env = |command: &mut std::process::Command| {
            command
                .env("KUBECONFIG", &admin)
                .env("WATCH_NAMESPACE", "")
                .env("POD_NAMESPACE", "keda")
                .env("KEDA_CLUSTER_OBJECT_NAMESPACE", "keda");
        };
        let mut operator = std::process::Command::new(binaries.keda.join("keda-operator"));
        keda_env(&mut operator);
        operator.args([
            "--leader-elect=false".to_string(),
            format!("--metrics-bind-address=127.0.0.1:{keda_metrics}"),
            format!("--health-probe-bind-address=127.0.0.1:{keda_probe}"),
            format!("--metrics-service-bind-address={NODE_IP}:{keda_grpc}"),
            format!("--cert-dir={certs}"),
            // The harness made the certificates and registers them itself.
            "--enable-cert-rotation=false".into(),
            format!("--ca-dir={certs}"),
            "--zap-log-level=info".into(),
        ]);
        processes.push(Process::spawn_command("keda-operator", operator, &logs)?);

        let mut adapter = std::process::Command::new(binaries.keda.join("keda-adapter"));
        keda_env(&mut adapter);
        adapter.args([
            format!("--bind-address={NODE_IP}"),
            format!("--secure-port={adapter_port}"),
            format!("--cert-dir={certs}"),
            format!("--tls-cert-file={certs}/tls.crt"),
            format!("--tls-private-key-file={certs}/tls.key"),
            format!("--lister-kubeconfig={admin}"),
            format!("--authentication-kubeconfig={admin}"),
            format!("--authorization-kubeconfig={admin}"),
            format!("--metrics-service-address={NODE_IP}:{keda_grpc}"),
            "--zap-log-level=info".into(),
        ]);
        processes.push(Process::spawn_command("keda-adapter", adapter, &logs)?);

        let mut webhooks = std::process::Command::new(binaries.keda.join("keda-webhooks"));
        keda_env(&mut webhooks);
        webhooks.args([
            format!("--cert-dir={certs}"),
            format!("--port={webhook_port}"),
            format!("--metrics-bind-address=127.0.0.1:{webhook_metrics}"),
            format!("--health-probe-bind-address=127.0.0.1:{webhook_probe}"),
            "--zap-log-level=info".into(),
        ]);
        processes.push(Process::spawn_command("keda-webhooks", webhooks, &logs)?);

        processes.push(start_cloudnative_pg(
            binaries,
            &admin,
            &dir.join("cloudnative-pg"),
            &dir.join("addons"),
            cnpg_webhook,
            cnpg_metrics,
            &logs,
        )?);

        let router = Router::start(inputs.admin_kubeconfig, &dir.join("router"), &logs)?;

        let ca = BASE64.encode(inputs.ca_cert.as_bytes());
        let objects = registrations(&ca, metrics_port, adapter_port, webhook_port)
            + &cloudnative_pg_webhooks(&ca, cnpg_webhook);
        Ok((
            Self {
                processes,
                _discovery: discovery,
                prometheus_url,
                prometheus_token,
                collector,
                router,
            },
            objects,
        ))
    }

    /// The folder of KEDA's CRDs (applied before the registrations).
    pub(crate) fn keda_crds(binaries: &AddonBinaries) -> PathBuf {
        binaries.keda.join("crds")
    }

    /// The folder of CloudNativePG's CRDs (applied before its operator starts).
    pub(crate) fn cloudnative_pg_crds(binaries: &AddonBinaries) -> PathBuf {
        binaries.cloudnative_pg.join("crds")
    }

    /// Prometheus's HTTP API, `http://NODE_IP:PORT`.
    pub fn prometheus_url(&self) -> &str {
        &self.prometheus_url
    }

    /// Where Prometheus reads the token it scrapes the operator with (a ServiceAccount's,
    /// bound to `clair-operator-metrics-reader`), at each scrape.
    pub fn prometheus_token_file(&self) -> &Path {
        &self.prometheus_token
    }

    /// The trace collector's addresses.
    pub fn collector(&self) -> &Collector {
        &self.collector
    }

    /// The ingress stand-in.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Fails with the end of its log when an add-on has exited.
    pub fn check_running(&mut self) -> Result<()> {
        self.router.check_running()?;
        self.processes
            .iter_mut()
            .try_for_each(Process::check_running)
    }

    /// Waits until `ready` holds, failing early when an add-on exits.
    pub(crate) fn wait(
        &mut self,
        what: &str,
        timeout: Duration,
        ready: impl FnMut() -> bool,
    ) -> Result<()> {
        wait_while_running(
            &mut self.processes,
            what,
            timeout,
            Duration::from_millis(500),
            ready,
        )
    }

    pub fn stop(&mut self) {
        while let Some(mut process) = self.processes.pop() {
            process.stop();
        }
    }
}

impl Drop for Addons {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The operand image `tools/images/build.sh` makes from the machine's PostgreSQL, tagged with
/// its major version (CloudNativePG reads the major from the tag).
pub fn cloudnative_pg_operand_image() -> Result<String> {
    let majors = std::fs::read_dir("/usr/lib/postgresql").map_err(io_error(
        "list /usr/lib/postgresql (run scripts/install-deps)",
    ))?;
    let major = majors
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .max()
        .ok_or_else(|| {
            Error::Missing(
                "no PostgreSQL server in /usr/lib/postgresql: run scripts/install-deps".into(),
            )
        })?;
    Ok(format!("ghcr.io/cloudnative-pg/postgresql:{major}"))
}

/// The namespace CloudNativePG's operator names as its own (no pod of it runs there).
pub const CLOUDNATIVE_PG_NAMESPACE: &str = "cnpg-system";
/// The image of CloudNativePG's manager, which its instance pods copy in at start.
pub const CLOUDNATIVE_PG_OPERATOR_IMAGE: &str = "ghcr.io/cloudnative-pg/cloudnative-pg:testenv";

/// CloudNativePG's operator as a host process in `home`: its webhooks served with the
/// add-ons' certificate (`certs`: named as CloudNativePG reads them from `WEBHOOK_CERT_DIR`,
/// so it makes no PKI of its own), and beside it `operator/manager_amd64`, the instance
/// manager it compares its pods' with (the same binary as in its image: no in-place update).
fn start_cloudnative_pg(
    binaries: &AddonBinaries,
    admin: &str,
    home: &Path,
    certs: &Path,
    webhook_port: u16,
    metrics_port: u16,
    logs: &Path,
) -> Result<Process> {
    let manager = binaries.cloudnative_pg.join("manager");
    let webhook_certs = home.join("webhook");
    let architectures = home.join("operator");
    for folder in [&webhook_certs, &architectures] {
        std::fs::create_dir_all(folder).map_err(io_error("create CloudNativePG's folders"))?;
    }
    let copy = |from: &Path, to: PathBuf| {
        std::fs::copy(from, &to)
            .map(|_| ())
            .map_err(io_error(format!("copy {}", from.display())))
    };
    copy(&certs.join("tls.crt"), webhook_certs.join("apiserver.crt"))?;
    copy(&certs.join("tls.key"), webhook_certs.join("apiserver.key"))?;
    copy(
        &manager,
        architectures.join(format!(
            "manager_{}",
            std::env::consts::ARCH
                .replace("x86_64", "amd64")
                .replace("aarch64", "arm64")
        )),
    )?;
    let mut command = std::process::Command::new(&manager);
    command
        .current_dir(home)
        .env("KUBECONFIG", admin)
        .env("OPERATOR_NAMESPACE", CLOUDNATIVE_PG_NAMESPACE)
        .env("OPERATOR_IMAGE_NAME", CLOUDNATIVE_PG_OPERATOR_IMAGE)
        .env("WEBHOOK_CERT_DIR", &webhook_certs)
        .args([
            "controller".to_string(),
            "--leader-elect=false".into(),
            format!("--webhook-port={webhook_port}"),
            format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
        ]);
    Process::spawn_command("cloudnative-pg", command, logs)
}

/// CloudNativePG's defaulting and validating webhooks for Clusters and Databases (the kinds
/// the operator writes), by URL on the node's address, failing closed as its own manifests do.
fn cloudnative_pg_webhooks(ca: &str, port: u16) -> String {
    let webhook = |verb: &str, kind: &str, plural: &str| {
        format!(
            "- name: {verb}{kind}.cnpg.io\n  admissionReviewVersions: [v1]\n  clientConfig:\n    \
             url: https://{NODE_IP}:{port}/{verb}-postgresql-cnpg-io-v1-{kind}\n    caBundle: {ca}\n  \
             failurePolicy: Fail\n  sideEffects: None\n  timeoutSeconds: 10\n  rules:\n  \
             - apiGroups: [postgresql.cnpg.io]\n    apiVersions: [v1]\n    \
             operations: [CREATE, UPDATE]\n    resources: [{plural}]\n"
        )
    };
    format!(
        "---\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n\
         metadata: {{name: cnpg-mutating-webhook-configuration}}\nwebhooks:\n{}{}\
         ---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n\
         metadata: {{name: cnpg-validating-webhook-configuration}}\nwebhooks:\n{}{}",
        webhook("mutate", "cluster", "clusters"),
        webhook("mutate", "database", "databases"),
        webhook("validate", "cluster", "clusters"),
        webhook("validate", "database", "databases"),
    )
}

/// Jaeger v2's all-in-one, reduced to what the tests use: OTLP receivers on the node's
/// address, in-memory storage, the query API; no metrics or health ports of its own.
fn jaeger_config_text(otlp_http: u16, otlp_grpc: u16, query_http: u16, query_grpc: u16) -> String {
    format!(
        r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_storage:
    backends:
      memory:
        memory:
          max_traces: 20000
  jaeger_query:
    storage:
      traces: memory
    http:
      endpoint: "{NODE_IP}:{query_http}"
    grpc:
      endpoint: "127.0.0.1:{query_grpc}"
receivers:
  otlp:
    protocols:
      http:
        endpoint: "{NODE_IP}:{otlp_http}"
      grpc:
        endpoint: "{NODE_IP}:{otlp_grpc}"
processors:
  batch:
    timeout: 1s
exporters:
  jaeger_storage_exporter:
    trace_storage: memory
"#
    )
}

/// Scrapes every pod port named `introspection` (Clair) or `metrics` (the operator) every
/// 5 s, with the labels a Prometheus Operator ServiceMonitor gives (`namespace`, `pod`), from
/// the harness's HTTP discovery at `discovery` (Debian's Prometheus is built without its
/// Kubernetes discovery). The operator over TLS with the token in `token`, as
/// deploy/monitoring's ServiceMonitor scrapes it.
fn prometheus_config(discovery: &str, token: &Path) -> String {
    let job = |name: &str, port: &str, honor_labels: bool, secure: bool| {
        let security = if secure {
            format!(
                "  scheme: https\n  tls_config:\n    insecure_skip_verify: true\n  authorization:\n    credentials_file: {}\n",
                token.display()
            )
        } else {
            String::new()
        };
        format!(
            "- job_name: {name}\n  honor_labels: {honor_labels}\n{security}  http_sd_configs:\n  - url: {discovery}/targets/{port}\n    refresh_interval: 5s\n"
        )
    };
    // The operator's series name the resources they describe by `namespace`: kept, as
    // deploy/monitoring's ServiceMonitor keeps them (`honorLabels`).
    format!(
        "global:\n  scrape_interval: 5s\n  evaluation_interval: 5s\nscrape_configs:\n{}{}",
        job("clair", "introspection", false, false),
        job("clair-operator", "metrics", true, true)
    )
}

/// Prometheus's HTTP service discovery of pods: `GET /targets/PORT` lists every Running pod
/// with a container port named `PORT`, labelled with its namespace, name, and the
/// `app.kubernetes.io/component` and `instance` labels. Served on loopback from a thread of
/// its own until dropped.
struct Discovery {
    url: String,
    _server: Background,
}

impl Discovery {
    fn start(kubeconfig: &Path) -> Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(io_error("listen for Prometheus's discovery"))?;
        listener
            .set_nonblocking(true)
            .map_err(io_error("listen for Prometheus's discovery"))?;
        let url = format!(
            "http://{}",
            listener
                .local_addr()
                .map_err(io_error("listen for Prometheus's discovery"))?
        );
        let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)
            .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        let server = Background::spawn(move || async move {
            let Ok(config) =
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await
            else {
                return;
            };
            let Ok(client) = kube::Client::try_from(config) else {
                return;
            };
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            let app = axum::Router::new()
                .route("/targets/{port}", axum::routing::get(targets))
                .with_state(client);
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            url,
            _server: server,
        })
    }
}

async fn targets(
    axum::extract::State(client): axum::extract::State<kube::Client>,
    axum::extract::Path(port): axum::extract::Path<String>,
) -> axum::Json<serde_json::Value> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: kube::Api<Pod> = kube::Api::all(client);
    let list = pods.list(&Default::default()).await.map(|l| l.items);
    let groups: Vec<serde_json::Value> = list
        .unwrap_or_default()
        .iter()
        .filter_map(|pod| {
            let status = pod.status.as_ref()?;
            if status.phase.as_deref() != Some("Running") {
                return None;
            }
            let ip = status.pod_ip.as_ref()?;
            let number = pod
                .spec
                .as_ref()?
                .containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| p.name.as_deref() == Some(port.as_str()))?
                .container_port;
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
            Some(serde_json::json!({
                "targets": [format!("{ip}:{number}")],
                "labels": {
                    "namespace": pod.metadata.namespace,
                    "pod": pod.metadata.name,
                    "component": label("app.kubernetes.io/component"),
                    "instance_name": label("app.kubernetes.io/instance"),
                },
            }))
        })
        .collect();
    axum::Json(serde_json::Value::Array(groups))
}

/// The Service, Endpoints and registration of each aggregated server at the node's address,
/// and KEDA's ScaledObject admission webhook, as one YAML stream.
fn registrations(ca: &str, metrics_port: u16, adapter_port: u16, webhook_port: u16) -> String {
    let backend = |namespace: &str, name: &str, port: u16| {
        format!(
            r#"---
apiVersion: v1
kind: Service
metadata: {{namespace: {namespace}, name: {name}}}
spec:
  ports: [{{port: {port}, targetPort: {port}, protocol: TCP}}]
---
apiVersion: v1
kind: Endpoints
metadata: {{namespace: {namespace}, name: {name}}}
subsets:
- addresses: [{{ip: "{NODE_IP}"}}]
  ports: [{{port: {port}, protocol: TCP}}]
"#
        )
    };
    let api_service = |group: &str, namespace: &str, name: &str, port: u16| {
        format!(
            r#"---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1beta1.{group}}}
spec:
  group: {group}
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  caBundle: {ca}
  service: {{namespace: {namespace}, name: {name}, port: {port}}}
"#
        )
    };
    format!(
        "{}{}{}{}---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n\
         metadata: {{name: keda-admission}}\nwebhooks:\n- name: vscaledobject.kb.io\n  \
         admissionReviewVersions: [v1]\n  clientConfig:\n    url: https://{NODE_IP}:{webhook_port}/validate-keda-sh-v1alpha1-scaledobject\n    \
         caBundle: {ca}\n  failurePolicy: Ignore\n  matchPolicy: Equivalent\n  sideEffects: None\n  \
         timeoutSeconds: 10\n  rules:\n  - apiGroups: [keda.sh]\n    apiVersions: [v1alpha1]\n    \
         operations: [CREATE, UPDATE]\n    resources: [scaledobjects]\n",
        backend("kube-system", "metrics-server", metrics_port),
        api_service(
            "metrics.k8s.io",
            "kube-system",
            "metrics-server",
            metrics_port
        ),
        backend("keda", "keda-metrics-apiserver", adapter_port),
        api_service(
            "external.metrics.k8s.io",
            "keda",
            "keda-metrics-apiserver",
            adapter_port
        ),
    )
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(io_error(format!("write {}", path.display())))
}
