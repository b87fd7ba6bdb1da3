//! Ingress objects → an nginx config, by ingress-nginx's documented rules, for what the
//! operator renders and no more:
//!
//! - an Ingress is served when its `ingressClassName` is the stand-in's class, or unset
//!   (ingress-nginx's `--watch-ingress-without-class`);
//! - one `server` per host (rules without a host go to the default server), an unknown host
//!   or path answered 404 (the default backend);
//! - `Prefix` paths match element-wise (`/indexer/` matches `/indexer` and `/indexer/x`, not
//!   `/indexerx`), longest prefix first (nginx's own choice among prefix locations); `Exact`
//!   matches the path alone; the request's path reaches the Service unchanged;
//! - each path goes to the Service's cluster IP and port (ingress-nginx's
//!   `service-upstream: "true"`: kube-proxy picks the pod), a missing Service or port
//!   answered 503;
//! - `nginx.ingress.kubernetes.io/proxy-read-timeout`, `-send-timeout` and
//!   `-connect-timeout`: whole seconds for that Ingress's paths; anything else is ignored,
//!   as ingress-nginx's parser does, and reported; the defaults 60 s, 60 s and 5 s;
//! - `tls` hosts served over HTTPS with the named Secret's certificate, plain HTTP
//!   redirected with 308 (`ssl-redirect`'s default);
//! - HTTPRoutes attached to a Gateway of the stand-in's class, by Gateway API's rules
//!   (`super::gateway`), after the Ingresses;
//! - ingress-nginx's proxy defaults that matter to Clair: HTTP/1.1 upstream, `Host` kept,
//!   `X-Forwarded-*` set, no buffering, no gzip (an `ETag` reaches the client as Clair sent
//!   it), `client_max_body_size 1m`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use k8s_openapi::api::networking::v1::{Ingress, IngressServiceBackend};

pub const READ_TIMEOUT: &str = "nginx.ingress.kubernetes.io/proxy-read-timeout";
pub const SEND_TIMEOUT: &str = "nginx.ingress.kubernetes.io/proxy-send-timeout";
pub const CONNECT_TIMEOUT: &str = "nginx.ingress.kubernetes.io/proxy-connect-timeout";

/// ingress-nginx's defaults, in seconds.
const DEFAULT_READ: u32 = 60;
const DEFAULT_SEND: u32 = 60;
const DEFAULT_CONNECT: u32 = 5;

/// A Service as the router forwards to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    pub cluster_ip: String,
    /// Its ports: name (when named) and number.
    pub ports: Vec<(Option<String>, i32)>,
}

/// What the config is made from.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub ingresses: Vec<Ingress>,
    /// Services by namespace and name.
    pub services: BTreeMap<(String, String), Backend>,
    /// The certificate and key files written for each TLS Secret, by namespace and name.
    pub certificates: BTreeMap<(String, String), (PathBuf, PathBuf)>,
    /// The IngressClass the stand-in serves, and the GatewayClass.
    pub class: String,
    pub http_routes: Vec<super::gateway::HttpRoute>,
    /// The Gateways of the stand-in's class, by namespace and name.
    pub gateways: std::collections::BTreeSet<(String, String)>,
}

/// Where nginx listens.
#[derive(Clone, Copy, Debug)]
pub struct Listen {
    pub http: SocketAddr,
    pub https: SocketAddr,
    /// Loopback: `GET /generation` answers the config's generation.
    pub status: SocketAddr,
}

impl Snapshot {
    /// Nothing to serve yet.
    pub fn empty(class: &str) -> Self {
        Self {
            class: class.to_string(),
            ..Default::default()
        }
    }
}

/// The status server's line that tells the config's generation.
pub fn generation_line(generation: u64) -> String {
    format!("location = /generation {{ return 200 \"{generation}\"; }}")
}

/// The config, and what was left out or ignored (for a test's failure message).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rendered {
    pub config: String,
    pub report: Vec<String>,
}

/// One path of one host.
#[derive(Clone, Debug)]
pub(super) struct Route {
    pub(super) path: String,
    pub(super) exact: bool,
    /// `ip:port`, or `None` for [`Route::missing`].
    pub(super) upstream: Option<String>,
    /// The status a missing backend is answered with (ingress-nginx 503, Gateway API 500).
    pub(super) missing: u16,
    pub(super) read: u32,
    pub(super) send: u32,
    pub(super) connect: u32,
    /// The object it came from, for the first-come rule and the report.
    pub(super) source: String,
}

