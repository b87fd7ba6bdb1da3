//! GETs of the operator's metrics and health server as a scraper sends them: over TLS
//! without verifying the operator's self-signed certificate (as the shipped ServiceMonitor
//! does), with a bearer token or none; or over plain HTTP (`--metrics-insecure`). To
//! loopback or the harness's own addresses only; bounded: 10 s.

use std::sync::Arc;
use std::time::Duration;

use crate::{Error, Result};

/// The status and body of `GET url`, sending `token` (if any) and `accept`.
pub fn get(url: &str, token: Option<&str>, accept: &str) -> Result<(u16, String)> {
    let tls = ureq::tls::TlsConfig::builder()
        .disable_verification(true)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .tls_config(tls)
        .build()
        .into();
    let mut request = agent.get(url).header("Accept", accept);
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let failed = |e: ureq::Error| Error::Io {
        what: format!("GET {url}"),
        source: std::io::Error::other(e.to_string()),
    };
    let mut response = request.call().map_err(failed)?;
    let status = response.status().as_u16();
    Ok((
        status,
        response.body_mut().read_to_string().map_err(failed)?,
    ))
}
