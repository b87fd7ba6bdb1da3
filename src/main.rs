//! The `clair-operator` command: parses the arguments and dispatches to the library: the
//! operator itself (`run`, through `launch`), the offline tools (`check-config`, `render`),
//! and the generators of `crds/`, `deploy/olm/` and `state-diagrams/`.

use std::path::PathBuf;
use std::process::ExitCode;

use clair_operator::api::{ServiceKind, names};
use clair_operator::clairconfig::report;
use clair_operator::generated::{self, Generator};
use clair_operator::telemetry::LogFormat;
use clair_operator::{crdgen, launch, machine, offline, olm, webhook};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "clair-operator",
    version,
    about = "Runs Clair on Kubernetes as separate, independently scaled services"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controllers and the admission webhook against the cluster of the current
    /// kubeconfig (or the pod's service account), until SIGTERM or Ctrl-C.
    Run(Box<RunArgs>),
    /// Print the CustomResourceDefinitions as YAML, or write one file per CRD.
    Crds {
        /// Write `<crd name>.yaml` files into this folder instead of printing.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Exit 1 when the files in this folder differ from what the code generates.
        #[arg(long, conflicts_with = "out")]
        check: Option<PathBuf>,
    },
    /// Print the OLM ClusterServiceVersion as YAML, or write the whole bundle (manifests/,
    /// metadata/, bundle.Dockerfile) into a folder.
    Olm {
        /// Write the bundle into this folder instead of printing the CSV.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Exit 1 when the bundle in this folder differs from what the code generates.
        #[arg(long, conflicts_with = "out")]
        check: Option<PathBuf>,
    },
    /// Check Clair config files offline, with the operator's validator (the rules of Clair
    /// 4.9's own). Drop-ins in FILE.d/ are merged as Clair merges them. Exits 1 when any
    /// file is invalid in any mode checked.
    CheckConfig {
        /// Root config files (`.yaml` or `.json`).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The mode to check; every service mode when unset.
        #[arg(long, value_parser = service_kind_parser())]
        mode: Option<ServiceKind>,
        /// `human` or `json`.
        #[arg(long, value_enum, default_value = "human")]
        output: report::Format,
    },
    /// Print every object the operator would create for the given Clair, Indexer, Matcher
    /// and Notifier resources, offline, with the ConfigMaps and Secrets they read: the
    /// controllers' own pipeline and config validation (an invalid config fails with the
    /// message its condition would show), for reviewing a change as `helm template` is used.
    /// A database is taken as answering and credentials the files lack as generated
    /// (placeholders); owner references are left out.
    Render {
        /// Files of YAML or JSON documents (`-`: standard input). Repeatable.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
        /// `yaml` (documents separated by `---`) or `json` (a `List`).
        #[arg(short = 'o', long, value_enum, default_value = "yaml")]
        output: offline::Format,
        /// The namespace of documents that name none.
        #[arg(short = 'n', long, default_value = "default")]
        namespace: String,
        /// What the target cluster serves beyond Kubernetes itself: `route` (OpenShift
        /// Routes), `httproute` (Gateway API), `httproute-timeouts` (Gateway API v1.2
        /// or later: HTTPRoutes carry Quay's request timeout), `servicemonitor` (Prometheus Operator),
        /// `scc` (OpenShift: pods leave their user to the platform), `scaledobject`
        /// (KEDA).
        #[arg(long, value_enum, value_delimiter = ',')]
        serves: Vec<offline::Served>,
        /// As `run --allowed-images`: images outside these prefixes are refused.
        #[arg(long, value_delimiter = ',')]
        allowed_images: Vec<String>,
        /// As `run --allowed-prometheus`: KEDA addresses of other origins are refused.
        #[arg(long, value_delimiter = ',')]
        allowed_prometheus: Vec<String>,
    },
    /// Draw the phase state machines as Mermaid diagrams, or write them into a folder.
    Diagrams {
        /// Write `service.mmd`, `clair.mmd` and `README.md` into this folder.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Exit 1 when the files in this folder differ from what the code draws.
        #[arg(long, conflicts_with = "out")]
        check: Option<PathBuf>,
    },
}