#[derive(Default)]
pub(super) struct Server {
    routes: Vec<Route>,
    /// The certificate, when a `tls` entry names this host.
    certificate: Option<(PathBuf, PathBuf)>,
}

/// The nginx config serving `snapshot` on `listen`, with its working files under `dir`,
/// telling `generation` on the status port.
pub fn render(
    snapshot: &Snapshot,
    listen: Listen,
    dir: &std::path::Path,
    generation: u64,
) -> Rendered {
    let mut report = Vec::new();
    // Host "" is the default server.
    let mut servers: BTreeMap<String, Server> = BTreeMap::new();
    // ingress-nginx: of two Ingresses with the same host and path, the older one wins.
    let mut ingresses: Vec<&Ingress> = snapshot.ingresses.iter().collect();
    ingresses.sort_by_key(|i| {
        (
            i.metadata.creation_timestamp.as_ref().map(|t| t.0),
            i.metadata.namespace.clone(),
            i.metadata.name.clone(),
        )
    });
    for ingress in ingresses {
        let namespace = ingress.metadata.namespace.clone().unwrap_or_default();
        let name = format!(
            "{namespace}/{}",
            ingress.metadata.name.clone().unwrap_or_default()
        );
        let Some(spec) = &ingress.spec else { continue };
        match spec.ingress_class_name.as_deref() {
            None => {}
            Some(class) if class == snapshot.class => {}
            Some(other) => {
                report.push(format!(
                    "{name}: class {other} is not {}: not served",
                    snapshot.class
                ));
                continue;
            }
        }
        let annotations = ingress.metadata.annotations.clone().unwrap_or_default();
        let seconds = |key: &str, default: u32, report: &mut Vec<String>| match annotations.get(key)
        {
            None => default,
            Some(value) => value.trim().parse::<u32>().unwrap_or_else(|_| {
                report.push(format!(
                    "{name}: {key} {value:?} is not whole seconds: ignored"
                ));
                default
            }),
        };
        let read = seconds(READ_TIMEOUT, DEFAULT_READ, &mut report);
        let send = seconds(SEND_TIMEOUT, DEFAULT_SEND, &mut report);
        let connect = seconds(CONNECT_TIMEOUT, DEFAULT_CONNECT, &mut report);
        for tls in spec.tls.iter().flatten() {
            let Some(secret) = &tls.secret_name else {
                continue;
            };
            let Some(files) = snapshot
                .certificates
                .get(&(namespace.clone(), secret.clone()))
            else {
                report.push(format!(
                    "{name}: TLS Secret {secret} not found: served over HTTP"
                ));
                continue;
            };
            for host in tls.hosts.iter().flatten() {
                let server = servers.entry(host.clone()).or_default();
                server.certificate.get_or_insert_with(|| files.clone());
            }
        }
        for rule in spec.rules.iter().flatten() {
            let host = rule.host.clone().unwrap_or_default();
            for path in rule.http.iter().flat_map(|h| &h.paths) {
                // ingress-nginx takes ImplementationSpecific as a prefix.
                let exact = path.path_type == "Exact";
                let upstream = path
                    .backend
                    .service
                    .as_ref()
                    .and_then(|s| upstream(snapshot, &namespace, s));
                if upstream.is_none() {
                    report.push(format!(
                        "{name}: the backend of {host}{:?} is missing: 503",
                        path.path
                    ));
                }
                let route = Route {
                    path: path.path.clone().unwrap_or_else(|| "/".to_string()),
                    exact,
                    upstream,
                    missing: 503,
                    read,
                    send,
                    connect,
                    source: name.clone(),
                };
                add(&mut servers, &host, route, &mut report);
            }
        }
    }
    super::gateway::add_routes(snapshot, &mut servers, &mut report);
    Rendered {
        config: config(&servers, listen, dir, generation),
        report,
    }
}

/// `route` on `host`'s server, unless an earlier object has its path (the first one wins).
pub(super) fn add(
    servers: &mut BTreeMap<String, Server>,
    host: &str,
    route: Route,
    report: &mut Vec<String>,
) {
    let server = servers.entry(host.to_string()).or_default();
    match server
        .routes
        .iter()
        .find(|r| r.path == route.path && r.exact == route.exact)
    {
        Some(first) => report.push(format!(
            "{}: {host}{} is {}'s already: ignored",
            route.source, route.path, first.source
        )),
        None => server.routes.push(route),
    }
}

