//! The metrics server's certificate: mounted (`tls.crt` and `tls.key` in a folder, as
//! cert-manager or OpenShift's service CA write them, reread when they change), or made at
//! start, self-signed, and kept in memory (a scraper then skips verification, as
//! controller-runtime's self-signed default asks).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;

/// How often a mounted certificate's files are read again.
const REREAD: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the metrics certificate {path} (--metrics-cert-dir): {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the metrics certificate (--metrics-cert-dir): {0}")]
    Tls(#[from] crate::tls::Error),
    #[error("cannot make the metrics server's self-signed certificate: {0}")]
    Issue(#[from] rcgen::Error),
}

/// A certificate and its key, PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    pub cert: String,
    pub key: String,
}

impl Pair {
    /// A new self-signed certificate for `name`.
    pub fn self_signed(name: &str) -> Result<Self, Error> {
        let made = rcgen::generate_simple_self_signed(vec![name.to_string()])?;
        Ok(Self {
            cert: made.cert.pem(),
            key: made.signing_key.serialize_pem(),
        })
    }

    /// `tls.crt` and `tls.key` of `dir`.
    pub fn read(dir: &Path) -> Result<Self, Error> {
        let read = |file: &str| {
            let path = dir.join(file);
            std::fs::read_to_string(&path).map_err(|source| Error::Read {
                path: path.display().to_string(),
                source,
            })
        };
        Ok(Self {
            cert: read("tls.crt")?,
            key: read("tls.key")?,
        })
    }

    /// The server's configuration serving this pair.
    pub fn config(&self) -> Result<Arc<rustls::ServerConfig>, Error> {
        Ok(Arc::new(crate::tls::server_config(
            &self.cert, &self.key, None,
        )?))
    }
}

/// Serves the files of `dir` from now on whenever they change, until the task is dropped;
/// a pair that cannot be read or loaded is said in the log and the last good one kept.
pub async fn keep_current(tls: RustlsConfig, dir: PathBuf, mut served: Pair) {
    loop {
        tokio::time::sleep(REREAD).await;
        let read = Pair::read(&dir).and_then(|pair| {
            let config = (pair != served).then(|| pair.config()).transpose()?;
            Ok((pair, config))
        });
        match read {
            Ok((pair, Some(config))) => {
                tls.reload_from_config(config);
                tracing::info!(dir = %dir.display(), "metrics certificate reloaded");
                served = pair;
            }
            Ok((_, None)) => {}
            Err(e) => tracing::warn!(error = %e, "keeping the metrics certificate served"),
        }
    }
}
