//! The Quay path on the real node, as part of the scan test's Clair (one Clair start for
//! both): `spec.quay` pointing at a receiver that does what Quay's endpoint and worker do
//! (`clair_testenv::quay`), the Clair's routing host served by the ingress stand-in with the
//! TLS certificate of `tlsSecretName`, and Quay's side read from the Secret the operator
//! writes, nothing else.

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clair_testenv::NODE_IP;
use clair_testenv::quay::{Added, QuayReceiver, Seen};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::Api;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use serde_json::{Value, json};

use crate::fixtures::{Answer, FixtureServer, Layer, digest, psk_token, send};
use crate::support::clair::{apply_json, condition, secret_text, wait_clair_within};
use crate::support::{TestEnv, eventually};

/// The Secret holding the certificate the stand-in serves for the routing host.
const TLS_SECRET: &str = "clair-tls";
/// A key that is not the Clair's: Quay misconfigured, until [`Quay::configure_from_secret`].
const WRONG_PSK: &str = "dGhpcyBpcyBub3QgdGhlIGtleSBDbGFpciBzaWducyB3aXRo";

/// The receiver, the routing host and a client that reaches it through the stand-in.
pub struct Quay {
    pub receiver: QuayReceiver,
    pub host: String,
    /// Resolves the routing host to the stand-in and trusts the test's CA alone.
    pub agent: ureq::Agent,
}

impl Quay {
    /// A CA and the routing host's certificate in Secret `clair-tls`, and a receiver on the
    /// node's address that signs and checks with a key that is not the Clair's yet.
    pub async fn prepare(env: &TestEnv, client: &Client, ns: &str) -> anyhow::Result<Self> {
        let router = env
            .plane
            .addons()
            .context("the real node runs no ingress stand-in")?
            .router();
        let host = format!("clair.{ns}.test");
        let (ca, cert, key) = certificate_for(&host)?;
        apply_json::<Secret>(
            client,
            ns,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                   "metadata": {"name": TLS_SECRET},
                   "stringData": {"tls.crt": cert, "tls.key": key}}),
        )
        .await?;
        let agent = router.agent(&host, Some(&ca), Duration::from_secs(60))?;
        let receiver = QuayReceiver::start_with(
            (NODE_IP.parse::<std::net::IpAddr>()?, 0).into(),
            WRONG_PSK,
            "https://quay-is-not-configured.invalid",
            agent.clone(),
        )
        .await
        .map_err(anyhow::Error::msg)?;
        Ok(Self {
            receiver,
            host,
            agent,
        })
    }

    /// The spec's routing (the host, TLS from `clair-tls`) and `quay` (the receiver).
    pub fn wire(&self, spec: &mut Value) {
        spec["routing"] = json!({"host": self.host, "tlsSecretName": TLS_SECRET});
        spec["quay"] = json!({"url": self.receiver.url()});
    }

    /// Quay given what Secret `clair-quay` holds, and nothing else: its endpoint and key.
    pub async fn configure_from_secret(&self, client: &Client, ns: &str) -> anyhow::Result<Side> {
        let side = Side::read(client, ns).await?;
        self.receiver
            .configure(&side.psk, &side.endpoint)
            .map_err(anyhow::Error::msg)?;
        Ok(side)
    }
}

/// Quay's side of the Clair, from Secret `clair-quay`.
pub struct Side {
    pub endpoint: String,
    pub psk: String,
}

impl Side {
    pub async fn read(client: &Client, ns: &str) -> anyhow::Result<Self> {
        let secret = Api::<Secret>::namespaced(client.clone(), ns)
            .get("clair-quay")
            .await?;
        let text = secret_text(&secret, "config.yaml")?;
        let config: Value = serde_saphyr::from_str(&text)
            .with_context(|| format!("clair-quay's config.yaml is not YAML: {text}"))?;
        ensure!(
            config["FEATURE_SECURITY_SCANNER"] == true
                && config["FEATURE_SECURITY_NOTIFICATIONS"] == true,
            "Quay's features are not both on: {config}"
        );
        let field = |key: &str| {
            config[key]
                .as_str()
                .map(str::to_string)
                .with_context(|| format!("clair-quay's config.yaml has no {key}: {config}"))
        };
        Ok(Self {
            endpoint: field("SECURITY_SCANNER_V4_ENDPOINT")?,
            psk: field("SECURITY_SCANNER_V4_PSK")?,
        })
    }

