//! Load on a Clair, as Quay puts it there: layers made here (no registry), served over HTTP
//! on the node's address where Clair's pods fetch them, and index requests signed with the
//! pre-shared key sent by a bounded number of clients for a bounded time. Each request's
//! class, latency and status are recorded client side. Used by the real-node tests (a small
//! step) and by `clair-bench load` (the study).
//!
//! Layers are made per request for the "new" class (a digest Clair has never seen: a full
//! fetch, decompress and scan), so the server holds only those still in flight.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

use crate::host::NODE_IP;

/// What a request asks of Clair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// A manifest never indexed: every layer fetched, decompressed and scanned.
    New,
    /// A manifest already indexed: answered from the stored report.
    Known,
    /// One digest requested by every client at once (requests for it serialise on a lock).
    Same,
    /// The matcher's vulnerability report of a known manifest (a full match, and a read of
    /// the index report from the indexer).
    Report,
    /// The notifier's page of a notification (a signed read of its database).
    Notification,
}

/// The kinds of layer made here, each from a real package database format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Debian 12: `etc/os-release` and `var/lib/dpkg/status` with `packages` entries.
    Debian { packages: usize },
    /// Alpine 3.18: `lib/apk/db/installed`, packages named [`alpine_package`] (the same in
    /// every layer, so that vulnerability data can name them) at [`alpine_version`].
    Alpine { packages: usize },
    /// A Python `site-packages` tree of `.dist-info/METADATA` files.
    Python { packages: usize },
    /// Files of `bytes` each, `count` of them, for the fetch and decompress path.
    Bulk { count: usize, bytes: usize },
}

/// A layer as `tar` bytes: `seed` makes its content (and digest) unique.
pub fn layer(kind: LayerKind, seed: u64) -> Vec<u8> {
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    match kind {
        LayerKind::Debian { packages } => {
            files.push((
                "etc/os-release".into(),
                b"PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\n\
                  VERSION_ID=\"12\"\nVERSION=\"12 (bookworm)\"\nVERSION_CODENAME=bookworm\nID=debian\n"
                    .to_vec(),
            ));
            let status: String = (0..packages)
                .map(|i| {
                    format!(
                        "Package: pkg-{seed}-{i}\nStatus: install ok installed\nPriority: optional\n\
                         Section: libs\nInstalled-Size: {}\nMaintainer: Load <load@example.invalid>\n\
                         Architecture: amd64\nSource: src-{i}\nVersion: 1.{i}.{}-1+deb12u1\n\
                         Depends: libc6 (>= 2.36)\nDescription: generated package {i}\n \
                         A package the load generator made.\n\n",
                        100 + i,
                        seed % 97
                    )
                })
                .collect();
            files.push(("var/lib/dpkg/status".into(), status.into_bytes()));
        }
        LayerKind::Alpine { packages } => {
            files.push((
                "etc/os-release".into(),
                b"NAME=\"Alpine Linux\"\nID=alpine\nVERSION_ID=3.18.4\nPRETTY_NAME=\"Alpine Linux v3.18\"\n"
                    .to_vec(),
            ));
            let installed: String = (0..packages)
                .map(|i| {
                    format!(
                        "P:{}\nV:{}\nA:x86_64\nS:{}\nI:{}\no:apk-origin-{i}\n\n",
                        alpine_package(i),
                        alpine_version(i, seed),
                        2048 + i,
                        4096 + i
                    )
                })
                .collect();
            files.push(("lib/apk/db/installed".into(), installed.into_bytes()));
        }
        LayerKind::Python { packages } => {
            for i in 0..packages {
                let name = format!("py_{seed}_{i}");
                files.push((
                    format!("usr/lib/python3.11/site-packages/{name}-2.{i}.0.dist-info/METADATA"),
                    format!(
                        "Metadata-Version: 2.1\nName: {name}\nVersion: 2.{i}.0\nSummary: generated\n"
                    )
                    .into_bytes(),
                ));
            }
        }
        LayerKind::Bulk { count, bytes } => {
            for i in 0..count {
                // Not compressible to nothing: a cheap generator, seeded per file.
                let mut state = seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let data: Vec<u8> = (0..bytes)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state as u8
                    })
                    .collect();
                files.push((format!("opt/bulk/{seed}/file-{i}.bin"), data));
            }
        }
    }
    seeded(files, seed)
}

