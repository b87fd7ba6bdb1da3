//! What a real scan needs besides Clair: image layers holding a package with a known
//! vulnerability (and the fixed version), vulnerability data naming it in `clairctl
//! export-updaters` form, served over HTTP on the node's address where pods reach them; a
//! delivery target for the notifier; and requests signed with the pre-shared key.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use clair_testenv::NODE_IP;

/// The made-up vulnerability: busybox before 1.36.1-r5 on Alpine.
pub const VULNERABILITY: &str = "CVE-0000-0002";
/// Published in the data's second update operation, for the same busybox versions.
pub const NEW_VULNERABILITY: &str = "CVE-0000-0003";
pub const PACKAGE: &str = "busybox";
pub const VULNERABLE_VERSION: &str = "1.36.1-r0";
pub const FIXED_VERSION: &str = "1.36.1-r5";
const UPDATER: &str = "clair-operator-test-alpine";

/// An Alpine layer: `etc/os-release` and an apk database holding one package at `version`.
pub fn alpine_layer(version: &str) -> anyhow::Result<Vec<u8>> {
    let os_release =
        "NAME=\"Alpine Linux\"\nID=alpine\nVERSION_ID=3.18.4\nPRETTY_NAME=\"Alpine Linux v3.18\"\n";
    let installed = format!("P:{PACKAGE}\nV:{version}\nA:x86_64\no:{PACKAGE}\n\n");
    let mut builder = tar::Builder::new(Vec::new());
    for (path, text) in [
        ("etc/os-release", os_release.to_string()),
        ("lib/apk/db/installed", installed),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_cksum();
        builder.append_data(&mut header, path, text.as_bytes())?;
    }
    Ok(builder.into_inner()?)
}

pub use clair_testenv::load::digest;

/// The vulnerability in `clairctl export-updaters` form.
fn vulnerability_export() -> String {
    clair_testenv::load::alpine_vulnerability(UPDATER, VULNERABILITY, PACKAGE, FIXED_VERSION)
}

/// The updater's next operation: the same vulnerability and a new one, which the notifier
/// reports for the manifests indexed before.
fn second_vulnerability_export() -> String {
    use clair_testenv::load::{Operation, alpine_vulnerability_in};
    [VULNERABILITY, NEW_VULNERABILITY]
        .iter()
        .map(|name| {
            alpine_vulnerability_in(&Operation::SECOND, UPDATER, name, PACKAGE, FIXED_VERSION)
        })
        .collect()
}

/// An HTTP server on the node's address: `GET /PATH` for each file, `POST /notify` for the
/// notifier's webhook (accepted and dropped). Stops with the test's runtime.
pub struct FixtureServer {
    pub address: SocketAddr,
    files: Arc<HashMap<String, Vec<u8>>>,
}

/// A layer as a manifest names it: where to fetch it and its digest.
pub struct Layer {
    pub url: String,
    pub digest: String,
}