    /// A token as Quay signs its requests to Clair.
    pub fn token(&self) -> anyhow::Result<String> {
        psk_token(&self.psk, "quay")
    }
}

/// A CA, and a certificate for `host` it signed with its key: PEM texts.
fn certificate_for(host: &str) -> anyhow::Result<(String, String, String)> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "the scan test's CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec![host.to_string()])?.signed_by(&key, &issuer)?;
    Ok((ca.pem(), cert.pem(), key.serialize_pem()))
}

/// The scan test's drop-in with Quay: the indexer's air-gapped settings, and the notifier
/// looking for new update operations every minute (the operator's 5 minutes for Quay would
/// make the test wait that long twice); its delivery is the operator's.
pub async fn dropin(client: &Client, ns: &str, server: &FixtureServer) -> anyhow::Result<()> {
    let text = format!(
        "{}notifier:\n  poll_interval: 1m\n",
        crate::scan::airgapped_indexer(server)
    );
    apply_json::<ConfigMap>(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "delivery"}, "data": {"notifier.yaml": text}}),
    )
    .await
}

/// The notifier has processed the updater's first update operation: with no manifest
/// indexed, it records a receipt and no notification. Indexing before that would make the
/// first operation (diffed against nothing) report the known vulnerability too.
pub async fn first_operation_processed(env: &TestEnv, ns: &str) -> anyhow::Result<()> {
    let database = format!("{}_notifier", ns.replace('-', "_"));
    eventually(
        Duration::from_secs(180),
        "the notifier to process the first update operation",
        || {
            let found = env
                .postgres
                .sql_in(&database, "SELECT count(*) FROM receipt");
            async move { Ok(found?.trim().parse::<u32>().unwrap_or(0) >= 1) }
        },
    )
    .await
}

/// Indexes a one-layer manifest at `base` (`https://HOST`) with `agent`, as Quay does: its
/// report and the response's `ETag` (Quay refuses an answer without one).
pub async fn index_as_quay(
    agent: &ureq::Agent,
    base: &str,
    token: &str,
    layer: &Layer,
) -> anyhow::Result<(Value, String)> {
    let manifest = digest(format!("{}manifest", layer.digest).as_bytes());
    let body = json!({
        "hash": manifest,
        "layers": [{"hash": layer.digest, "uri": layer.url, "headers": {}}],
    });
    let answer = send(
        agent,
        "POST",
        format!("{base}/indexer/api/v1/index_report"),
        Some(token.to_string()),
        Some(body.to_string()),
    )
    .await?;
    let Answer {
        status, etag, body, ..
    } = answer;
    ensure!(
        status == 201 || status == 200,
        "index_report answered {status}: {body}"
    );
    let etag = etag.context("index_report's answer has no ETag, which Quay requires")?;
    let report: Value = serde_json::from_str(&body)?;
    ensure!(
        report["state"] == "IndexFinished" && report["success"] == true,
        "the index did not finish: {report}"
    );
    Ok((report, etag))
}

/// The `NotificationsDelivered` condition reaches `status` (`reason`) within `within`.
pub async fn deliveries_are(
    client: &Client,
    ns: &str,
    status: &str,
    reason: &str,
    within: Duration,
) -> anyhow::Result<String> {
    let clair = wait_clair_within(
        within,
        client,
        ns,
        "clair",
        &format!("NotificationsDelivered={status} ({reason})"),
        |c| {
            condition(c, "NotificationsDelivered")
                .is_some_and(|d| d.status == status && d.reason == reason)
        },
    )
    .await?;
    Ok(condition(&clair, "NotificationsDelivered")
        .map(|c| c.message.clone())
        .unwrap_or_default())
}

/// `NotificationsDelivered` True (`DeliveriesSucceeding`) within two minutes.
pub async fn delivering(client: &Client, ns: &str) -> anyhow::Result<()> {
    deliveries_are(
        client,
        ns,
        "True",
        "DeliveriesSucceeding",
        Duration::from_secs(120),
    )
    .await
    .map(|_| ())
}