/// The name of the `i`th package of an Alpine layer.
pub fn alpine_package(i: usize) -> String {
    format!("apk-pkg-{i}")
}

/// The version of the `i`th package of the Alpine layer made from `seed`: always below
/// `{i}.99`, so that a fix at `{i}.99.0-r0` applies to every layer.
pub fn alpine_version(i: usize, seed: u64) -> String {
    format!("{i}.{}.0-r0", seed % 89)
}

/// One record of `clairctl export-updaters` output (claircore's jsonblob form), one line: the
/// vulnerability `name` of the Alpine 3.18 package `package`, fixed in `fixed`, as the
/// Alpine matcher compares it (distribution ID, name and pretty name; the package by name
/// and kind) and the notifier finds the manifests it affects (the whole distribution). Records of one updater share their reference: Clair imports them as one
/// update operation (a reference per record would make one operation each).
pub fn alpine_vulnerability(updater: &str, name: &str, package: &str, fixed: &str) -> String {
    alpine_vulnerability_in(&Operation::FIRST, updater, name, package, fixed)
}

/// An update operation of `clairctl export-updaters`: `clairctl import-updaters` skips an
/// operation whose fingerprint the updater's latest one already has.
pub struct Operation {
    pub fingerprint: &'static str,
    pub reference: &'static str,
}

impl Operation {
    pub const FIRST: Operation = Operation {
        fingerprint: "fp-1",
        reference: "0b6f2d7e-3a8c-4a51-9d6e-5f1c2b3a4d01",
    };
    pub const SECOND: Operation = Operation {
        fingerprint: "fp-2",
        reference: "0b6f2d7e-3a8c-4a51-9d6e-5f1c2b3a4d02",
    };
}

/// As [`alpine_vulnerability`], in update operation `operation`.
pub fn alpine_vulnerability_in(
    operation: &Operation,
    updater: &str,
    name: &str,
    package: &str,
    fixed: &str,
) -> String {
    let record = serde_json::json!({
        "Updater": updater,
        "Fingerprint": operation.fingerprint,
        "Date": "2026-11-29T00:00:00Z",
        "Ref": operation.reference,
        "Kind": "vulnerability",
        "Vuln": {
            "updater": updater,
            "name": name,
            "description": "made up for the operator's real-node tests",
            "issued": "2026-11-29T00:00:00Z",
            "links": "",
            "severity": "High",
            "normalized_severity": "High",
            "package": {"name": package, "kind": "binary"},
            // As Clair v4.9's indexer stores the layer's distribution (`version`, where its
            // Alpine updater writes `version_id`): the notifier's affected manifests need every
            // field the same (claircore v1.5.48's protoRecord); the matcher compares ID, name
            // and pretty name only.
            "distribution": {"did": "alpine", "name": "Alpine Linux", "version": "3.18", "pretty_name": "Alpine Linux v3.18"},
            "repo": {"name": ""},
            "fixed_in_version": fixed,
        },
    });
    format!("{record}\n")
}

/// Vulnerability data of a realistic size for Alpine layers of up to `packages` packages:
/// `per_package` vulnerabilities of each [`alpine_package`], every one fixed after
/// [`alpine_version`] (so each package of a layer matches all of its own).
pub fn alpine_vulnerabilities(packages: usize, per_package: usize) -> String {
    let mut export = String::new();
    for i in 0..packages {
        for v in 0..per_package {
            let number = (i * per_package + v) as u64;
            export.push_str(&alpine_vulnerability(
                "clair-operator-load-alpine",
                &format!("CVE-9999-{number}"),
                &alpine_package(i),
                &format!("{i}.99.0-r0"),
            ));
        }
    }
    export
}

