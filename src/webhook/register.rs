//! Keeping the webhooks reachable: their certificate (kept by `storage`: mounted by an
//! installer, or the operator's own in a Secret, issued, renewed, reissued if the Secret is
//! deleted; its CA rotated only once every replica serves the new one: `replicas`, by the
//! rules of `rotation`), the validating and mutating webhook configurations (built by
//! `configurations`) published with the current `caBundle`, and the server's certificate
//! reloaded whenever it changes.

use std::net::SocketAddr;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, watcher};
use tracing::{debug, info, warn};

use super::certs::Bundle;
pub use super::configurations::{Registration, Target, mutating, validating};
use super::replicas;
use super::rotation::{Action, Answered, LONG_OVERLAP, Rotation};
use super::server;
pub use super::storage::SECRET_NAME;
use super::storage::current_certificate;
use crate::api::labels::FIELD_MANAGER;

/// How long a settled webhook goes before checking its certificate and configurations
/// unprompted. Their watches bring a deletion or an edit at once, so this only paces the
/// certificate's renewal (it is issued for a year and renewed weeks ahead) and covers a
/// watch that could not run (a Role without `watch`): an idle operator asks nothing in
/// between.
const SETTLED_RECHECK: Duration = Duration::from_secs(3600);

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
    /// The pace of a rotation's steps (a CA is published one check before it is served)
    /// and of a mounted certificate's files; settled, the Secret and the configurations
    /// are watched instead (`SETTLED_RECHECK`).
    pub recheck: Duration,
    /// Serve the certificate mounted in this folder (`tls.crt`, `tls.key`, and `ca.crt` for
    /// the `caBundle`, as cert-manager writes them) instead of issuing one. Files that
    /// change are reloaded.
    pub mounted: Option<std::path::PathBuf>,
    /// Whether this operator writes the webhook configurations (and their `caBundle`);
    /// false when the installer does (OLM, from the bundle's `webhookdefinitions`).
    pub register: bool,
    /// What tenants may name: the resource webhook refuses the rest.
    pub platform: crate::platform::Platform,
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

/// Wakes whenever the certificate Secret (unless the certificate is mounted) or, when this
/// operator keeps them, the webhook configurations change: watches of those objects alone
/// (by name), so a settled webhook reads nothing until one does. The initial lists say
/// nothing; a relist (the watch lost its place) wakes once, as a deletion may hide in it.
fn changes(client: &Client, settings: &Settings) -> impl Stream<Item = ()> + Send + Unpin + use<> {
    fn named<K>(api: Api<K>, name: &str) -> futures::stream::BoxStream<'static, ()>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        use kube::runtime::WatchStreamExt;
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut listed = false;
        watcher(api, config)
            .default_backoff()
            .filter_map(move |event| {
                let woken = match event {
                    Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => true,
                    Ok(watcher::Event::InitDone) => std::mem::replace(&mut listed, true),
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => false,
                    Err(e) => {
                        debug!(error = %e, "the webhook's watch failed; checked hourly meanwhile");
                        false
                    }
                };
                futures::future::ready(woken.then_some(()))
            })
            .boxed()
    }
    let mut watches = Vec::new();
    if settings.mounted.is_none() {
        let secrets = Api::<Secret>::namespaced(client.clone(), &settings.namespace);
        watches.push(named(secrets, SECRET_NAME));
    }
    if settings.register {
        let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone());
        let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone());
        watches.push(named(validating, &settings.name));
        watches.push(named(mutating, &settings.name));
    }
    futures::stream::select_all(watches)
}

/// Why the loop checks again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wake {
    /// Its pause ended.
    Paced,
    /// A watch said the Secret or a configuration changed.
    Changed,
}

