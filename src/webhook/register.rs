//! Keeping the webhooks reachable: their certificate (kept by `storage`: mounted by an
//! installer, or the operator's own in a Secret, issued, renewed, reissued if the Secret is
//! deleted; its CA rotated only once every replica serves the new one: `replicas`, by the
//! rules of `rotation`), the validating and mutating webhook configurations (built by
//! `configurations`) published with the current `caBundle`, and the server's certificate
//! reloaded whenever it changes.

use std::net::SocketAddr;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use tracing::{info, warn};

use super::certs::Bundle;
pub use super::configurations::{Registration, Target, mutating, validating};
use super::replicas;
use super::rotation::{Action, Answered, LONG_OVERLAP, Rotation};
use super::server;
pub use super::storage::SECRET_NAME;
use super::storage::current_certificate;
use crate::api::labels::FIELD_MANAGER;

#[derive(Clone, Debug)]
pub struct Settings {
    /// Name of the webhook configurations (and of the certificate Secret's prefix).
    pub name: String,
    /// Where the server listens.
    pub listen: SocketAddr,
    pub target: Target,
    /// Names and addresses the serving certificate is for.
    pub hosts: Vec<String>,
    /// Namespace of the certificate Secret.
    pub namespace: String,
    /// How often the certificate is checked (renewal, deletion, new files).
    pub recheck: Duration,
    /// Serve the certificate mounted in this folder (`tls.crt`, `tls.key`, and `ca.crt` for
    /// the `caBundle`, as cert-manager writes them) instead of issuing one. Files that
    /// change are reloaded.
    pub mounted: Option<std::path::PathBuf>,
    /// Whether this operator writes the webhook configurations (and their `caBundle`);
    /// false when the installer does (OLM, from the bundle's `webhookdefinitions`).
    pub register: bool,
    /// The images resources may run: the resource webhook refuses others.
    pub images: crate::images::ImagePolicy,
    /// The namespaces the operator serves (`--namespaces`); every namespace when empty.
    /// The webhooks are called for objects in these only.
    pub namespaces: Vec<String>,
    /// Who the server answers: the apiserver alone (by client certificate), or anyone.
    pub callers: super::callers::Callers,
}

impl Settings {
    /// The configurations' part of the settings.
    pub fn registration(&self) -> Registration {
        Registration {
            name: self.name.clone(),
            target: self.target.clone(),
            namespaces: self.namespaces.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot issue the webhook certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("cannot load the webhook certificate: {0}")]
    Tls(std::io::Error),
    #[error(transparent)]
    Callers(#[from] super::callers::Error),
    #[error(
        "the mounted webhook certificate has no {0}, which the webhooks' caBundle needs: mount \
         the CA as ca.crt, or let the installer register the webhooks (--no-webhook-registration)"
    )]
    NoMountedCa(String),
    #[error("cannot read the mounted webhook certificate {path}: {source}")]
    Mounted {
        path: String,
        source: std::io::Error,
    },
}

/// Whether both configurations exist and every webhook in them trusts `ca_cert` (among
/// others, while a rotation overlaps two CAs).
async fn configuration_current(
    client: &Client,
    settings: &Settings,
    ca_cert: &str,
) -> Result<bool, Error> {
    let trusts = |bundle: Option<&ByteString>| {
        bundle.is_some_and(|b| String::from_utf8_lossy(&b.0).contains(ca_cert.trim()))
    };
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt(&settings.name)
        .await?;
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(&settings.name)
        .await?;
    let validating_current = validating.is_some_and(|c| {
        c.webhooks
            .unwrap_or_default()
            .iter()
            .all(|w| trusts(w.client_config.ca_bundle.as_ref()))
    });
    let mutating_current = mutating.is_some_and(|c| {
        c.webhooks
            .unwrap_or_default()
            .iter()
            .all(|w| trusts(w.client_config.ca_bundle.as_ref()))
    });
    Ok(validating_current && mutating_current)
}

/// The `caBundle` published now (of the validating configuration's first webhook), if any.
async fn published_bundle(client: &Client, settings: &Settings) -> Result<Option<String>, Error> {
    let configuration = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt(&settings.name)
        .await?;
    Ok(configuration
        .and_then(|c| c.webhooks?.into_iter().next()?.client_config.ca_bundle)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned()))
}

async fn ensure_configuration(
    client: &Client,
    settings: &Settings,
    ca_bundle: &str,
) -> Result<(), Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(
            &settings.name,
            &params,
            &Patch::Apply(&validating(&settings.registration(), ca_bundle)),
        )
        .await?;
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(
            &settings.name,
            &params,
            &Patch::Apply(&mutating(&settings.registration(), ca_bundle)),
        )
        .await?;
    Ok(())
}

/// The server's TLS configuration for `bundle`, with the client CA read again.
fn tls_config(
    settings: &Settings,
    bundle: &Bundle,
) -> Result<std::sync::Arc<rustls::ServerConfig>, super::callers::Error> {
    super::callers::server_config(&settings.callers, &bundle.cert, &bundle.key)
        .map(std::sync::Arc::new)
}

/// Serves `bundle` from now on; false (said in the log) when it cannot be loaded.
async fn reload(tls: &RustlsConfig, settings: &Settings, bundle: &Bundle) -> bool {
    let loaded = tls_config(settings, bundle).map(|config| tls.reload_from_config(config));
    match loaded {
        Ok(()) => {
            info!("webhook certificate reloaded");
            true
        }
        Err(e) => {
            warn!(error = %e, "cannot reload the webhook certificate");
            false
        }
    }
}

