//! A stand-in ingress controller for the real-node tier (issue 30): no real ingress
//! controller builds here (`../shared/notes/clair-load.md`), so Debian's nginx, configured
//! from the Ingress objects in the cluster (and the HTTPRoutes on a Gateway of its class),
//! carries the requests, following ingress-nginx's and Gateway API's documented behaviour
//! for exactly what the operator uses ([`nginx::render`] and [`gateway`] say which).
//!
//! [`Router`] runs nginx as a host process on the node's address and a poller beside it:
//! every half second it lists the Ingresses, Services, Gateways and HTTPRoutes, reads the
//! TLS Secrets the Ingresses name, renders the config and, when it changed, has `nginx -t`
//! check it, swaps it in and reloads nginx (SIGHUP: in-flight requests finish on the old
//! workers). The config also serves its generation on a loopback status port, so the poller
//! knows when the new workers answer, and only then counts the objects' versions as served
//! ([`Router::serving`] waits for one).

pub mod gateway;
pub mod nginx;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Api;

use crate::controlplane::free_ports;
use crate::host::NODE_IP;
use crate::process::{Background, Process};
use crate::{Error, Result, io_error};

/// The nginx that `scripts/install-deps` installs (Debian's package).
pub const NGINX: &str = "/usr/sbin/nginx";
/// The IngressClass the stand-in serves (besides Ingresses that name none), and the
/// GatewayClass of the Gateways whose HTTPRoutes it serves.
pub const CLASS: &str = "nginx";
/// How often the cluster is read.
const POLL: Duration = Duration::from_millis(500);

/// What the poller last put in service.
#[derive(Debug, Default)]
struct Served {
    /// The resourceVersion of each Ingress (by namespace and name) and HTTPRoute (by
    /// `HTTPRoute/namespace` and name) the running config was made from.
    versions: BTreeMap<(String, String), String>,
    /// What the translation left out or ignored.
    report: Vec<String>,
    /// The last config nginx refused, or the last read that failed.
    error: Option<String>,
}

/// nginx and its poller, stopped on drop.
pub struct Router {
    dir: PathBuf,
    http: SocketAddr,
    https: SocketAddr,
    served: Arc<Mutex<Served>>,
    // Dropped before nginx: the poller signals it.
    _poller: Background,
    // SIGTERM on drop: nginx's master stops its workers.
    process: Process,
}

