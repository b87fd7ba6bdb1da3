//! The webhook's CA rotated while both operator replicas serve: at every moment each replica
//! serves a certificate the published `caBundle` trusts, the apiserver's admission calls keep
//! succeeding, the old CA leaves the bundle only once both replicas serve the new one, and
//! the two replicas, both finding the Secret gone, issue one CA between them. And what ends
//! the overlap, shown on its own: a replica still serving the old CA keeps it open.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use rustls::pki_types::ServerName;

use axum_server::tls_rustls::RustlsConfig;
use clair_operator::api::keys;
use clair_operator::webhook::certs::{self, Bundle};
use clair_operator::webhook::register::{Settings, Target};
use clair_operator::webhook::replicas;
use clair_testenv::NODE_IP;

use crate::support::{OPERATOR_SERVICE_ACCOUNT, TestEnv, audited_since};

const NAMESPACE: &str = "clair-operator";
const SECRET: &str = "clair-operator-webhook-tls";
/// The name the serving certificate is for: the webhook Service's.
const SERVICE_NAME: &str = "clair-operator-webhook.clair-operator.svc";

pub async fn a_rotated_ca_is_trusted_until_every_replica_serves_the_new_one(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let replicas = ready_replicas(&client, 2).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let old_ca = ca_of(&secrets.get(SECRET).await?)?;
    for ip in &replicas {
        ensure!(
            serves(ip, &old_ca).await.is_ok(),
            "before the rotation, {ip} does not serve a certificate of the Secret's CA"
        );
    }
    let ns = env.namespace("rotation").await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    let since = SystemTime::now();
    secrets.delete(SECRET, &DeleteParams::default()).await?;
    let start = Instant::now();
    let mut overlap_seen = false;
    let mut admissions = 0;
    let new_ca = loop {
        ensure!(
            start.elapsed() < Duration::from_secs(120),
            "the rotation did not finish in 120 s (overlap seen: {overlap_seen})"
        );
        // The two configurations are written one after the other: each webhook's bundle is
        // checked on its own.
        let bundles = published_bundles(&client).await?;
        ensure!(!bundles.is_empty(), "no webhook publishes a caBundle");
        // The invariant: whatever the apiserver calls, through any webhook, it trusts.
        for bundle in &bundles {
            for ip in &replicas {
                if let Err(e) = serves(ip, bundle).await {
                    bail!(
                        "after {:?}, replica {ip} serves a certificate a published caBundle \
                         ({} CAs) does not trust: {e:#}",
                        start.elapsed(),
                        certificates(bundle)
                    );
                }
            }
        }
        // And the apiserver's own calls go through (dry run: nothing is stored).
        admissions += 1;
        let probe = labelled_configmap(&format!("probe-{admissions}"));
        configmaps
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &probe,
            )
            .await
            .with_context(|| {
                format!(
                    "an admission call failed {:?} into the rotation",
                    start.elapsed()
                )
            })?;
        overlap_seen |= bundles.iter().any(|b| certificates(b) > 1);
        let Some(secret) = secrets.get_opt(SECRET).await? else {
            continue;
        };
        let ca = ca_of(&secret)?;
        let settled = bundles
            .iter()
            .all(|b| certificates(b) == 1 && b.contains(ca.trim()));
        if ca.trim() == old_ca.trim() || !settled {
            continue;
        }
        // Only the new CA is published: both replicas must serve it.
        for ip in &replicas {
            serves(ip, &ca).await.with_context(|| {
                format!("the old CA left the caBundle before {ip} served the new one")
            })?;
        }
        break ca;
    };
    eprintln!(
        "rotation done in {:?}, {admissions} admission calls through it",
        start.elapsed()
    );
    ensure!(
        overlap_seen,
        "the caBundle never held the old and the new CA together"
    );
    ensure!(new_ca.trim() != old_ca.trim(), "the CA did not change");

    // Both replicas found the Secret gone; one created it, the other serves what it wrote.
    let creates = audited_since(env, since, |entry| {
        entry["user"]["username"] == OPERATOR_SERVICE_ACCOUNT
            && entry["verb"] == "create"
            && entry["objectRef"]["resource"] == "secrets"
            && entry["objectRef"]["namespace"] == NAMESPACE
            && entry["stage"] == "ResponseComplete"
    })?;
    let created = creates
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 201)
        .count();
    ensure!(
        created == 1,
        "the webhook Secret was created {created} times after the deletion (wanted 1)"
    );
    // Nobody restarted over it.
    let after = ready_replicas(&client, 2).await?;
    ensure!(
        after == replicas,
        "the replicas changed during the rotation: {replicas:?} then {after:?}"
    );
    Ok(())
}

/// The IPs of the operator's pods, once exactly `count` are ready.
async fn ready_replicas(client: &Client, count: usize) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let start = Instant::now();
    loop {
        let listed = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=clair-operator"))
            .await?;
        let mut ready: Vec<String> = listed
            .items
            .iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .collect();
        ready.sort();
        if ready.len() == count && listed.items.len() == count {
            return Ok(ready);
        }
        ensure!(
            start.elapsed() < Duration::from_secs(120),
            "{} of {count} operator replicas ready after 120 s",
            ready.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn ca_of(secret: &Secret) -> anyhow::Result<String> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .context("the webhook Secret has no ca.crt")?;
    Ok(String::from_utf8(bytes.0.clone())?)
}

/// The `caBundle` of every webhook of both configurations.
async fn published_bundles(client: &Client) -> anyhow::Result<Vec<String>> {
    let name = clair_operator::webhook::CONFIGURATION_NAME;
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await?;
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await?;
    let configs = validating
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.client_config)
        .chain(
            mutating
                .webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| w.client_config),
        );
    Ok(configs
        .map(|c| String::from_utf8_lossy(&c.ca_bundle.unwrap_or_default().0).into_owned())
        .collect())
}

