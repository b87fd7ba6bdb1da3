//! Where the webhooks' certificate is kept: mounted by an installer (cert-manager's or
//! OLM's files), or the operator's own in a Secret, issued and renewed by `certs` and
//! written so that replicas racing to renew agree on one.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use time::OffsetDateTime;
use tracing::info;

use super::certs::{self, Bundle, Renewal};
use super::register::{Error, Settings};
use crate::api::labels::FIELD_MANAGER;

/// Name of the Secret holding the webhook's CA and serving certificate.
pub const SECRET_NAME: &str = "clair-operator-webhook-tls";

/// The certificate mounted in `dir`.
fn read_mounted(dir: &std::path::Path) -> Result<Bundle, Error> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).map_err(|source| Error::Mounted {
            path: path.display().to_string(),
            source,
        })
    };
    // OLM mounts tls.crt and tls.key only: it publishes its CA itself.
    let ca_cert = match read("ca.crt") {
        Err(Error::Mounted { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            String::new()
        }
        other => other?,
    };
    Ok(Bundle {
        ca_cert,
        ca_key: String::new(),
        cert: read("tls.crt")?,
        key: read("tls.key")?,
        not_after: 0,
        ca_not_after: 0,
    })
}

/// The certificate to serve now: the mounted one, or the operator's own.
pub async fn current_certificate(client: &Client, settings: &Settings) -> Result<Bundle, Error> {
    match &settings.mounted {
        Some(dir) => read_mounted(dir),
        None => ensure_certificate(client, &settings.namespace, &settings.hosts).await,
    }
}

fn bundle_from(secret: &Secret) -> Option<Bundle> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| String::from_utf8(data.get(key)?.0.clone()).ok();
    let annotations = secret.metadata.annotations.as_ref()?;
    let time = |key: &str| annotations.get(key)?.parse::<i64>().ok();
    Some(Bundle {
        ca_cert: text("ca.crt")?,
        ca_key: text("ca.key")?,
        cert: text("tls.crt")?,
        key: text("tls.key")?,
        not_after: time("clair.projectquay.io/not-after")?,
        ca_not_after: time("clair.projectquay.io/ca-not-after")?,
    })
}

fn secret_for(bundle: &Bundle, namespace: &str) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    Secret {
        metadata: ObjectMeta {
            name: Some(SECRET_NAME.to_string()),
            namespace: Some(namespace.to_string()),
            annotations: Some(BTreeMap::from([
                (
                    "clair.projectquay.io/not-after".to_string(),
                    bundle.not_after.to_string(),
                ),
                (
                    "clair.projectquay.io/ca-not-after".to_string(),
                    bundle.ca_not_after.to_string(),
                ),
            ])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_string()),
        data: Some(BTreeMap::from([
            ("ca.crt".to_string(), bytes(&bundle.ca_cert)),
            ("ca.key".to_string(), bytes(&bundle.ca_key)),
            ("tls.crt".to_string(), bytes(&bundle.cert)),
            ("tls.key".to_string(), bytes(&bundle.key)),
        ])),
        ..Default::default()
    }
}

/// The certificate to serve: the Secret's while it is valid for long enough, else a renewed
/// one (same CA when the CA is still good), written back to the Secret. Replicas that find
/// the Secret missing or expiring at the same moment race: the write is a create, or a patch
/// on the version read, so one wins and the others serve the winner's.
pub async fn ensure_certificate(
    client: &Client,
    namespace: &str,
    hosts: &[String],
) -> Result<Bundle, Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let found = secrets.get_opt(SECRET_NAME).await?;
        let current = found.as_ref().and_then(bundle_from);
        let now = OffsetDateTime::now_utc();
        let bundle = match &current {
            Some(bundle) => match certs::renewal(bundle, now) {
                Renewal::Keep => return Ok(bundle.clone()),
                Renewal::Certificate => {
                    let authority = certs::Authority {
                        cert: &bundle.ca_cert,
                        key: &bundle.ca_key,
                        not_after: bundle.ca_not_after,
                    };
                    certs::issue(hosts, Some(authority), now)?
                }
                Renewal::Everything => certs::issue(hosts, None, now)?,
            },
            None => certs::issue(hosts, None, now)?,
        };
        let mut secret = secret_for(&bundle, namespace);
        let written = match &found {
            None => secrets
                .create(
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.to_string()),
                        ..Default::default()
                    },
                    &secret,
                )
                .await
                .map(drop),
            Some(existing) => {
                // The version read is a precondition: a replica that renewed first wins.
                secret.metadata.resource_version = existing.metadata.resource_version.clone();
                secrets
                    .patch(
                        SECRET_NAME,
                        &PatchParams {
                            field_manager: Some(FIELD_MANAGER.to_string()),
                            ..Default::default()
                        },
                        &Patch::Merge(&secret),
                    )
                    .await
                    .map(drop)
            }
        };
        match written {
            Ok(()) => {
                info!(%namespace, "issued a webhook certificate");
                return Ok(bundle);
            }
            // Another replica wrote first: serve what it wrote.
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 3 => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