impl Router {
    /// Starts nginx on free ports of the node's address with its files under `dir`, and the
    /// poller reading the cluster through `kubeconfig`.
    pub(crate) fn start(kubeconfig: &Path, dir: &Path, logs: &Path) -> Result<Self> {
        if !Path::new(NGINX).is_file() {
            return Err(Error::Missing(format!(
                "the real node's ingress stand-in needs nginx at {NGINX} (Debian package \
                 nginx): run scripts/install-deps"
            )));
        }
        sweep_orphaned_workers();
        let [http, https, status] = free_ports()?;
        let listen = nginx::Listen {
            http: SocketAddr::new(NODE_IP.parse().map_err(bad_ip)?, http),
            https: SocketAddr::new(NODE_IP.parse().map_err(bad_ip)?, https),
            status: SocketAddr::from(([127, 0, 0, 1], status)),
        };
        std::fs::create_dir_all(dir.join("certs"))
            .map_err(io_error("create the router's folder"))?;
        let conf = dir.join("nginx.conf");
        let first = nginx::render(&nginx::Snapshot::empty(CLASS), listen, dir, 0);
        std::fs::write(&conf, &first.config).map_err(io_error("write the router's config"))?;
        let mut command = std::process::Command::new(NGINX);
        command
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off;"]);
        let mut process = Process::spawn_command("router-nginx", command, logs)?;
        let master = process.id();
        let deadline = Instant::now() + Duration::from_secs(20);
        while generation(listen.status) != Some(0) {
            process.check_running()?;
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: "nginx (the ingress stand-in) to answer".into(),
                    seconds: 20,
                    detail: format!("; its log:\n{}", process.tail(10)),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)
            .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        let served = Arc::new(Mutex::new(Served::default()));
        let poller = {
            let served = Arc::clone(&served);
            let dir = dir.to_path_buf();
            Background::spawn(move || async move {
                let poller = Poller {
                    dir,
                    listen,
                    master,
                    served,
                    generation: 0,
                    config: first.config,
                    certificates: BTreeMap::new(),
                    certificates_changed: false,
                };
                poller.run(kubeconfig).await
            })
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            http: listen.http,
            https: listen.https,
            served,
            _poller: poller,
            process,
        })
    }

    /// The config nginx runs now (for a test to check what a route was given).
    pub fn config(&self) -> Result<String> {
        std::fs::read_to_string(self.dir.join("nginx.conf"))
            .map_err(io_error("read the router's config"))
    }

    /// Plain HTTP, `NODE_IP:PORT` (a client sends the Ingress's host in `Host`).
    pub fn http(&self) -> SocketAddr {
        self.http
    }

    /// HTTPS for the hosts of the Ingresses' `tls` entries (the host as the server name).
    pub fn https(&self) -> SocketAddr {
        self.https
    }

    /// Waits up to `within` until the running config was made from Ingress `name` in
    /// `namespace` as the apiserver holds it now. Fails with what the translation reported.
    pub async fn serving(
        &self,
        client: &kube::Client,
        namespace: &str,
        name: &str,
        within: Duration,
    ) -> Result<()> {
        let ingresses: Api<Ingress> = Api::namespaced(client.clone(), namespace);
        let key = (namespace.to_string(), name.to_string());
        self.serving_version(&key, within, || version_of(&ingresses, name))
            .await
    }

    /// As [`Router::serving`], for HTTPRoute `name`.
    pub async fn serving_http_route(
        &self,
        client: &kube::Client,
        namespace: &str,
        name: &str,
        within: Duration,
    ) -> Result<()> {
        let routes: Api<kube::api::DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &http_routes());
        let key = (format!("HTTPRoute/{namespace}"), name.to_string());
        self.serving_version(&key, within, || version_of(&routes, name))
            .await
    }

    async fn serving_version<F, Fut>(
        &self,
        key: &(String, String),
        within: Duration,
        current: F,
    ) -> Result<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Option<String>>>,
    {
        let (namespace, name) = (&key.0, &key.1);
        let deadline = Instant::now() + within;
        loop {
            let current = current().await?;
            // The guard is not held across the sleep (the future stays Send).
            let timed_out = {
                let served = self.lock();
                if current.is_some() && served.versions.get(key) == current.as_ref() {
                    return Ok(());
                }
                (Instant::now() > deadline).then(|| {
                    format!(
                        " (the apiserver's version {current:?}, served {:?}); report: {:?}; error: {:?}",
                        served.versions.get(key),
                        served.report,
                        served.error
                    )
                })
            };
            if let Some(detail) = timed_out {
                return Err(Error::Timeout {
                    what: format!("the ingress stand-in to serve {namespace}/{name}"),
                    seconds: within.as_secs(),
                    detail,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Served> {
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client that reaches `host` through the stand-in, as a client whose DNS names the
    /// ingress controller for that host would (`http://HOST/...` to [`Router::http`],
    /// `https://HOST/...` to [`Router::https`] with the host as the server name), trusting
    /// `ca_pem` alone over HTTPS; other hosts as usual. Answers of any status are returned,
    /// not errors; each request is bounded by `timeout`.
    pub fn agent(
        &self,
        host: &str,
        ca_pem: Option<&str>,
        timeout: Duration,
    ) -> Result<ureq::Agent> {
        let mut roots = Vec::new();
        for item in ureq::tls::parse_pem(ca_pem.unwrap_or_default().as_bytes()) {
            if let ureq::tls::PemItem::Certificate(certificate) =
                item.map_err(|e| Error::Invalid {
                    what: "the CA the router's client trusts",
                    detail: e.to_string(),
                })?
            {
                roots.push(certificate);
            }
        }
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .build();
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            // A redirect is an answer the tests look at (plain HTTP to a TLS host: 308).
            .max_redirects(0)
            .tls_config(tls)
            .build();
        let resolver = Through {
            host: host.to_ascii_lowercase(),
            http: self.http,
            https: self.https,
        };
        Ok(ureq::Agent::with_parts(
            config,
            ureq::unversioned::transport::DefaultConnector::new(),
            resolver,
        ))
    }

    /// Fails with the end of nginx's log when it has exited.
    pub fn check_running(&mut self) -> Result<()> {
        self.process.check_running()
    }
}

/// The resourceVersion of object `name`, if it exists.
async fn version_of<K>(api: &Api<K>, name: &str) -> Result<Option<String>>
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .get_opt(name)
        .await?
        .and_then(|object| object.meta().resource_version.clone()))
}

fn http_routes() -> kube::api::ApiResource {
    gateway_resource("HTTPRoute", "httproutes")
}

fn gateway_resource(kind: &str, plural: &str) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", kind),
        plural,
    )
}

/// Every object of Gateway API v1 kind `kind`; none where the cluster does not serve it.
async fn gateway_api(
    client: &kube::Client,
    kind: &str,
    plural: &str,
) -> std::result::Result<Vec<kube::api::DynamicObject>, String> {
    match Api::<kube::api::DynamicObject>::all_with(client.clone(), &gateway_resource(kind, plural))
        .list(&Default::default())
        .await
    {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        Err(e) => Err(format!("list {plural}: {e}")),
    }
}

/// Resolves one host to the stand-in's address for the request's scheme.
#[derive(Debug)]
struct Through {
    host: String,
    http: SocketAddr,
    https: SocketAddr,
}

impl ureq::unversioned::resolver::Resolver for Through {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> std::result::Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        if uri.host().map(str::to_ascii_lowercase).as_deref() != Some(self.host.as_str()) {
            return ureq::unversioned::resolver::DefaultResolver::default()
                .resolve(uri, config, timeout);
        }
        let address = match uri.scheme_str() {
            Some("https") => self.https,
            _ => self.http,
        };
        let mut addresses = self.empty();
        addresses.push(address);
        Ok(addresses)
    }
}

