//! A TLS server's configuration, one way for every server of the operator (the webhooks,
//! the metrics): ring's provider, its safe protocol versions, a PEM chain and key, and
//! HTTP/2 or HTTP/1.1 offered by ALPN.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ServerConfig;
use rustls::server::danger::ClientCertVerifier;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the serving key is not a PEM private key")]
    Key,
    #[error("cannot serve the certificate: {0}")]
    Serving(#[from] rustls::Error),
}

/// The provider every server and verifier of the operator uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The configuration serving `cert`/`key` (PEM), asking for client certificates when
/// `clients` is given.
pub fn server_config(
    cert: &str,
    key: &str,
    clients: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<ServerConfig, Error> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
        .filter_map(Result::ok)
        .collect();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|_| Error::Key)?;
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let mut config = match clients {
        None => builder.with_no_client_auth(),
        Some(verifier) => builder.with_client_cert_verifier(verifier),
    }
    .with_single_cert(chain, key)?;
    // Clients (the apiserver, Prometheus) speak HTTP/2 or HTTP/1.1; say both, as
    // axum-server does.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_pair_serves_and_a_bad_key_is_named() {
        let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let config = server_config(&pair.cert.pem(), &pair.signing_key.serialize_pem(), None)
            .expect("serves");
        assert_eq!(config.alpn_protocols[0], b"h2");
        assert!(matches!(
            server_config(&pair.cert.pem(), "not a key", None),
            Err(Error::Key)
        ));
    }
}