fn upstream(
    snapshot: &Snapshot,
    namespace: &str,
    service: &IngressServiceBackend,
) -> Option<String> {
    let wanted = service.port.as_ref()?;
    service_upstream(
        snapshot,
        namespace,
        &service.name,
        wanted.number,
        wanted.name.as_deref(),
    )
}

/// `cluster-ip:port` of Service `name`'s port `number` (or the port named `port_name`).
pub(super) fn service_upstream(
    snapshot: &Snapshot,
    namespace: &str,
    name: &str,
    number: Option<i32>,
    port_name: Option<&str>,
) -> Option<String> {
    let backend = snapshot
        .services
        .get(&(namespace.to_string(), name.to_string()))?;
    let port = backend.ports.iter().find_map(|(name, candidate)| {
        let by_number = number == Some(*candidate);
        let by_name = port_name.is_some() && port_name == name.as_deref();
        (by_number || by_name).then_some(*candidate)
    })?;
    Some(format!("{}:{port}", backend.cluster_ip))
}

fn config(
    servers: &BTreeMap<String, Server>,
    listen: Listen,
    dir: &std::path::Path,
    generation: u64,
) -> String {
    let dir = dir.display();
    let mut out = String::new();
    // Workers run as nobody: a request body up to the limit stays in memory and responses
    // are not buffered, so no worker writes into the harness's folder.
    let _ = writeln!(
        out,
        "worker_processes 1;\nerror_log stderr warn;\npid {dir}/nginx.pid;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n\
         \x20 client_body_temp_path {dir}/client-body;\n\
         \x20 proxy_temp_path {dir}/proxy;\n\
         \x20 fastcgi_temp_path {dir}/fastcgi;\n\
         \x20 uwsgi_temp_path {dir}/uwsgi;\n\
         \x20 scgi_temp_path {dir}/scgi;\n\
         \x20 access_log {dir}/access.log;\n\
         \x20 gzip off;\n\
         \x20 client_max_body_size 1m;\n\
         \x20 client_body_buffer_size 1m;\n\
         \x20 proxy_http_version 1.1;\n\
         \x20 proxy_buffering off;\n\
         \x20 proxy_set_header Host $host;\n\
         \x20 proxy_set_header X-Forwarded-For $remote_addr;\n\
         \x20 proxy_set_header X-Forwarded-Proto $scheme;\n\
         \x20 proxy_set_header Connection \"\";"
    );
    let _ = writeln!(
        out,
        "  server {{\n    listen {};\n    access_log off;\n    {}\n  }}",
        listen.status,
        generation_line(generation)
    );
    // The default backend, unless an Ingress without a host took the default server.
    if !servers.contains_key("") {
        let _ = writeln!(
            out,
            "  server {{\n    listen {} default_server;\n    location / {{ return 404; }}\n  }}",
            listen.http
        );
    }
    for (host, server) in servers {
        let name = if host.is_empty() { "_" } else { host.as_str() };
        let default = if host.is_empty() {
            " default_server"
        } else {
            ""
        };
        let _ = writeln!(out, "  server {{\n    server_name {name};");
        match &server.certificate {
            Some((cert, key)) => {
                let _ = writeln!(
                    out,
                    "    listen {}{default};\n    listen {} ssl{default};\n    ssl_certificate {};\n    ssl_certificate_key {};\n    if ($scheme = http) {{ return 308 https://$host$request_uri; }}",
                    listen.http,
                    listen.https,
                    cert.display(),
                    key.display()
                );
            }
            None => {
                let _ = writeln!(out, "    listen {}{default};", listen.http);
            }
        }
        for route in &server.routes {
            for location in locations(route) {
                let _ = writeln!(out, "    location {location} {{");
                match &route.upstream {
                    Some(upstream) => {
                        let _ = writeln!(
                            out,
                            "      proxy_connect_timeout {}s;\n      proxy_read_timeout {}s;\n      proxy_send_timeout {}s;\n      proxy_pass http://{upstream};",
                            route.connect, route.read, route.send
                        );
                    }
                    None => {
                        let _ = writeln!(out, "      return {};", route.missing);
                    }
                }
                let _ = writeln!(out, "    }}");
            }
        }
        if !server.routes.iter().any(|r| r.path == "/" && !r.exact) {
            let _ = writeln!(out, "    location / {{ return 404; }}");
        }
        let _ = writeln!(out, "  }}");
    }
    out.push_str("}\n");
    out
}

