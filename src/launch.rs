//! The operator's wiring, the one way to start it: the metrics and health server, the
//! templating webhook's seal, the admission webhooks, the controllers and the leader
//! election, from typed settings. `clair-operator run` parses its arguments into
//! [`Settings`] and calls [`run`]; the test tiers' in-process operator calls it too, with a
//! client of its own.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use futures::FutureExt;
use kube::Client;

use crate::controller;
use crate::leader;
use crate::metrics::Telemetry;
use crate::webhook;

/// The Lease the replicas elect their leader on.
pub const LEASE_NAME: &str = "clair-operator";

/// Everything `run` needs besides its client.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where `/metrics`, `/healthz` and `/readyz` are served, chosen by the caller.
    pub metrics_listen: SocketAddr,
    /// How they are served.
    pub metrics: MetricsSecurity,
    /// The admission webhooks, or none (then no template is re-rendered either).
    pub webhook: Option<webhook::register::Settings>,
    /// What tenants may name.
    pub platform: crate::platform::Platform,
    /// The namespaces watched and written; the whole cluster when empty.
    pub namespaces: Vec<String>,
    /// How often an Available `Clair` is looked at again with nothing changed.
    pub available_recheck: Duration,
    /// Elect a leader before the controllers start, or (None) run them at once: for a
    /// single replica only.
    pub election: Option<Election>,
}

/// How `/metrics` is served.
#[derive(Clone, Debug)]
pub enum MetricsSecurity {
    /// Plain HTTP, to anyone: a local run.
    Insecure,
    /// TLS with the certificate mounted in `cert_dir` (reread when it changes), else a
    /// self-signed one made at start; each scrape reviewed by the apiserver.
    Secure {
        cert_dir: Option<std::path::PathBuf>,
    },
}

/// This replica's part in the leader election.
#[derive(Clone, Debug)]
pub struct Election {
    /// Where the Lease lives.
    pub namespace: String,
    /// This replica's name in the Lease.
    pub identity: String,
    pub timing: leader::Timing,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {address} for metrics: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    MetricsCertificate(#[from] crate::metrics::certificate::Error),
    #[error("cannot read or create the template sealing key: {0}")]
    Seal(kube::Error),
    #[error("admission webhook: {0}")]
    Webhook(#[from] webhook::register::Error),
    #[error("admission webhook task: {0}")]
    WebhookTask(#[from] tokio::task::JoinError),
}

impl Error {
    /// A short, stable name for logs and exit reports.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Listen { .. } => "MetricsListen",
            Self::MetricsCertificate(_) => "MetricsCertificate",
            Self::Seal(_) => "TemplateSeal",
            Self::Webhook(_) => "Webhook",
            Self::WebhookTask(_) => "WebhookTask",
        }
    }
}

/// The name of the Secret holding the templating webhook's sealing key.
pub fn seal_secret_name(webhook: &webhook::register::Settings) -> String {
    format!("{}-template-seal", webhook.name)
}

/// Runs the operator until `shutdown` resolves: serves metrics and health, the webhooks
/// when set, and the controllers while this replica leads (at once without an election).
/// Returns once everything has stopped.
pub async fn run(
    client: Client,
    telemetry: Telemetry,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let metrics_listener = tokio::net::TcpListener::bind(settings.metrics_listen)
        .await
        .map_err(|source| Error::Listen {
            address: settings.metrics_listen,
            source,
        })?;
    if let Ok(address) = metrics_listener.local_addr() {
        tracing::info!(listen = %address, "serving metrics and health");
    }
    let shutdown = shutdown.boxed().shared();
    // The key the templating webhook seals what it admits with, shared by the replicas.
    let seal = match &settings.webhook {
        Some(webhook) => Some(
            crate::templating::seal::Seal::load_or_create(
                &client,
                &webhook.namespace,
                &seal_secret_name(webhook),
            )
            .await
            .map_err(Error::Seal)?,
        ),
        None => None,
    };
    let serving = metrics_serving(&client, &settings.metrics)?;
    let metrics_server = tokio::spawn(crate::metrics::server::serve(
        metrics_listener,
        telemetry.metrics.clone(),
        telemetry.health.clone(),
        serving,
        shutdown.clone(),
    ));
    let webhook = settings
        .webhook
        .clone()
        .zip(seal.clone())
        .map(|(webhook, seal)| {
            tokio::spawn(webhook::register::run(
                client.clone(),
                webhook,
                seal,
                telemetry.clone(),
                shutdown.clone(),
            ))
        });
    let controllers = controller::Controllers {
        platform: settings.platform.clone(),
        template_seal: seal,
        namespaces: settings.namespaces.clone(),
        telemetry,
        available_recheck: settings.available_recheck,
    };
    match &settings.election {
        None => {
            controllers.telemetry.metrics.leader.set(1);
            controller::run(client, controllers, shutdown.clone()).await;
        }
        Some(election) => lead_while_elected(client, controllers, election, shutdown).await,
    }
    let _ = metrics_server.await;
    if let Some(webhook) = webhook {
        webhook.await??;
    }
    Ok(())
}

/// The metrics server's TLS and reviews as `security` asks; a mounted certificate is kept
/// current by a task of its own.
fn metrics_serving(
    client: &Client,
    security: &MetricsSecurity,
) -> Result<crate::metrics::server::Serving, Error> {
    use crate::metrics::certificate::{Pair, keep_current};
    let MetricsSecurity::Secure { cert_dir } = security else {
        tracing::warn!("serving metrics over plain HTTP to anyone (--metrics-insecure)");
        return Ok(crate::metrics::server::Serving::Insecure);
    };
    let pair = match cert_dir {
        Some(dir) => Pair::read(dir)?,
        None => Pair::self_signed("clair-operator-metrics")?,
    };
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(pair.config()?);
    if let Some(dir) = cert_dir {
        tokio::spawn(keep_current(tls.clone(), dir.clone(), pair));
    }
    Ok(crate::metrics::server::Serving::Secure {
        tls,
        access: std::sync::Arc::new(crate::metrics::access::Access::new(client.clone())),
    })
}

/// Runs the controllers each time this replica wins the Lease, until `shutdown`.
async fn lead_while_elected(
    client: Client,
    controllers: controller::Controllers,
    election: &Election,
    shutdown: futures::future::Shared<futures::future::BoxFuture<'static, ()>>,
) {
    let leading = controllers.telemetry.metrics.leader.clone();
    let health = controllers.telemetry.health.clone();
    let lease = leader::Election::new(
        client.clone(),
        &election.namespace,
        LEASE_NAME,
        &election.identity,
        election.timing,
    );
    loop {
        tokio::select! {
            _ = lease.acquire() => {}
            _ = shutdown.clone() => return,
        }
        leading.set(1);
        let run = controller::run(client.clone(), controllers.clone(), shutdown.clone());
        tokio::select! {
            _ = run => {
                lease.release().await;
                return;
            }
            _ = lease.hold() => {
                // Another replica may lead from now on: the controllers stop (their future
                // is dropped), nothing more is written, and this replica stands by like any
                // other (an unreachable apiserver must not make every replica exit).
                leading.set(0);
                health.forget(controller::HEALTH_GROUP);
                tracing::warn!(
                    identity = lease.identity(),
                    "lost the lease: the controllers stopped; standing by"
                );
            }
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            }
            tracing::info!("shutting down");
            return;
        }
    }
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
}

/// This replica's name in the Lease: the pod's name, else the host's and the process id.
pub fn identity() -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    })
}