/// Switches the updaters' import to the data's second update operation and waits until the
/// CronJob runs it.
pub async fn import_the_next_operation(
    client: &Client,
    ns: &str,
    spec: &mut Value,
    server: &FixtureServer,
) -> anyhow::Result<()> {
    spec["updaters"]["import"]["url"] = json!(server.url("export-2.json"));
    crate::support::clair::create_clair(client, ns, "clair", spec.clone()).await?;
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), ns);
    eventually(
        Duration::from_secs(60),
        "the updater CronJob to import export-2.json",
        || {
            let cronjobs = cronjobs.clone();
            async move {
                let cronjob = cronjobs.get("clair-updaters").await?;
                Ok(serde_json::to_string(&cronjob.spec)?.contains("export-2.json"))
            }
        },
    )
    .await
}

/// Waits up to `within` until `done` holds of what the receiver saw; fails with what it saw.
pub async fn receiver_sees(
    receiver: &QuayReceiver,
    within: Duration,
    what: &str,
    done: impl Fn(&Seen) -> bool,
) -> anyhow::Result<Seen> {
    let start = Instant::now();
    loop {
        let seen = receiver.seen();
        if done(&seen) {
            return Ok(seen);
        }
        if start.elapsed() > within {
            bail!("the receiver did not see {what} within {within:?}: {seen:?}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// `result`, with what the notifier did added to an error: its log's end, its receipts and
/// the update operations it knows.
pub fn with_notifier_state<T>(
    env: &TestEnv,
    ns: &str,
    result: anyhow::Result<T>,
) -> anyhow::Result<T> {
    result.map_err(|e| {
        let log = env
            .kubectl_ok(ns, &["logs", "deployment/clair-notifier", "--tail=40"])
            .unwrap_or_else(|e| format!("(no log: {e})"));
        // One service's database, or why not.
        let query = |service: &str, sql: &str, what: &str| {
            env.postgres
                .sql_in(&format!("{}_{service}", ns.replace('-', "_")), sql)
                .unwrap_or_else(|e| format!("(no {what}: {e})"))
        };
        let receipts = query(
            "notifier",
            "SELECT notification_id, uo_id, status, ts FROM receipt ORDER BY ts",
            "receipts",
        );
        let matcher = query(
            "matcher",
            "SELECT ref, updater, fingerprint, date FROM update_operation ORDER BY id",
            "update operations",
        );
        let vulns = query(
            "matcher",
            "SELECT uo.ref, v.name, v.package_name, v.dist_id, v.dist_name, v.dist_pretty_name, v.fixed_in_version FROM uo_vuln JOIN update_operation uo ON uo.id = uo_vuln.uo JOIN vuln v ON v.id = uo_vuln.vuln",
            "vulnerabilities",
        );
        let manifests = query(
            "indexer",
            "SELECT m.hash, count(mi.*) FROM manifest m LEFT JOIN manifest_index mi ON mi.manifest_id = m.id GROUP BY m.hash",
            "manifests",
        );
        e.context(format!(
            "notifier log:\n{log}\nreceipts:\n{receipts}\nthe matcher's update operations:\n{matcher}\nvulnerabilities by operation:\n{vulns}\nthe indexer's manifests:\n{manifests}"
        ))
    })
}

/// The receiver paged exactly the new vulnerability for `manifest`, and deleted it.
pub fn exactly(seen: &Seen, manifest: &str, vulnerability: &str) -> anyhow::Result<()> {
    let found: Vec<(&str, &str)> = seen
        .added
        .iter()
        .map(
            |Added {
                 manifest,
                 vulnerability,
                 ..
             }| (manifest.as_str(), vulnerability.as_str()),
        )
        .collect();
    ensure!(
        found == [(manifest, vulnerability)],
        "the receiver should have found exactly {vulnerability} for {manifest}: {seen:?}"
    );
    ensure!(
        seen.errors.is_empty(),
        "paging went wrong: {:?}",
        seen.errors
    );
    Ok(())
}