fn bad_ip(e: std::net::AddrParseError) -> Error {
    Error::Invalid {
        what: "the node's address",
        detail: e.to_string(),
    }
}

/// The generation the running workers serve, from the status port.
fn generation(status: SocketAddr) -> Option<u64> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(2)))
        .build()
        .into();
    let mut response = agent
        .get(format!("http://{status}/generation"))
        .call()
        .ok()?;
    response
        .body_mut()
        .read_to_string()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// nginx's master gets SIGKILL when the harness dies (`Process`), but its workers do not:
/// one left by an earlier run would hold the ports. Workers whose master is gone have been
/// re-parented to init; a running nginx's workers have their master as parent.
fn sweep_orphaned_workers() {
    for (pid, cmdline, folder) in crate::process::processes() {
        if !cmdline.starts_with(b"nginx: worker process") {
            continue;
        }
        let stat = std::fs::read_to_string(folder.join("stat")).unwrap_or_default();
        // `pid (comm) state ppid ...`: the parent after the command's closing parenthesis.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if parent == Some(1) {
            // SAFETY: a signal to a process that is an orphaned nginx worker.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// A TLS Secret's certificate and key files, with the content they hold.
struct Written {
    files: (PathBuf, PathBuf),
    content: Vec<u8>,
}

/// The poll loop's state.
struct Poller {
    dir: PathBuf,
    listen: nginx::Listen,
    master: u32,
    served: Arc<Mutex<Served>>,
    generation: u64,
    /// The config nginx runs.
    config: String,
    /// The certificate files written, by Secret.
    certificates: BTreeMap<(String, String), Written>,
    /// A certificate file was written since the last reload.
    certificates_changed: bool,
}

impl Poller {
    async fn run(mut self, kubeconfig: kube::config::Kubeconfig) {
        let client = match kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| e.to_string())
            .and_then(|c| kube::Client::try_from(c).map_err(|e| e.to_string()))
        {
            Ok(client) => client,
            Err(e) => {
                self.lock().error = Some(format!("no client for the cluster: {e}"));
                return;
            }
        };
        loop {
            if let Err(e) = self.tick(&client).await {
                self.lock().error = Some(e);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Served> {
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn tick(&mut self, client: &kube::Client) -> std::result::Result<(), String> {
        let (snapshot, versions) = self.snapshot(client).await?;
        let next = nginx::render(&snapshot, self.listen, &self.dir, self.generation + 1);
        // The generation is part of the config: compare what else changed.
        let unchanged = next.config
            == self.config.replace(
                &nginx::generation_line(self.generation),
                &nginx::generation_line(self.generation + 1),
            );
        // A renewed certificate keeps its file names: nginx reads it again on a reload.
        if !unchanged || std::mem::take(&mut self.certificates_changed) {
            self.reload(&next.config).await?;
        }
        let mut served = self.lock();
        served.versions = versions;
        served.report = next.report;
        served.error = None;
        Ok(())
    }

    /// Checks `config` with `nginx -t`, swaps it in, reloads, and waits until the new
    /// workers answer with its generation.
    async fn reload(&mut self, config: &str) -> std::result::Result<(), String> {
        let candidate = self.dir.join("nginx.conf.next");
        std::fs::write(&candidate, config).map_err(|e| format!("write the config: {e}"))?;
        let checked = tokio::process::Command::new(NGINX)
            .arg("-t")
            .arg("-p")
            .arg(&self.dir)
            .arg("-c")
            .arg(&candidate)
            .output()
            .await
            .map_err(|e| format!("run nginx -t: {e}"))?;
        if !checked.status.success() {
            return Err(format!(
                "nginx -t refused the config: {}",
                String::from_utf8_lossy(&checked.stderr)
            ));
        }
        std::fs::rename(&candidate, self.dir.join("nginx.conf"))
            .map_err(|e| format!("swap the config in: {e}"))?;
        let pid = i32::try_from(self.master).map_err(|e| e.to_string())?;
        // SAFETY: a signal to the nginx master this harness started.
        unsafe {
            libc::kill(pid, libc::SIGHUP);
        }
        let wanted = self.generation + 1;
        let status = self.listen.status;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let answered = tokio::task::spawn_blocking(move || generation(status))
                .await
                .ok()
                .flatten();
            if answered == Some(wanted) {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "nginx did not serve generation {wanted} within 10 s (it answers {answered:?})"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.generation = wanted;
        self.config = config.to_string();
        Ok(())
    }

    /// The Ingresses and Services of the cluster, with the served Ingresses' TLS Secrets
    /// written to files; and the Ingresses' resourceVersions.
    async fn snapshot(
        &mut self,
        client: &kube::Client,
    ) -> std::result::Result<(nginx::Snapshot, BTreeMap<(String, String), String>), String> {
        let read = |what: &'static str| move |e: kube::Error| format!("list {what}: {e}");
        let ingresses = Api::<Ingress>::all(client.clone())
            .list(&Default::default())
            .await
            .map_err(read("Ingresses"))?
            .items;
        let services = Api::<Service>::all(client.clone())
            .list(&Default::default())
            .await
            .map_err(read("Services"))?
            .items;
        let mut snapshot = nginx::Snapshot::empty(CLASS);
        for service in services {
            let namespace = service.metadata.namespace.clone().unwrap_or_default();
            let name = service.metadata.name.clone().unwrap_or_default();
            let Some(spec) = service.spec else { continue };
            let Some(cluster_ip) = spec.cluster_ip.filter(|ip| ip != "None") else {
                continue;
            };
            let ports = spec
                .ports
                .into_iter()
                .flatten()
                .map(|p| (p.name, p.port))
                .collect();
            snapshot
                .services
                .insert((namespace, name), nginx::Backend { cluster_ip, ports });
        }
        let mut versions = BTreeMap::new();
        for ingress in &ingresses {
            let namespace = ingress.metadata.namespace.clone().unwrap_or_default();
            let name = ingress.metadata.name.clone().unwrap_or_default();
            if let Some(version) = &ingress.metadata.resource_version {
                versions.insert((namespace.clone(), name), version.clone());
            }
            let secrets = ingress
                .spec
                .iter()
                .flat_map(|s| s.tls.iter().flatten())
                .filter_map(|t| t.secret_name.clone());
            for secret in secrets {
                if let Some(files) = self.certificate(client, &namespace, &secret).await? {
                    snapshot
                        .certificates
                        .insert((namespace.clone(), secret), files);
                }
            }
        }
        snapshot.ingresses = ingresses;
        // Gateway API, where its kinds are served: the Gateways of the stand-in's class and
        // the HTTPRoutes (their versions counted like the Ingresses').
        for gateway in gateway_api(client, "Gateway", "gateways").await? {
            if gateway.data["spec"]["gatewayClassName"] == CLASS {
                snapshot.gateways.insert((
                    gateway.metadata.namespace.clone().unwrap_or_default(),
                    gateway.metadata.name.clone().unwrap_or_default(),
                ));
            }
        }
        for route in gateway_api(client, "HTTPRoute", "httproutes").await? {
            let value = serde_json::to_value(&route).map_err(|e| e.to_string())?;
            if let Some(parsed) = gateway::HttpRoute::parse(&value) {
                if let Some(version) = &route.metadata.resource_version {
                    versions.insert(
                        (
                            format!("HTTPRoute/{}", parsed.namespace),
                            parsed.name.clone(),
                        ),
                        version.clone(),
                    );
                }
                snapshot.http_routes.push(parsed);
            }
        }
        Ok((snapshot, versions))
    }

    /// The files holding TLS Secret `name`'s certificate and key, written when its content
    /// changed; `None` when it does not exist or lacks them.
    async fn certificate(
        &mut self,
        client: &kube::Client,
        namespace: &str,
        name: &str,
    ) -> std::result::Result<Option<(PathBuf, PathBuf)>, String> {
        let secret = Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|e| format!("read Secret {namespace}/{name}: {e}"))?;
        let data = secret.and_then(|s| s.data).unwrap_or_default();
        let (Some(cert), Some(key)) = (data.get("tls.crt"), data.get("tls.key")) else {
            return Ok(None);
        };
        let content = [cert.0.as_slice(), b"\0", key.0.as_slice()].concat();
        let id = (namespace.to_string(), name.to_string());
        if let Some(written) = self.certificates.get(&id)
            && written.content == content
        {
            return Ok(Some(written.files.clone()));
        }
        let base = self.dir.join("certs").join(format!("{namespace}-{name}"));
        let files = (base.with_extension("crt"), base.with_extension("key"));
        std::fs::write(&files.0, &cert.0).map_err(|e| format!("write a certificate: {e}"))?;
        std::fs::write(&files.1, &key.0).map_err(|e| format!("write a key: {e}"))?;
        self.certificates.insert(
            id,
            Written {
                files: files.clone(),
                content,
            },
        );
        self.certificates_changed = true;
        Ok(Some(files))
    }
}