/// Every allocation counted by dhat, in a build made for a heap profile.
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

fn main() -> ExitCode {
    // Written when main returns (the operator stops on SIGTERM): where memory was allocated,
    // at the peak and at the end (docs/performance.md reads it).
    #[cfg(feature = "dhat-heap")]
    let _profiler = dhat::Profiler::builder()
        .file_name(
            std::env::var_os("CLAIR_OPERATOR_HEAP_PROFILE").unwrap_or("dhat-heap.json".into()),
        )
        // Deep enough to reach the operator's own frames past the allocator and collections.
        .trim_backtraces(Some(24))
        .build();
    let result = match Cli::parse().command {
        Command::Run(args) => run(*args),
        Command::Crds { out, check } => generate::<crdgen::Crds>(out, check),
        Command::Diagrams { out, check } => generate::<machine::diagram::Diagrams>(out, check),
        Command::Olm { out, check } => generate::<olm::Bundle>(out, check),
        Command::CheckConfig {
            files,
            mode,
            output,
        } => {
            let modes = match mode {
                Some(kind) => vec![kind],
                None => strum::VariantArray::VARIANTS.to_vec(),
            };
            let checked = report::check_files(&files, &modes, output);
            print!("{}", checked.text);
            return if checked.valid {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Command::Render {
            files,
            output,
            namespace,
            serves,
            allowed_images,
            allowed_prometheus,
        } => render(
            &files,
            output,
            &serves,
            namespace,
            allowed_images,
            allowed_prometheus,
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

#[derive(clap::Args)]
struct RunArgs {
    /// Where the admission webhook listens.
    #[arg(long, default_value = "0.0.0.0:8443")]
    webhook_listen: std::net::SocketAddr,
    /// The Service the apiserver calls the webhook through, NAMESPACE/NAME. Default:
    /// `clair-operator-webhook` in the pod's namespace (`POD_NAMESPACE`), else in
    /// `clair-operator`.
    #[arg(long)]
    webhook_service: Option<String>,
    /// Call the webhook at this base URL instead (an operator outside the cluster),
    /// for example https://10.0.0.5:8443.
    #[arg(long)]
    webhook_url: Option<String>,
    /// Serve the certificate mounted in this folder (tls.crt, tls.key, ca.crt, as
    /// cert-manager writes them) instead of issuing one; changed files are reloaded.
    #[arg(long)]
    webhook_cert_dir: Option<PathBuf>,
    /// How often each replica rereads the webhook's certificate (renewed, reissued,
    /// remounted) and checks its configuration, in seconds. A rotated CA is published one
    /// check before it is served, and the one before it stays trusted until every replica
    /// serves the new one.
    #[arg(long, env = "CLAIR_OPERATOR_WEBHOOK_RECHECK_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    webhook_recheck_seconds: u64,
    /// Serve the webhooks but leave their configurations to the installer: OLM creates them
    /// from the bundle's `webhookdefinitions` and mounts the certificate (with
    /// `--webhook-cert-dir`, which this needs; its `ca.crt` may then be absent).
    #[arg(long, requires = "webhook_cert_dir")]
    no_webhook_registration: bool,
    /// Run without the admission webhook (and without re-rendering templates).
    #[arg(long)]
    no_webhook: bool,
    /// Answer only callers with a TLS client certificate of this CA (PEM): the kube-apiserver,
    /// given a webhook kubeconfig by its `--admission-control-config-file`. Only then do the
    /// webhooks read the ConfigMaps and Secrets a request names to check it; without it
    /// they answer anyone, from the request alone (docs/security.md, "The webhook's callers").
    #[arg(long, env = "CLAIR_OPERATOR_WEBHOOK_CLIENT_CA")]
    webhook_client_ca: Option<PathBuf>,
    /// With `--webhook-client-ca`: the names (common name or DNS name) a caller's
    /// certificate must carry one of, when the CA also issues other clients' certificates.
    #[arg(
        long,
        env = "CLAIR_OPERATOR_WEBHOOK_CLIENT_NAMES",
        value_delimiter = ',',
        requires = "webhook_client_ca"
    )]
    webhook_client_names: Vec<String>,
    /// Image repositories resources may run, as prefixes (`quay.io/projectquay/,
    /// registry.example/clair`); every image when unset. Others are refused by the webhook
    /// and never rendered.
    #[arg(long, env = "CLAIR_OPERATOR_ALLOWED_IMAGES", value_delimiter = ',')]
    allowed_images: Vec<String>,
    /// The Prometheus origins a resource may give KEDA to query
    /// (`http://prometheus-operated.monitoring.svc:9090`); any when unset. Others are
    /// refused by the webhook and never rendered.
    #[arg(long, env = "CLAIR_OPERATOR_ALLOWED_PROMETHEUS", value_delimiter = ',')]
    allowed_prometheus: Vec<String>,
    /// The networks the external databases' checks may connect to (`10.0.0.0/8,fd00::/8`),
    /// as the names resolve; any when unset, but those of `--database-networks-refused`.
    #[arg(long, env = "CLAIR_OPERATOR_DATABASE_NETWORKS", value_delimiter = ',')]
    database_networks: Vec<String>,
    /// The networks the checks never connect to, whatever `--database-networks` says: by
    /// default loopback, the unspecified address and link-local (the operator's own pod, a
    /// cloud's metadata service); `none` for no such network.
    #[arg(
        long,
        env = "CLAIR_OPERATOR_DATABASE_NETWORKS_REFUSED",
        value_delimiter = ','
    )]
    database_networks_refused: Option<Vec<String>>,
    /// Watch and write only in these namespaces (`team-a,team-b`): Roles in each of them
    /// suffice (`deploy/namespaced`), and the webhooks see only them. The whole cluster
    /// when unset.
    #[arg(long, env = "CLAIR_OPERATOR_NAMESPACES", value_delimiter = ',')]
    namespaces: Vec<String>,
    /// Where `/metrics` (OpenMetrics), `/healthz` and `/readyz` are served: over TLS, each
    /// scrape's bearer token reviewed by the apiserver (TokenReview, then a
    /// SubjectAccessReview for `get` on the non-resource URL `/metrics`); the health
    /// endpoints unauthenticated.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_listen: std::net::SocketAddr,
    /// Serve the metrics over plain HTTP to anyone: for a local run only.
    #[arg(
        long,
        env = "CLAIR_OPERATOR_METRICS_INSECURE",
        conflicts_with = "metrics_cert_dir"
    )]
    metrics_insecure: bool,
    /// Serve the metrics with the certificate mounted in this folder (`tls.crt`, `tls.key`,
    /// as cert-manager or OpenShift's service CA write them; reread when they change)
    /// instead of a self-signed one made at start.
    #[arg(long, env = "CLAIR_OPERATOR_METRICS_CERT_DIR")]
    metrics_cert_dir: Option<PathBuf>,
    /// Run the controllers without electing a leader: for a single replica only (two would
    /// both write). By default the replicas elect one on the Lease `clair-operator` in
    /// `--leader-election-namespace`, and the others serve the webhooks and metrics.
    #[arg(long, env = "CLAIR_OPERATOR_NO_LEADER_ELECTION")]
    no_leader_election: bool,
    /// Where the leader election's Lease lives; the pod's namespace (`POD_NAMESPACE`), else
    /// the webhook Service's.
    #[arg(long, env = "POD_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// How often an Available Clair is looked at again with nothing changed, in seconds:
    /// the pace at which its external databases are probed (a lost database is seen within
    /// this, plus the probe's own 10 s). Rolling out, every 60 s; waiting on its database or
    /// Degraded, every 20 s.
    #[arg(long, env = "CLAIR_OPERATOR_AVAILABLE_RECHECK_SECONDS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(5..=3600))]
    available_recheck_seconds: u64,
    /// How log lines are written: `text` for people, `json` for log pipelines.
    #[arg(
        long,
        env = "CLAIR_OPERATOR_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    /// Export each reconcile as a span over OTLP/HTTP to the collector at this base URL
    /// (`/v1/traces` is appended), for example `http://jaeger-collector.observability:4318`.
    /// Off when unset. `OTEL_EXPORTER_OTLP_HEADERS` adds headers.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
}