/// A RHEL 9 layer: `etc/os-release`, `etc/redhat-release` and the RPM database `rpmdb`
/// (`rpmdb.sqlite` bytes, as [`crate::rpm_database`] builds them) where RHEL 9 keeps it.
pub fn rhel_layer(rpmdb: &[u8], seed: u64) -> Vec<u8> {
    let files = vec![
        (
            "etc/os-release".to_string(),
            b"NAME=\"Red Hat Enterprise Linux\"\nVERSION=\"9.4 (Plow)\"\nID=\"rhel\"\n\
              ID_LIKE=\"fedora\"\nVERSION_ID=\"9.4\"\nPLATFORM_ID=\"platform:el9\"\n\
              CPE_NAME=\"cpe:/o:redhat:enterprise_linux:9::baseos\"\n"
                .to_vec(),
        ),
        (
            "etc/redhat-release".to_string(),
            b"Red Hat Enterprise Linux release 9.4 (Plow)\n".to_vec(),
        ),
        ("var/lib/rpm/rpmdb.sqlite".to_string(), rpmdb.to_vec()),
    ];
    seeded(files, seed)
}

/// A layer holding one file at `path` (a Go binary with build information, say).
pub fn file_layer(path: &str, bytes: &[u8], seed: u64) -> Vec<u8> {
    seeded(vec![(path.to_string(), bytes.to_vec())], seed)
}

/// `files` and the seed in a file of its own, so that two layers never share a digest.
fn seeded(mut files: Vec<(String, Vec<u8>)>, seed: u64) -> Vec<u8> {
    files.push((
        format!("etc/load-seed-{seed}"),
        seed.to_string().into_bytes(),
    ));
    tar_of(&files)
}

fn tar_of(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(if path.starts_with("usr/local/bin/") {
            0o755
        } else {
            0o644
        });
        header.set_mtime(0);
        header.set_cksum();
        builder
            .append_data(&mut header, path, bytes.as_slice())
            .expect("a tar built in memory cannot fail");
    }
    builder
        .into_inner()
        .expect("a tar built in memory cannot fail")
}