fn certificates(bundle: &str) -> usize {
    bundle.matches("-----BEGIN CERTIFICATE-----").count()
}

/// Completes a TLS handshake with the replica at `ip`, trusting only the CAs of `bundle`.
async fn serves(ip: &str, bundle: &str) -> anyhow::Result<()> {
    let config = clair_operator::webhook::replicas::trusting(bundle)
        .context("the bundle holds no certificate")?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let handshake = async {
        let tcp = tokio::net::TcpStream::connect(format!("{ip}:8443")).await?;
        connector
            .connect(ServerName::try_from(SERVICE_NAME)?, tcp)
            .await?;
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(5), handshake)
        .await
        .context("no handshake in 5 s")?
}

fn labelled_configmap(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some([(keys::VALIDATE_CONFIG.to_string(), "true".to_string())].into()),
            annotations: Some([(keys::CONFIG.to_string(), "config.yaml".to_string())].into()),
            ..Default::default()
        },
        data: Some([("config.yaml".to_string(), "log_level: info\n".to_string())].into()),
        ..Default::default()
    }
}

/// A TLS server on the node's address (the harness's own bridge) serving `bundle`'s certificate, reloadable; its port.
async fn tls_server(bundle: &Bundle) -> anyhow::Result<(RustlsConfig, u16)> {
    let config = RustlsConfig::from_pem(
        bundle.cert.clone().into_bytes(),
        bundle.key.clone().into_bytes(),
    )
    .await?;
    let listener = std::net::TcpListener::bind((NODE_IP, 0))?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let server = axum_server::from_tcp_rustls(listener, config.clone())?;
    tokio::spawn(server.serve(axum::Router::new().into_make_service()));
    Ok((config, port))
}

/// One EndpointSlice of the Service `probe` with one endpoint at `NODE_IP:port` (the
/// apiserver refuses loopback addresses in EndpointSlices).
fn slice(name: &str, port: u16, ready: bool) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                [(
                    "kubernetes.io/service-name".to_string(),
                    "probe".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        address_type: "IPv4".to_string(),
        endpoints: vec![Endpoint {
            addresses: vec![NODE_IP.to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(ready),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ports: Some(vec![EndpointPort {
            port: Some(i32::from(port)),
            ..Default::default()
        }]),
    }
}

/// What ends a CA rotation's overlap: the replicas behind the webhook Service, read from its
/// EndpointSlices, each serving a certificate of the new CA. One replica still serving the
/// old CA keeps the overlap open; a replica that is not ready (not called) does not.
pub async fn replicas_are_asked_which_ca_they_serve(env: &TestEnv) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("replicas").await?;
    let hosts = vec![format!("probe.{ns}.svc")];
    let now = time::OffsetDateTime::now_utc();
    let new = certs::issue(&hosts, None, now)?;
    let old = certs::issue(&hosts, None, now)?;
    let settings = Settings {
        name: "unused".to_string(),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        target: Target::Service {
            namespace: ns.clone(),
            name: "probe".to_string(),
            port: 443,
        },
        hosts: hosts.clone(),
        namespace: ns.clone(),
        recheck: Duration::from_secs(1),
        mounted: None,
        register: true,
        platform: Default::default(),
        namespaces: Vec::new(),
        callers: Default::default(),
    };
    ensure!(
        !replicas::all_serve(&client, &settings, &new.ca_cert).await?,
        "with no replica to ask, the overlap must not end"
    );
    let (_, first) = tls_server(&new).await?;
    let (lagging, second) = tls_server(&old).await?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    slices
        .create(&PostParams::default(), &slice("first", first, true))
        .await?;
    slices
        .create(&PostParams::default(), &slice("second", second, true))
        .await?;
    ensure!(
        !replicas::all_serve(&client, &settings, &new.ca_cert).await?,
        "a replica serving the old CA's certificate was taken to serve the new one"
    );
    ensure!(
        !replicas::all_serve(&client, &settings, &old.ca_cert).await?,
        "a replica serving the new CA's certificate was taken to serve the old one"
    );
    // The lagging replica reloads a certificate of the new CA.
    let renewed = certs::issue(
        &hosts,
        Some(certs::Authority {
            cert: &new.ca_cert,
            key: &new.ca_key,
            not_after: new.ca_not_after,
        }),
        now,
    )?;
    lagging
        .reload_from_pem(renewed.cert.into_bytes(), renewed.key.into_bytes())
        .await?;
    ensure!(
        replicas::all_serve(&client, &settings, &new.ca_cert).await?,
        "both replicas serve the new CA, yet the overlap would not end"
    );
    // A replica that is not ready is not called by the apiserver, so it is not waited for.
    lagging
        .reload_from_pem(old.cert.clone().into_bytes(), old.key.clone().into_bytes())
        .await?;
    slices
        .replace("second", &PostParams::default(), &{
            let mut s = slice("second", second, false);
            s.metadata.resource_version = slices.get("second").await?.metadata.resource_version;
            s
        })
        .await?;
    ensure!(
        replicas::all_serve(&client, &settings, &new.ca_cert).await?,
        "an unready replica held the overlap open"
    );
    Ok(())
}