impl RunArgs {
    /// The launcher's settings, each argument checked.
    fn settings(&self) -> Result<launch::Settings, String> {
        let webhook = self.webhook()?;
        let election = (!self.no_leader_election).then(|| launch::Election {
            namespace: self.leader_election_namespace.clone().unwrap_or_else(|| {
                webhook_service_parts(&self.webhook_service())
                    .map_or("clair-operator", |(ns, _)| ns)
                    .to_string()
            }),
            identity: launch::identity(),
            timing: clair_operator::leader::Timing::default(),
        });
        Ok(launch::Settings {
            metrics_listen: self.metrics_listen,
            metrics: if self.metrics_insecure {
                launch::MetricsSecurity::Insecure
            } else {
                launch::MetricsSecurity::Secure {
                    cert_dir: self.metrics_cert_dir.clone(),
                }
            },
            webhook,
            platform: self.platform()?,
            namespaces: self.namespaces()?,
            available_recheck: std::time::Duration::from_secs(self.available_recheck_seconds),
            election,
        })
    }

    /// What tenants may name, each flag checked.
    fn platform(&self) -> Result<clair_operator::platform::Platform, String> {
        use clair_operator::database::networks::Networks;
        Ok(clair_operator::platform::Platform {
            images: clair_operator::images::ImagePolicy::new(self.allowed_images.iter().cloned()),
            prometheus: clair_operator::platform::Origins::parse(&self.allowed_prometheus)?,
            databases: Networks::parse(
                &self.database_networks,
                self.database_networks_refused.as_deref(),
            )?,
        })
    }