/// `sha256:HEX` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// A JWT signed with Clair's pre-shared key (HS256) as `issuer`, valid for five minutes:
/// what Quay sends.
pub fn psk_token(psk_base64: &str, issuer: &str) -> Result<String, String> {
    let key = STANDARD
        .decode(psk_base64.trim())
        .map_err(|e| format!("the PSK is not base64: {e}"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    crate::quay::sign(
        &key,
        &serde_json::json!({"iss": issuer, "iat": now, "nbf": now - 5, "exp": now + 300}),
    )
}

type Files = Arc<Mutex<HashMap<String, Bytes>>>;

/// Layers over HTTP on the node's address, at `/layers/DIGEST`.
#[derive(Clone)]
pub struct LayerServer {
    address: SocketAddr,
    files: Files,
}

impl LayerServer {
    /// Listens on the node's address (pods reach it; nothing off the machine does).
    pub async fn start() -> std::io::Result<Self> {
        let files: Files = Arc::default();
        let app = Router::new()
            .route("/layers/{name}", get(serve))
            .with_state(Arc::clone(&files));
        let listener = tokio::net::TcpListener::bind((NODE_IP, 0)).await?;
        let address = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { address, files })
    }

    /// Serves `bytes`; returns the layer as a manifest names it.
    pub fn add(&self, bytes: Vec<u8>) -> ManifestLayer {
        let digest = digest(&bytes);
        let name = digest.replace(':', "-");
        self.lock().insert(name.clone(), Bytes::from(bytes));
        ManifestLayer {
            uri: format!("http://{}/layers/{name}", self.address),
            digest,
        }
    }

    /// Stops serving a layer (once Clair has fetched it).
    pub fn remove(&self, layer: &ManifestLayer) {
        self.lock().remove(&layer.digest.replace(':', "-"));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bytes>> {
        self.files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

async fn serve(State(files): State<Files>, Path(name): Path<String>) -> (StatusCode, Bytes) {
    let found = files
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&name)
        .cloned();
    match found {
        Some(bytes) => (StatusCode::OK, bytes),
        None => (StatusCode::NOT_FOUND, Bytes::new()),
    }
}

/// A layer as an index request names it.
#[derive(Clone, Debug)]
pub struct ManifestLayer {
    pub uri: String,
    pub digest: String,
}

/// An index request's manifest: its digest and layers.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub hash: String,
    pub layers: Vec<ManifestLayer>,
}

impl Manifest {
    pub fn of(layers: Vec<ManifestLayer>) -> Self {
        let joined: String = layers.iter().map(|l| l.digest.as_str()).collect();
        Self {
            hash: digest(format!("manifest{joined}").as_bytes()),
            layers,
        }
    }

    /// The body of its index request.
    pub fn body(&self) -> String {
        let layers: Vec<serde_json::Value> = self
            .layers
            .iter()
            .map(|l| serde_json::json!({"hash": l.digest, "uri": l.uri, "headers": {}}))
            .collect();
        serde_json::json!({"hash": self.hash, "layers": layers}).to_string()
    }
}

/// One request's outcome, client side.
#[derive(Clone, Debug)]
pub struct Sample {
    pub class: Class,
    /// When it was sent, from the start of the run.
    pub sent: Duration,
    pub latency: Duration,
    /// The HTTP status; 0 when no answer came (connection refused or reset, timed out).
    pub status: u16,
}

/// A span of offered load: `clients` sending one request after another, of `class`.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub clients: usize,
    pub duration: Duration,
    pub class: Class,
}

/// Makes a new manifest from a seed, serving its layers.
pub type MakeManifest = Arc<dyn Fn(&LayerServer, u64) -> Manifest + Send + Sync>;

/// Where the load goes and what makes new manifests.
pub struct Target {
    /// `http://HOST:PORT` of the indexer's Service.
    pub indexer: String,
    /// `http://HOST:PORT` of the matcher's Service, for [`Class::Report`].
    pub matcher: Option<String>,
    /// `http://HOST:PORT` of the notifier's Service, for [`Class::Notification`].
    pub notifier: Option<String>,
    /// The pre-shared key, base64, as Clair's config holds it.
    pub psk: String,
    pub server: LayerServer,
    /// The layers of a new manifest, made from a seed.
    pub new_manifest: MakeManifest,
    /// Each request is given up after this.
    pub request_timeout: Duration,
    /// Set to end the run early: every client stops after its request in flight.
    pub stop: Arc<std::sync::atomic::AtomicBool>,
}

/// Runs `steps` one after another; stops early after `max_requests` in all. Manifests of
/// the "known" and "report" classes are those the run indexed as new (or, before any, one
/// indexed first).
pub async fn run(target: Arc<Target>, steps: &[Step], max_requests: usize) -> Vec<Sample> {
    let start = Instant::now();
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let known: Arc<Mutex<Vec<Manifest>>> = Arc::default();
    let sent = Arc::new(AtomicUsize::new(0));
    let seeds = Arc::new(AtomicU64::new(
        // Unique across runs against the same database: new stays new.
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    ));
    for step in steps {
        let until = Instant::now() + step.duration;
        let same = (step.class == Class::Same)
            .then(|| (target.new_manifest)(&target.server, seeds.fetch_add(1, Ordering::Relaxed)));
        if matches!(step.class, Class::Known | Class::Report) && lock(&known).is_empty() {
            let manifest =
                (target.new_manifest)(&target.server, seeds.fetch_add(1, Ordering::Relaxed));
            let _ = send(&target, Class::New, &manifest).await;
            lock(&known).push(manifest);
        }
        let mut clients = Vec::new();
        for client in 0..step.clients {
            let (target, samples, known, sent, seeds, same) = (
                Arc::clone(&target),
                Arc::clone(&samples),
                Arc::clone(&known),
                Arc::clone(&sent),
                Arc::clone(&seeds),
                same.clone(),
            );
            let class = step.class;
            clients.push(tokio::spawn(async move {
                let mut turn = client;
                while Instant::now() < until
                    && !target.stop.load(Ordering::Relaxed)
                    && sent.fetch_add(1, Ordering::Relaxed) < max_requests
                {
                    let manifest = match class {
                        Class::New => (target.new_manifest)(
                            &target.server,
                            seeds.fetch_add(1, Ordering::Relaxed),
                        ),
                        Class::Same => same.clone().expect("made for the step"),
                        // Only its digest names the notification asked for: no layers.
                        Class::Notification => Manifest {
                            hash: digest(&seeds.fetch_add(1, Ordering::Relaxed).to_le_bytes()),
                            layers: Vec::new(),
                        },
                        Class::Known | Class::Report => {
                            let known = lock(&known);
                            known[turn % known.len()].clone()
                        }
                    };
                    turn += 1;
                    let sent_at = start.elapsed();
                    let began = Instant::now();
                    let status = send(&target, class, &manifest).await;
                    let latency = began.elapsed();
                    if class == Class::New {
                        for layer in &manifest.layers {
                            target.server.remove(layer);
                        }
                        if status == 201 || status == 200 {
                            let mut known = lock(&known);
                            if known.len() < 256 {
                                known.push(manifest);
                            }
                        }
                    }
                    lock(&samples).push(Sample {
                        class,
                        sent: sent_at,
                        latency,
                        status,
                    });
                }
            }));
        }
        for client in clients {
            let _ = client.await;
        }
        if let Some(manifest) = same {
            for layer in &manifest.layers {
                target.server.remove(layer);
            }
        }
    }
    let mut samples = std::mem::take(&mut *lock(&samples));
    samples.sort_by_key(|s| s.sent);
    samples
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sends `class`'s request about `manifest`: the status, or 0 when no answer came.
async fn send(target: &Target, class: Class, manifest: &Manifest) -> u16 {
    let Ok(token) = psk_token(&target.psk, "quay") else {
        return 0;
    };
    let (url, body) = match class {
        Class::New | Class::Known | Class::Same => (
            format!("{}/indexer/api/v1/index_report", target.indexer),
            Some(manifest.body()),
        ),
        Class::Report => match &target.matcher {
            Some(matcher) => (
                format!(
                    "{matcher}/matcher/api/v1/vulnerability_report/{}",
                    manifest.hash
                ),
                None,
            ),
            None => return 0,
        },
        Class::Notification => match &target.notifier {
            // An id no update operation made: the notifier looks it up and finds nothing.
            Some(notifier) => (
                format!(
                    "{notifier}/notifier/api/v1/notification/{}",
                    uuid_like(manifest.hash.as_bytes())
                ),
                None,
            ),
            None => return 0,
        },
    };
    let timeout = target.request_timeout;
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build()
            .into();
        let authorization = format!("Bearer {token}");
        let answer = match body {
            Some(body) => agent
                .post(&url)
                .header("Content-Type", "application/json")
                .header("Authorization", &authorization)
                .send(body.as_bytes()),
            None => agent
                .get(&url)
                .header("Authorization", &authorization)
                .call(),
        };
        answer.map_or(0, |mut response| {
            // Read the body whole: the connection is reused only then.
            let _ = response.body_mut().read_to_vec();
            response.status().as_u16()
        })
    })
    .await
    .unwrap_or(0)
}