/// The nginx locations of one path: `Exact` is `= path`; a prefix `/a/` (or `/a`) is
/// `/a/` and `= /a`, so that it matches by path element, as Kubernetes defines `Prefix`.
fn locations(route: &Route) -> Vec<String> {
    if route.exact {
        return vec![format!("= {}", route.path)];
    }
    let trimmed = route.path.trim_end_matches('/');
    if trimmed.is_empty() {
        return vec!["/".to_string()];
    }
    vec![format!("{trimmed}/"), format!("= {trimmed}")]
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::json;

    fn ingress(value: serde_json::Value) -> Ingress {
        serde_json::from_value(value).unwrap()
    }

    /// The operator's Ingress for Clair `clair` in `scan`, as `render/routing.rs` makes it.
    fn clairs(annotation: &str, tls: bool) -> Ingress {
        let path = |p: &str, s: &str| {
            json!({"path": p, "pathType": "Prefix",
                   "backend": {"service": {"name": s, "port": {"number": 6060}}}})
        };
        let mut value = json!({
            "metadata": {"name": "clair", "namespace": "scan",
                         "creationTimestamp": "2026-12-02T10:00:00Z",
                         "annotations": {READ_TIMEOUT: annotation, SEND_TIMEOUT: annotation}},
            "spec": {"rules": [{"host": "clair.example.com", "http": {"paths": [
                path("/indexer/", "clair-indexer"), path("/matcher/", "clair-matcher"),
                path("/notifier/", "clair-notifier")]}}]},
        });
        if tls {
            value["spec"]["tls"] =
                json!([{"hosts": ["clair.example.com"], "secretName": "clair-tls"}]);
        }
        ingress(value)
    }

    pub(in crate::router) fn snapshot(ingresses: Vec<Ingress>) -> Snapshot {
        let mut services = BTreeMap::new();
        for (i, name) in ["clair-indexer", "clair-matcher"].iter().enumerate() {
            services.insert(
                ("scan".to_string(), name.to_string()),
                Backend {
                    cluster_ip: format!("10.96.0.{}", i + 10),
                    ports: vec![(Some("api".to_string()), 6060)],
                },
            );
        }
        Snapshot {
            ingresses,
            services,
            certificates: BTreeMap::from([(
                ("scan".to_string(), "clair-tls".to_string()),
                (
                    PathBuf::from("/r/scan-clair-tls.crt"),
                    PathBuf::from("/r/scan-clair-tls.key"),
                ),
            )]),
            class: "nginx".to_string(),
            ..Default::default()
        }
    }

    pub(in crate::router) fn listen() -> Listen {
        Listen {
            http: "10.77.0.1:30080".parse().unwrap(),
            https: "10.77.0.1:30443".parse().unwrap(),
            status: "127.0.0.1:30081".parse().unwrap(),
        }
    }

    /// `config` serves `clair.example.com`, its indexer prefix (both locations) at the
    /// indexer's cluster IP and the matcher's at the matcher's, allowing 600 s.
    pub(in crate::router) fn indexer_and_matcher_reached_within_600s(config: &str) {
        assert!(
            config.contains("server_name clair.example.com;"),
            "{config}"
        );
        for location in ["/indexer/", "= /indexer"] {
            let block = block(config, location);
            assert!(
                block.contains("proxy_pass http://10.96.0.10:6060;"),
                "{block}"
            );
            assert!(block.contains("proxy_read_timeout 600s;"), "{block}");
            assert!(block.contains("proxy_send_timeout 600s;"), "{block}");
        }
        assert!(block(config, "/matcher/").contains("proxy_pass http://10.96.0.11:6060;"));
    }

    pub(in crate::router) fn block<'a>(config: &'a str, location: &str) -> &'a str {
        let start = config
            .find(&format!("location {location} {{"))
            .unwrap_or_else(|| panic!("no location {location} in\n{config}"));
        let end = config[start..].find("    }").unwrap() + start;
        &config[start..end]
    }

    #[test]
    fn each_prefix_reaches_its_service_by_path_element_with_the_timeout_asked() {
        let rendered = render(
            &snapshot(vec![clairs("600", false)]),
            listen(),
            "/r".as_ref(),
            1,
        );
        let config = &rendered.config;
        indexer_and_matcher_reached_within_600s(config);
        // No notifier Service: 503, and said.
        assert!(block(config, "/notifier/").contains("return 503;"));
        assert_eq!(rendered.report.len(), 1, "{:?}", rendered.report);
        assert!(
            rendered.report[0].contains("notifier"),
            "{:?}",
            rendered.report
        );
        // What Clair's answers need: the ETag untouched, long requests unbuffered.
        assert!(config.contains("gzip off;") && config.contains("proxy_buffering off;"));
        // The default backend answers what no Ingress names.
        assert!(
            config.contains("default_server;\n    location / { return 404; }"),
            "{config}"
        );
    }

    #[test]
    fn timeouts_default_as_ingress_nginx_and_a_bad_value_is_ignored() {
        let mut plain = clairs("600", false);
        plain.metadata.annotations = None;
        let rendered = render(&snapshot(vec![plain]), listen(), "/r".as_ref(), 1);
        let block = block(&rendered.config, "/indexer/");
        assert!(block.contains("proxy_read_timeout 60s;"), "{block}");
        assert!(block.contains("proxy_connect_timeout 5s;"), "{block}");
        let rendered = render(
            &snapshot(vec![clairs("600s", false)]),
            listen(),
            "/r".as_ref(),
            1,
        );
        assert!(block_has(
            &rendered.config,
            "/indexer/",
            "proxy_read_timeout 60s;"
        ));
        assert!(
            rendered
                .report
                .iter()
                .any(|r| r.contains("is not whole seconds")),
            "{:?}",
            rendered.report
        );
    }

    fn block_has(config: &str, location: &str, text: &str) -> bool {
        block(config, location).contains(text)
    }

    #[test]
    fn tls_serves_the_secrets_certificate_and_redirects_plain_http() {
        let rendered = render(
            &snapshot(vec![clairs("600", true)]),
            listen(),
            "/r".as_ref(),
            1,
        );
        let config = &rendered.config;
        assert!(config.contains("listen 10.77.0.1:30443 ssl;"), "{config}");
        assert!(
            config.contains("ssl_certificate /r/scan-clair-tls.crt;"),
            "{config}"
        );
        assert!(
            config.contains("return 308 https://$host$request_uri;"),
            "{config}"
        );
    }

    /// The nginx that `scripts/install-deps` installs.
    const NGINX: &str = "/usr/sbin/nginx";

    #[test]
    fn nginx_itself_takes_the_config() {
        assert!(
            std::path::Path::new(NGINX).exists(),
            "{NGINX} is missing: run scripts/install-deps (Debian's package nginx)"
        );
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["clair.example.com".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        let mut snapshot = snapshot(vec![clairs("600", true)]);
        snapshot.certificates.insert(
            ("scan".to_string(), "clair-tls".to_string()),
            (cert_path, key_path),
        );
        let listen = Listen {
            http: "127.0.0.1:30080".parse().unwrap(),
            https: "127.0.0.1:30443".parse().unwrap(),
            status: "127.0.0.1:30081".parse().unwrap(),
        };
        let rendered = render(&snapshot, listen, dir.path(), 1);
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, &rendered.config).unwrap();
        let output = std::process::Command::new(NGINX)
            .arg("-t")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "nginx -t refused the config:\n{}\n{}",
            String::from_utf8_lossy(&output.stderr),
            rendered.config
        );
    }

    /// An Ingress `newer` for the same paths, an hour after [`clairs`]'s, with 30 s.
    fn newer() -> Ingress {
        let mut newer = clairs("30", false);
        newer.metadata.name = Some("newer".to_string());
        newer.metadata.creation_timestamp =
            Some(serde_json::from_value(json!("2026-12-02T11:00:00Z")).unwrap());
        newer
    }

    #[test]
    fn another_class_is_not_served_and_the_older_ingress_keeps_a_path() {
        let mut other = clairs("600", false);
        other.spec.as_mut().unwrap().ingress_class_name = Some("traefik".to_string());
        let rendered = render(
            &snapshot(vec![newer(), other.clone()]),
            listen(),
            "/r".as_ref(),
            1,
        );
        assert!(
            rendered.report.iter().any(|r| r.contains("class traefik")),
            "{:?}",
            rendered.report
        );
        // Only `newer` is served (the other is another class's): its 30 s.
        assert!(block_has(
            &rendered.config,
            "/indexer/",
            "proxy_read_timeout 30s;"
        ));
        other.spec.as_mut().unwrap().ingress_class_name = None;
        let rendered = render(&snapshot(vec![newer(), other]), listen(), "/r".as_ref(), 1);
        assert!(block_has(
            &rendered.config,
            "/indexer/",
            "proxy_read_timeout 600s;"
        ));
        assert!(
            rendered
                .report
                .iter()
                .any(|r| r.contains("scan/newer") && r.contains("ignored"))
        );
    }
}