    /// The namespaces in scope, each a valid namespace name.
    fn namespaces(&self) -> Result<Vec<String>, String> {
        let mut namespaces = Vec::new();
        // An empty value is every namespace (OLM's `olm.targetNamespaces` in AllNamespaces).
        if self.namespaces.iter().all(|n| n.trim().is_empty()) {
            return Ok(namespaces);
        }
        for name in self.namespaces.iter().map(|n| n.trim()) {
            names::label(name).map_err(|e| {
                format!("--namespaces: {e}; give namespace names separated by commas")
            })?;
            if !namespaces.iter().any(|n| n == name) {
                namespaces.push(name.to_string());
            }
        }
        Ok(namespaces)
    }

    /// `--webhook-service`, or `clair-operator-webhook` in the pod's namespace.
    fn webhook_service(&self) -> String {
        self.webhook_service.clone().unwrap_or_else(|| {
            let namespace = std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|ns| !ns.is_empty())
                .unwrap_or_else(|| "clair-operator".to_string());
            format!("{namespace}/clair-operator-webhook")
        })
    }

    fn webhook(&self) -> Result<Option<webhook::register::Settings>, String> {
        if self.no_webhook {
            return Ok(None);
        }
        let service = self.webhook_service();
        let (namespace, name) = webhook_service_parts(&service)?;
        let (target, hosts) = match &self.webhook_url {
            Some(url) => {
                let (base, host) = webhook_url(url)?;
                (webhook::register::Target::Url(base), vec![host])
            }
            None => (
                webhook::register::Target::Service {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    port: 443,
                },
                vec![
                    format!("{name}.{namespace}.svc"),
                    format!("{name}.{namespace}.svc.cluster.local"),
                ],
            ),
        };
        Ok(Some(webhook::register::Settings {
            name: webhook::CONFIGURATION_NAME.to_string(),
            listen: self.webhook_listen,
            target,
            hosts,
            namespace: namespace.to_string(),
            recheck: std::time::Duration::from_secs(self.webhook_recheck_seconds),
            mounted: self.webhook_cert_dir.clone(),
            register: !self.no_webhook_registration,
            platform: self.platform()?,
            namespaces: self.namespaces()?,
            callers: match &self.webhook_client_ca {
                Some(ca) => webhook::callers::Callers::Apiserver {
                    ca: ca.clone(),
                    names: self.webhook_client_names.clone(),
                },
                None => webhook::callers::Callers::Anyone,
            },
        }))
    }
}