impl FixtureServer {
    async fn start(files: HashMap<String, Vec<u8>>) -> anyhow::Result<Self> {
        let files = Arc::new(files);
        let app = Router::new()
            .route("/notify", post(|| async { StatusCode::OK }))
            .route("/{*path}", get(file))
            .with_state(Arc::clone(&files));
        let listener = tokio::net::TcpListener::bind((NODE_IP, 0))
            .await
            .with_context(|| format!("listen on the node's address {NODE_IP}"))?;
        let address = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { address, files })
    }

    /// The server every scan needs: each layer at `layers/NAME.tar`, the vulnerability
    /// export at `export.json` (and the updater's next operation at `export-2.json`), and the (empty) RHEL mapping files an air-gapped indexer
    /// reads at `repo2cpe.json` and `name2repos.json`.
    pub async fn for_scans(layers: &[(&str, &[u8])]) -> anyhow::Result<Self> {
        Self::for_scans_with(layers, vulnerability_export()).await
    }

    /// As [`FixtureServer::for_scans`], with `export` as the vulnerability data.
    pub async fn for_scans_with(layers: &[(&str, &[u8])], export: String) -> anyhow::Result<Self> {
        let mapping = br#"{"data":{}}"#.to_vec();
        let mut files = HashMap::from([
            ("export.json".to_string(), export.into_bytes()),
            (
                "export-2.json".to_string(),
                second_vulnerability_export().into_bytes(),
            ),
            ("repo2cpe.json".to_string(), mapping.clone()),
            ("name2repos.json".to_string(), mapping),
        ]);
        for (name, bytes) in layers {
            files.insert(format!("layers/{name}.tar"), bytes.to_vec());
        }
        Self::start(files).await
    }

    /// The layer served as `layers/NAME.tar`.
    pub fn layer(&self, name: &str) -> anyhow::Result<Layer> {
        let path = format!("layers/{name}.tar");
        let bytes = self
            .files
            .get(&path)
            .with_context(|| format!("no layer {name} is served"))?;
        Ok(Layer {
            url: self.url(&path),
            digest: digest(bytes),
        })
    }

    /// `http://NODE_IP:PORT/PATH`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{path}", self.address)
    }
}

async fn file(
    State(files): State<Arc<HashMap<String, Vec<u8>>>>,
    Path(path): Path<String>,
) -> (StatusCode, Bytes) {
    match files.get(&path) {
        Some(bytes) => (StatusCode::OK, Bytes::from(bytes.clone())),
        None => (StatusCode::NOT_FOUND, Bytes::new()),
    }
}

/// A JWT signed with Clair's pre-shared key as `issuer`: what Quay sends.
pub fn psk_token(psk_base64: &str, issuer: &str) -> anyhow::Result<String> {
    clair_testenv::load::psk_token(psk_base64, issuer).map_err(anyhow::Error::msg)
}

/// One HTTP request (plain HTTP, run on a blocking thread, 30 s at most); returns the
/// status and body.
pub async fn request(
    method: &'static str,
    url: String,
    token: Option<String>,
    body: Option<String>,
) -> anyhow::Result<(u16, String)> {
    request_within(std::time::Duration::from_secs(30), method, url, token, body).await
}

/// As [`request`], given up after `timeout`.
pub async fn request_within(
    timeout: std::time::Duration,
    method: &'static str,
    url: String,
    token: Option<String>,
    body: Option<String>,
) -> anyhow::Result<(u16, String)> {
    let answer = send(&agent_within(timeout), method, url, token, body).await?;
    Ok((answer.status, answer.body))
}

/// A plain client whose every answer is returned (not an error), within `timeout`.
pub fn agent_within(timeout: std::time::Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// What a server answered.
pub struct Answer {
    pub status: u16,
    /// The `ETag` header, as it arrived.
    pub etag: Option<String>,
    pub body: String,
    /// Every header, `name: value` joined by `; `: which server answered, when one is
    /// not the one asked.
    pub headers: String,
}

/// One request with `agent` (one that returns every answer), on a blocking thread.
pub async fn send(
    agent: &ureq::Agent,
    method: &'static str,
    url: String,
    token: Option<String>,
    body: Option<String>,
) -> anyhow::Result<Answer> {
    let agent = agent.clone();
    tokio::task::spawn_blocking(move || {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut response = match (method, body) {
            ("POST", Some(body)) => {
                let mut request = agent.post(&url).header("Content-Type", "application/json");
                if let Some(auth) = &auth {
                    request = request.header("Authorization", auth);
                }
                request.send(body.as_bytes())
            }
            _ => {
                let mut request = agent.get(&url);
                if let Some(auth) = &auth {
                    request = request.header("Authorization", auth);
                }
                request.call()
            }
        }
        .with_context(|| format!("{method} {url}"))?;
        let status = response.status().as_u16();
        let etag = response
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap_or("(binary)")))
            .collect::<Vec<_>>()
            .join("; ");
        let body = response.body_mut().read_to_string()?;
        Ok(Answer {
            status,
            etag,
            body,
            headers,
        })
    })
    .await?
}