/// Until the next check: `pause`, or sooner when `changes` (if listened to) says something
/// changed; `None` when `shutdown` came first. A burst of changes is one wake.
async fn next_check(
    pause: Duration,
    changes: Option<&mut (impl Stream<Item = ()> + Unpin)>,
    shutdown: &mut (impl std::future::Future<Output = ()> + Unpin),
) -> Option<Wake> {
    let changed = async {
        match changes {
            // No watch at all (a mounted certificate the installer registers) is a stream
            // that ends at once: only the pause wakes then.
            Some(changes) => match changes.next().await {
                Some(()) => while let Some(Some(())) = changes.next().now_or_never() {},
                None => futures::future::pending::<()>().await,
            },
            None => futures::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = shutdown => None,
        _ = tokio::time::sleep(pause) => Some(Wake::Paced),
        _ = changed => Some(Wake::Changed),
    }
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
        platform: settings.platform.clone(),
        seal,
        metrics: telemetry.metrics.clone(),
        authenticated: settings.callers.authenticated(),
        turns: server::Shared::turns(),
        bytes: server::Shared::bytes(),
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
    let mut changes = changes(&client, &settings);
    if !settings.register {
        server_ready.set();
        info!(listen = %settings.listen, "admission webhook serving; the installer keeps its configurations");
        // Mounted files are polled (no request); the operator's own Secret is watched.
        let pause = if settings.mounted.is_some() {
            settings.recheck
        } else {
            SETTLED_RECHECK
        };
        while next_check(pause, Some(&mut changes), &mut shutdown)
            .await
            .is_some()
        {
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
    // Settled, the loop waits on the watches; during a rotation it keeps the recheck's pace
    // whatever they say (a published CA must reach the apiserver before it is served). A
    // mounted certificate's files are read at that pace in any case (no request), the
    // configurations verified only when they changed or hourly. The configurations were
    // just written, so unless a rotation is under way the loop starts settled: its watches
    // open now, at start, rather than at the first check a minute into an idle operator.
    let mut settled = matches!(rotation.next(rotation.serving()), Action::Verify { .. });
    let mut verified = tokio::time::Instant::now();
    loop {
        let pause = if settled && settings.mounted.is_none() {
            SETTLED_RECHECK
        } else {
            settings.recheck
        };
        let listened = settled.then_some(&mut changes);
        let Some(wake) = next_check(pause, listened, &mut shutdown).await else {
            break;
        };
        let was_settled = std::mem::replace(&mut settled, false);
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
            Action::Verify { .. }
                if was_settled && wake == Wake::Paced && verified.elapsed() < SETTLED_RECHECK =>
            {
                settled = true;
            }
            Action::Verify { ca, bundle } => {
                verified = tokio::time::Instant::now();
                settled = match configuration_current(&client, &settings, &ca).await {
                    Ok(true) => true,
                    Ok(false) => {
                        warn!("the webhook configuration was missing or changed; restoring it");
                        let restored = ensure_configuration(&client, &settings, &bundle).await;
                        if let Err(e) = &restored {
                            warn!(error = %e, "cannot restore the webhook configuration");
                        }
                        restored.is_ok()
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot read the webhook configuration");
                        false
                    }
                };
            }
        }
    }
    let _ = stop.send(true);
    let _ = server.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_watch_wakes_on_the_pause_only_and_a_burst_of_changes_is_one_wake() {
        let mut shutdown = Box::pin(futures::future::pending::<()>());
        // A mounted certificate the installer registers: nothing watched.
        let mut nothing =
            futures::stream::select_all(Vec::<futures::stream::BoxStream<'static, ()>>::new());
        let pause = Duration::from_millis(20);
        let started = std::time::Instant::now();
        let wake = next_check(pause, Some(&mut nothing), &mut shutdown).await;
        assert_eq!(wake, Some(Wake::Paced));
        assert!(
            started.elapsed() >= pause,
            "an ended stream must not wake it at once"
        );

        let mut burst = futures::stream::iter([(), (), ()]).chain(futures::stream::pending());
        let wake = next_check(Duration::from_secs(3600), Some(&mut burst), &mut shutdown).await;
        assert_eq!(wake, Some(Wake::Changed));
        assert_eq!(
            burst.next().now_or_never(),
            None,
            "the burst was drained in one wake"
        );

        let mut stopped = Box::pin(futures::future::ready(()));
        let wake = next_check(
            Duration::from_secs(3600),
            None::<&mut futures::stream::Pending<()>>,
            &mut stopped,
        )
        .await;
        assert_eq!(wake, None);
    }
}