/// `--webhook-service`'s NAMESPACE (a namespace name) and NAME (a Service name).
fn webhook_service_parts(service: &str) -> Result<(&str, &str), String> {
    let (namespace, name) = service
        .split_once('/')
        .ok_or_else(|| format!("--webhook-service {service:?} must be NAMESPACE/NAME"))?;
    names::label(namespace).map_err(|e| format!("--webhook-service: its NAMESPACE {e}"))?;
    names::service(name).map_err(|e| format!("--webhook-service: its NAME {e}"))?;
    Ok((namespace, name))
}

/// `--webhook-url`'s base (`https://HOST[:PORT]`, onto which each webhook's path is joined)
/// and its host, for the webhook's certificate: a DNS name, or an IP address (an IPv6
/// literal without its brackets).
fn webhook_url(url: &str) -> Result<(String, String), String> {
    let parsed =
        url::Url::parse(url).map_err(|e| format!("--webhook-url {url:?} is not a URL: {e}"))?;
    let form = "give https://HOST[:PORT]: each webhook's path is added to it";
    if parsed.scheme() != "https" {
        return Err(format!(
            "--webhook-url {url:?}: the apiserver calls webhooks over TLS only; {form}"
        ));
    }
    if !matches!(parsed.path(), "" | "/")
        || parsed.query().is_some()
        || parsed.fragment().is_some()
        || !parsed.username().is_empty()
        || parsed.password().is_some()
    {
        return Err(format!(
            "--webhook-url {url:?} has a path, query, fragment or user; {form}"
        ));
    }
    let host = match parsed.host() {
        Some(url::Host::Domain(domain)) => domain.to_string(),
        Some(url::Host::Ipv4(address)) => address.to_string(),
        Some(url::Host::Ipv6(address)) => address.to_string(),
        None => return Err(format!("--webhook-url {url:?} names no host; {form}")),
    };
    let base = parsed.as_str().trim_end_matches('/').to_string();
    Ok((base, host))
}

/// `indexer`, `matcher` or `notifier`, listed in `--help`.
fn service_kind_parser() -> impl clap::builder::TypedValueParser<Value = ServiceKind> {
    use clap::builder::TypedValueParser;
    use strum::VariantArray;
    clap::builder::PossibleValuesParser::new(ServiceKind::VARIANTS.iter().map(|k| k.as_str()))
        .try_map(|name| name.parse::<ServiceKind>())
}

/// `render`: the documents of `files`, rendered as the controllers would, written to
/// standard output; the webhook's warnings to standard error.
fn render(
    files: &[PathBuf],
    output: offline::Format,
    serves: &[offline::Served],
    namespace: String,
    allowed_images: Vec<String>,
    allowed_prometheus: Vec<String>,
) -> Result<(), String> {
    let platform = clair_operator::platform::Platform {
        images: clair_operator::images::ImagePolicy::new(allowed_images),
        prometheus: clair_operator::platform::Origins::parse(&allowed_prometheus)?,
        ..Default::default()
    };
    let options = offline::Options::serving(serves, namespace, platform);
    let documents = offline::read_files(files)?;
    let rendered = offline::render(documents, &options).map_err(|e| e.to_string())?;
    for warning in &rendered.warnings {
        eprintln!("warning: {warning}");
    }
    print!("{}", offline::write(&rendered.objects, output)?);
    Ok(())
}

