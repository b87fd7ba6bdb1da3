//! One HTTPS request by hand, as a client that is not the apiserver would send it: to an
//! address the harness owns (loopback, the node, a pod), trusting one CA, with or without a
//! client certificate. For the tests that forge admission reviews.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the server did with the request.
#[derive(Debug)]
pub enum Answer {
    /// It answered: the status code and the body.
    Response(u16, String),
    /// The connection or the TLS handshake was refused, or closed before an answer: why.
    Refused(String),
}

/// A client certificate and its key, PEM.
pub struct Identity<'a> {
    pub cert: &'a str,
    pub key: &'a str,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the CA or client certificate given is not usable: {0}")]
    Setup(String),
}

/// Where a request comes from and the length it declares: by default the system's choice
/// of source address and the body's own length.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sender {
    /// A loopback address of the test's own, to be a peer apart from the apiserver.
    pub from: Option<std::net::IpAddr>,
    /// A `Content-Length` other than the body's (the body is then sent only if the server
    /// reads on).
    pub declared: Option<usize>,
}

/// POSTs `body` (JSON) to `https://{server_name}{path}` at `address`, trusting `ca_pem`
/// alone. Bounded: 10 s in all.
pub async fn post(
    address: SocketAddr,
    server_name: &str,
    ca_pem: &str,
    identity: Option<Identity<'_>>,
    path: &str,
    body: &str,
) -> Result<Answer, Error> {
    post_as(
        Sender::default(),
        address,
        server_name,
        ca_pem,
        identity,
        path,
        body,
    )
    .await
}

/// [`post`], from `sender`.
pub async fn post_as(
    sender: Sender,
    address: SocketAddr,
    server_name: &str,
    ca_pem: &str,
    identity: Option<Identity<'_>>,
    path: &str,
    body: &str,
) -> Result<Answer, Error> {
    let setup = |e: &dyn std::fmt::Display| Error::Setup(e.to_string());
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(certificate.map_err(|e| setup(&e))?)
            .map_err(|e| setup(&e))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| setup(&e))?
        .with_root_certificates(roots);
    let config = match identity {
        Some(identity) => {
            let chain = CertificateDer::pem_slice_iter(identity.cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| setup(&e))?;
            let key =
                PrivateKeyDer::from_pem_slice(identity.key.as_bytes()).map_err(|e| setup(&e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| setup(&e))?
        }
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| setup(&e))?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {server_name}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        sender.declared.unwrap_or(body.len())
    );
    let exchange = async {
        let tcp = match sender.from {
            Some(from) => {
                let socket = match from {
                    std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                    std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
                };
                socket.bind((from, 0).into())?;
                socket.connect(address).await?
            }
            None => tokio::net::TcpStream::connect(address).await?,
        };
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await?;
        tls.write_all(head.as_bytes()).await?;
        if sender.declared.is_none() {
            tls.write_all(body.as_bytes()).await?;
        }
        let mut answer = Vec::new();
        tls.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = match tokio::time::timeout(Duration::from_secs(10), exchange).await {
        Err(_) => return Ok(Answer::Refused("no answer within 10 s".to_string())),
        Ok(Err(e)) => return Ok(Answer::Refused(e.to_string())),
        Ok(Ok(answer)) => String::from_utf8_lossy(&answer).into_owned(),
    };
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        return Ok(Answer::Refused(format!(
            "closed before an answer ({} bytes)",
            answer.len()
        )));
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Ok(Answer::Response(status, body.to_string()))
}