/// Runs the webhooks until `shutdown` resolves: certificate, configurations, server, and a
/// loop that reissues and reloads the certificate when the Secret is renewed or deleted.
pub async fn run(
    client: Client,
    settings: Settings,
    seal: crate::templating::seal::Seal,
    telemetry: crate::metrics::Telemetry,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    if let super::callers::Callers::Apiserver { names, .. } = &settings.callers
        && names.is_empty()
    {
        warn!(
            "--webhook-client-ca without --webhook-client-names: any certificate that CA signed is \
             taken for the apiserver's (a cluster CA also signs kubelets' and nodes'); name the \
             apiserver's webhook client certificate"
        );
    }
    // Alive while this loop runs; the server's own guard lives in the server's task.
    let looping = telemetry.health.alive("webhook certificate loop");
    looping.ready();
    let server_alive = telemetry.health.alive("webhook server");
    let server_ready = server_alive.readiness();
    let mut serving = current_certificate(&client, &settings).await?;
    if settings.register && serving.ca_cert.is_empty() {
        return Err(Error::NoMountedCa("ca.crt".to_string()));
    }
    let tls = RustlsConfig::from_config(tls_config(&settings, &serving)?);
    // Listening before the apiserver is told where to call.
    let listener = std::net::TcpListener::bind(settings.listen).map_err(Error::Tls)?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let tls_for_server = tls.clone();
    let shared = server::Shared {
        client: client.clone(),
        images: settings.images.clone(),
        seal,
        metrics: telemetry.metrics.clone(),
        authenticated: settings.callers.authenticated(),
        turns: server::Shared::turns(),
        own_user: server::own_user(&client).await,
    };
    let until_stopped = {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let server = tokio::spawn(async move {
        let _alive = server_alive;
        let served = server::serve(shared, listener, tls_for_server, until_stopped).await;
        if let Err(e) = &served {
            tracing::error!(error = %e, "the admission webhook server stopped");
        }
        served
    });
    let mut shutdown = Box::pin(shutdown);
    if !settings.register {
        server_ready.set();
        info!(listen = %settings.listen, "admission webhook serving; the installer keeps its configurations");
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(settings.recheck) => {}
            }
            // The installer publishes the CA of what it mounts: serve a new one at once.
            match current_certificate(&client, &settings).await {
                Ok(bundle) if bundle != serving => {
                    if reload(&tls, &settings, &bundle).await {
                        serving = bundle;
                    }
                }
                Ok(_) => {}
                Err(e) => warn!(error = %e, "cannot check the webhook certificate"),
            }
        }
        let _ = stop.send(true);
        let _ = server.await;
        return Ok(());
    }
    // CAs published before this replica started (a rotation under way) stay trusted.
    let published = published_bundle(&client, &settings).await?;
    let mut rotation = Rotation::resumed(serving, published.as_deref());
    ensure_configuration(&client, &settings, &rotation.bundle()).await?;
    server_ready.set();
    info!(listen = %settings.listen, "admission webhook serving");
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tokio::time::sleep(settings.recheck) => {}
        }
        let found = match current_certificate(&client, &settings).await {
            Ok(found) => found,
            Err(e) => {
                warn!(error = %e, "cannot check the webhook certificate");
                continue;
            }
        };
        match rotation.next(&found) {
            Action::Serve(certificate) => {
                if reload(&tls, &settings, &certificate).await {
                    rotation.served(certificate);
                }
            }
            Action::Publish {
                bundle,
                certificate,
            } => match ensure_configuration(&client, &settings, &bundle).await {
                Ok(()) => {
                    info!(
                        "a new webhook certificate: its CA is published, served at the next check"
                    );
                    rotation.published(certificate);
                }
                Err(e) => warn!(error = %e, "cannot update the webhook configuration"),
            },
            Action::AskReplicas(ca) => match replicas::all_serve(&client, &settings, &ca).await {
                Ok(all_serve) => match rotation.answered(all_serve) {
                    Answered::Settle(bundle) => {
                        match ensure_configuration(&client, &settings, &bundle).await {
                            Ok(()) => {
                                info!(
                                    "every replica serves the current CA; earlier CAs are no longer trusted"
                                );
                                rotation.settled();
                            }
                            Err(e) => warn!(error = %e, "cannot update the webhook configuration"),
                        }
                    }
                    // Said once: earlier CAs stay trusted, which is safe but should end.
                    Answered::Wait { warn: true } => warn!(
                        checks = LONG_OVERLAP,
                        "a webhook replica still does not serve the current CA: earlier \
                         CAs stay in the caBundle until every ready replica does; check \
                         that the operator's pods reach each other on the webhook port"
                    ),
                    Answered::Wait { warn: false } => {}
                },
                Err(e) => {
                    warn!(error = %e, "cannot ask the webhook's replicas which CA they serve")
                }
            },
            Action::Verify { ca, bundle } => {
                match configuration_current(&client, &settings, &ca).await {
                    Ok(true) => {}
                    Ok(false) => {
                        warn!("the webhook configuration was missing or changed; restoring it");
                        if let Err(e) = ensure_configuration(&client, &settings, &bundle).await {
                            warn!(error = %e, "cannot restore the webhook configuration");
                        }
                    }
                    Err(e) => warn!(error = %e, "cannot read the webhook configuration"),
                }
            }
        }
    }
    let _ = stop.send(true);
    let _ = server.await;
    Ok(())
}
