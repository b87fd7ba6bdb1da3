//! Which CA the webhook's replicas serve certificates of: each ready endpoint behind the
//! webhook's Service (or the URL the apiserver calls) is offered a TLS handshake by a client
//! that trusts that CA alone. A rotation's earlier CA leaves the `caBundle` only once every
//! one of them passes: the apiserver calls any of them.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ListParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use super::register::{Error, Settings, Target};

/// How long one replica may take to answer a handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether every replica the apiserver may call serves a certificate that `ca_pem` verifies
/// for the webhook's name. `false` while there is no replica to ask.
pub async fn all_serve(client: &Client, settings: &Settings, ca_pem: &str) -> Result<bool, Error> {
    let addresses = match &settings.target {
        Target::Service {
            namespace, name, ..
        } => ready_endpoints(client, namespace, name).await?,
        Target::Url(url) => match url_authority(url) {
            Some(authority) => tokio::net::lookup_host(authority)
                .await
                .map(Iterator::collect)
                .unwrap_or_default(),
            None => Vec::new(),
        },
    };
    if addresses.is_empty() {
        return Ok(false);
    }
    let Some(config) = trusting(ca_pem) else {
        return Ok(false);
    };
    let Some(name) = settings
        .hosts
        .first()
        .and_then(|h| ServerName::try_from(h.clone()).ok())
    else {
        return Ok(false);
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    for address in addresses {
        let handshake = async {
            let tcp = tokio::net::TcpStream::connect(address).await?;
            connector.connect(name.clone(), tcp).await
        };
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!(%address, error = %e, "a webhook replica does not serve the current CA yet");
                return Ok(false);
            }
            Err(_) => {
                tracing::debug!(%address, "a webhook replica did not answer the handshake");
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// A client that trusts the certificates of `ca_pem` and nothing else.
pub fn trusting(ca_pem: &str) -> Option<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(certificate.ok()?).ok()?;
    }
    if roots.is_empty() {
        return None;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Some(
        ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// The ready addresses behind the Service `namespace/name`, at every port it lists.
async fn ready_endpoints(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<SocketAddr>, Error> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let listed = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await?;
    Ok(listed.items.iter().flat_map(slice_addresses).collect())
}

fn slice_addresses(slice: &EndpointSlice) -> Vec<SocketAddr> {
    let ports: Vec<u16> = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| u16::try_from(p.port?).ok())
        .collect();
    slice
        .endpoints
        .iter()
        // Unset means ready (the API's convention); the apiserver calls only ready ones.
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| e.addresses.iter())
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .flat_map(|ip| ports.iter().map(move |port| SocketAddr::new(ip, *port)))
        .collect()
}

/// `HOST:PORT` of `https://HOST[:PORT]/...` (an operator outside the cluster).
fn url_authority(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url)
        .ok()
        .filter(|u| u.scheme() == "https")?;
    // `Host` writes an IPv6 literal in brackets, as an authority needs it.
    Some(format!(
        "{}:{}",
        parsed.host()?,
        parsed.port_or_known_default()?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

    #[test]
    fn only_ready_endpoints_are_asked() {
        let endpoint = |ip: &str, ready: Option<bool>| Endpoint {
            addresses: vec![ip.to_string()],
            conditions: Some(EndpointConditions {
                ready,
                ..Default::default()
            }),
            ..Default::default()
        };
        let slice = EndpointSlice {
            address_type: "IPv4".to_string(),
            endpoints: vec![
                endpoint("10.0.0.1", Some(true)),
                endpoint("10.0.0.2", Some(false)),
                endpoint("10.0.0.3", None),
            ],
            ports: Some(vec![EndpointPort {
                port: Some(8443),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let addresses: Vec<String> = slice_addresses(&slice)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(addresses, ["10.0.0.1:8443", "10.0.0.3:8443"]);
    }

    #[test]
    fn a_url_names_the_address_it_calls() {
        let authority = |url| url_authority(url).unwrap_or_default();
        assert_eq!(
            authority("https://127.0.0.1:9443/validate"),
            "127.0.0.1:9443"
        );
        assert_eq!(authority("https://10.0.0.5"), "10.0.0.5:443");
        assert_eq!(
            authority("https://webhook.example:8443/x"),
            "webhook.example:8443"
        );
        assert_eq!(authority("https://[::1]:8443"), "[::1]:8443");
        assert_eq!(authority("https://[::1]"), "[::1]:443");
        assert_eq!(url_authority("http://plain"), None);
    }
}