/// A generator command: print `G`'s files, write them into `--out`, or compare `--check`.
fn generate<G: Generator>(out: Option<PathBuf>, check: Option<PathBuf>) -> Result<(), String>
where
    G::Error: std::fmt::Display,
{
    let target = generated::Target::of(out, check);
    if let Some(text) = generated::run::<G>(&target).map_err(|e| e.to_string())? {
        print!("{text}");
    }
    Ok(())
}

/// `run`: the settings from the arguments, then the operator until SIGTERM or Ctrl-C.
fn run(args: RunArgs) -> Result<(), String> {
    let settings = args.settings()?;
    let traces = args
        .otlp_endpoint
        .as_deref()
        .map(clair_operator::telemetry::traces_url)
        .transpose()?;
    clair_operator::allocator::configure();
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    // Kept until `run` returns: dropping it sends the spans still buffered.
    let _exporting =
        clair_operator::telemetry::init_logs(args.log_format, traces.as_ref(), runtime.handle())?;
    runtime.block_on(async {
        tokio::spawn(clair_operator::allocator::trim_periodically());
        let telemetry = clair_operator::metrics::Telemetry::new();
        let config = kube::Config::infer()
            .await
            .map_err(|e| format!("cannot find the cluster's address and credentials: {e}"))?;
        let client =
            clair_operator::metrics::client::counted_client(config, telemetry.metrics.clone())
                .map_err(|e| format!("cannot reach the cluster: {e}"))?;
        tracing::info!("clair-operator starting");
        launch::run(client, telemetry, settings, launch::shutdown_signal())
            .await
            .map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(args: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(["clair-operator", "run"].iter().chain(args)).unwrap();
        match cli.command {
            Command::Run(args) => *args,
            _ => unreachable!(),
        }
    }

    /// OLM's `olm.targetNamespaces` is empty for AllNamespaces: every namespace, not an error.
    #[test]
    fn an_empty_namespace_list_is_every_namespace() {
        assert_eq!(
            run_args(&["--namespaces="]).namespaces(),
            Ok(Vec::<String>::new())
        );
        assert_eq!(
            run_args(&["--namespaces=a,b"]).namespaces(),
            Ok(vec!["a".to_string(), "b".to_string()])
        );
        assert!(run_args(&["--namespaces=a,,b"]).namespaces().is_err());
    }

    #[test]
    fn leaving_registration_to_the_installer_needs_a_mounted_certificate() {
        assert!(
            Cli::try_parse_from(["clair-operator", "run", "--no-webhook-registration"]).is_err()
        );
        let args = run_args(&["--no-webhook-registration", "--webhook-cert-dir=/certs"]);
        assert!(!args.webhook().unwrap().unwrap().register);
    }

    #[test]
    fn the_webhook_url_is_a_base_with_a_host() {
        let ok = |url: &str| webhook_url(url).unwrap();
        assert_eq!(
            ok("https://webhook.example:8443"),
            (
                "https://webhook.example:8443".into(),
                "webhook.example".into()
            )
        );
        assert_eq!(
            ok("https://10.0.0.1:8443/"),
            ("https://10.0.0.1:8443".into(), "10.0.0.1".into())
        );
        assert_eq!(
            ok("https://[::1]:8443/"),
            ("https://[::1]:8443".into(), "::1".into())
        );
        // A path would be joined with each webhook's own: the apiserver would call nothing.
        for bad in [
            "http://webhook.example/",
            "webhook.example:8443",
            "https://webhook.example/validate",
            "https://webhook.example/?x=1",
            "https://user@webhook.example/",
        ] {
            assert!(webhook_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_webhook_service_is_two_names() {
        assert_eq!(webhook_service_parts("ns/svc"), Ok(("ns", "svc")));
        for bad in ["svc", "ns/", "NS/svc", "ns/svc/x", "ns/0svc"] {
            let error = webhook_service_parts(bad).unwrap_err();
            assert!(error.contains("--webhook-service"), "{error}");
        }
    }
}