/// A UUID-shaped id (8-4-4-4-12 hex digits) from the first bytes of `seed`'s digest.
fn uuid_like(seed: &[u8]) -> String {
    let hex = format!("{:x}", Sha256::digest(seed));
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use hmac::{Hmac, Mac};

    #[test]
    fn every_seed_makes_another_layer_and_the_same_seed_the_same() {
        let kind = LayerKind::Debian { packages: 3 };
        assert_eq!(digest(&layer(kind, 1)), digest(&layer(kind, 1)));
        assert_ne!(digest(&layer(kind, 1)), digest(&layer(kind, 2)));
        let status = layer(kind, 7);
        let text = String::from_utf8_lossy(&status);
        assert_eq!(text.matches("Package: pkg-7-").count(), 3);
    }

    #[test]
    fn vulnerability_data_is_one_update_naming_every_layers_packages() {
        let export = alpine_vulnerabilities(3, 2);
        let records: Vec<serde_json::Value> = export
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(records.len(), 6);
        // One reference: Clair imports consecutive records of one reference as one update.
        assert!(records.iter().all(|r| r["Ref"] == records[0]["Ref"]));
        let text =
            String::from_utf8_lossy(&layer(LayerKind::Alpine { packages: 3 }, 42)).to_string();
        for record in &records {
            let package = record["Vuln"]["package"]["name"].as_str().unwrap();
            assert!(text.contains(&format!("P:{package}\n")), "{package}");
        }
    }

    #[test]
    fn a_token_is_three_parts_signed_with_the_key() {
        let token = psk_token(&STANDARD.encode(b"secret"), "quay").unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let mut mac = Hmac::<Sha256>::new_from_slice(b"secret").unwrap();
        mac.update(format!("{}.{}", parts[0], parts[1]).as_bytes());
        assert_eq!(
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()),
            parts[2]
        );
        assert!(psk_token("not base64!", "quay").is_err());
    }
}
