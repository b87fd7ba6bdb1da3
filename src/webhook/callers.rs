//! Who may call the admission server, and what an answer may tell them.
//!
//! An AdmissionReview's body says who writes what where (`userInfo`, `namespace`), but the
//! body is whatever the caller sent: anyone who reaches the webhook's port can send one.
//! Only a TLS client certificate proves the caller is the kube-apiserver (which presents one
//! when its `--admission-control-config-file` names a kubeconfig for webhooks). So:
//! - [`Callers::Apiserver`]: the server requires a client certificate issued by a CA the
//!   platform team gives it, with one of the given names; the body is then the apiserver's
//!   word, and the webhooks read what a resource names to check it.
//! - [`Callers::Anyone`] (no such CA): the body may be forged, so no answer holds anything
//!   read from the cluster. The webhooks check what is in the request itself (and access
//!   reviews, which tell only whether a named user may get a named object).
//!
//! In both, no answer ever holds a Secret's or ConfigMap's value: the templating webhook
//! seals and checks, and the re-render controller writes the output with the operator's own
//! access (`controller::templates`).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

/// Who the server answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Callers {
    /// Anyone who reaches the port (no client CA configured): answers come from the request
    /// alone.
    #[default]
    Anyone,
    /// Only TLS clients with a certificate of the CA in `ca` (PEM, reread with the serving
    /// certificate) whose common name or a DNS name is one of `names` (any, when empty).
    Apiserver { ca: PathBuf, names: Vec<String> },
}

impl Callers {
    /// Whether a request's body is the apiserver's word (its caller proved who it is).
    pub fn authenticated(&self) -> bool {
        matches!(self, Callers::Apiserver { .. })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the webhook client CA {path} (--webhook-client-ca): {source}")]
    ReadCa {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the webhook client CA {path} (--webhook-client-ca) holds no PEM certificate: give the CA that issues the kube-apiserver's webhook client certificate"
    )]
    NoCa { path: String },
    #[error("the webhook client CA {path} (--webhook-client-ca): {source}")]
    BadCa { path: String, source: rustls::Error },
    #[error("the webhook's serving certificate: {0}")]
    Serving(#[from] crate::tls::Error),
}

/// The TLS server configuration for `cert`/`key` (PEM), asking for client certificates as
/// `callers` says.
pub fn server_config(callers: &Callers, cert: &str, key: &str) -> Result<ServerConfig, Error> {
    let clients = match callers {
        Callers::Anyone => None,
        Callers::Apiserver { ca, names } => Some(verifier(ca, names, crate::tls::provider())?),
    };
    Ok(crate::tls::server_config(cert, key, clients)?)
}

fn verifier(
    ca: &std::path::Path,
    names: &[String],
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, Error> {
    let path = ca.display().to_string();
    let pem = std::fs::read(ca).map_err(|source| Error::ReadCa {
        path: path.clone(),
        source,
    })?;
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok) {
        roots.add(certificate).map_err(|source| Error::BadCa {
            path: path.clone(),
            source,
        })?;
    }
    if roots.is_empty() {
        return Err(Error::NoCa { path });
    }
    let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| Error::BadCa {
            path,
            source: rustls::Error::General(e.to_string()),
        })?;
    Ok(Arc::new(Named {
        inner,
        names: names.to_vec(),
    }))
}

/// The CA's verdict, then the certificate's name against the accepted ones: a CA that also
/// issues other clients' certificates (often the cluster's own) does not let them all in.
#[derive(Debug)]
struct Named {
    inner: Arc<dyn ClientCertVerifier>,
    names: Vec<String>,
}

/// The common names and DNS names of a DER certificate.
fn names_of(der: &[u8]) -> Vec<String> {
    let Ok((_, certificate)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = certificate
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = certificate.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push((*dns).to_string());
            }
        }
    }
    names
}

/// Whether a certificate with `presented` names is one of `accepted` (any, when empty).
fn accepted(presented: &[String], accepted: &[String]) -> bool {
    accepted.is_empty() || presented.iter().any(|name| accepted.contains(name))
}

impl ClientCertVerifier for Named {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if accepted(&names_of(end_entity), &self.names) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

    fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), Issuer::new(params, key))
    }

    fn client(cn: &str, issuer: &Issuer<'static, KeyPair>) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        params.signed_by(&key, issuer).unwrap().der().clone()
    }

    fn verifier_for(ca_pem: &str, names: &[&str]) -> Arc<dyn ClientCertVerifier> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        std::fs::write(&path, ca_pem).unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        verifier(&path, &names, provider).unwrap()
    }

    #[test]
    fn only_the_named_client_of_the_ca_is_let_in() {
        let (ca_pem, issuer) = ca("webhook clients");
        let (_, stranger) = ca("someone else");
        let verifier = verifier_for(&ca_pem, &["kube-apiserver-webhook-client"]);
        let now = UnixTime::now();
        let apiserver = client("kube-apiserver-webhook-client", &issuer);
        assert!(verifier.verify_client_cert(&apiserver, &[], now).is_ok());
        // Same CA, another name (the CA also issues other clients' certificates).
        let kubelet = client("kube-apiserver-kubelet-client", &issuer);
        assert!(verifier.verify_client_cert(&kubelet, &[], now).is_err());
        // The right name from another CA.
        let forged = client("kube-apiserver-webhook-client", &stranger);
        assert!(verifier.verify_client_cert(&forged, &[], now).is_err());
        // No names given: any client of the CA.
        let any = verifier_for(&ca_pem, &[]);
        assert!(any.verify_client_cert(&kubelet, &[], now).is_ok());
        assert!(any.client_auth_mandatory());
    }

    #[test]
    fn a_missing_or_empty_ca_is_named() {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let missing = verifier(
            std::path::Path::new("/nonexistent/ca.crt"),
            &[],
            provider.clone(),
        );
        assert!(
            matches!(&missing, Err(Error::ReadCa { path, .. }) if path == "/nonexistent/ca.crt")
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "not a certificate").unwrap();
        let empty = verifier(&dir.path().join("ca.crt"), &[], provider);
        assert!(matches!(empty, Err(Error::NoCa { .. })));
        assert!(
            Error::NoCa { path: "x".into() }
                .to_string()
                .contains("--webhook-client-ca")
        );
    }
}
