//! The operator's connection to the Kubernetes API: kube's client stack, over HTTP/2.
//!
//! kube's own `ClientBuilder` offers the apiserver HTTP/1.1 only, so every request and watch
//! in flight holds a TCP and TLS connection of its own, with its buffers: at 100 Clairs the
//! operator held 147 connections and about 5.5 MiB of their buffers (docs/performance.md).
//! Offered HTTP/2 by ALPN (as client-go does), the apiserver multiplexes them all on one
//! connection. A connection that dies silently is found by pings, every 30 s and answered
//! within 15 s (client-go's `ReadIdleTimeout` and `PingTimeout`). An apiserver or proxy that
//! does not speak HTTP/2 still gets HTTP/1.1.
//!
//! An HTTP/2 connection carries a bounded number of streams at once, and every watch is a
//! stream for as long as it runs: with `--namespaces` each namespace brings some forty
//! watches, and with three namespaces on one connection every further request (a Lease
//! renewal among them) waited for a stream that never freed: the leader lost its Lease and
//! no Clair was reconciled. Requests are therefore spread
//! ([`Spread`]): each goes to the first connection with fewer than [`STREAMS_PER_CONNECTION`]
//! streams open, a new connection opening only when those are full, so one connection serves
//! until it is needed.
//!
//! The stack is kube's own otherwise: the cluster's address, its credentials (tokens re-read
//! as they rotate), kube's retry of 429 and 503, the kubeconfig's extra headers, the connect
//! timeout. Left out: kube's debug-level HTTP spans, and its socket read and write timeouts
//! (the pings find a stalled connection; one stream cannot time out the others' socket). A
//! kubeconfig with a proxy gets kube's default client unchanged.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::Config;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use tower::retry::RetryLayer;
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// What the builder wraps: kube's default client has the same type, so the two are one.
pub type ApiService = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// How often an idle HTTP/2 connection is pinged, and how long an answer may take.
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);
/// A connection left idle this long is closed (kube's default pool has no timer: an idle
/// connection is only closed when the pool next looks at it).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Streams one connection carries before the next one is used: under the apiserver's
/// default limit of 250, with room for what a burst adds before it is counted.
pub const STREAMS_PER_CONNECTION: usize = 64;
/// Connections at most; past them a request goes to the least loaded one.
const MAX_CONNECTIONS: usize = 16;

type Http = hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, Body>;

/// Requests spread over connections by the streams each has open (see the module's doc).
/// Each [`Http`] client holds one HTTP/2 connection, opened on its first request.
#[derive(Clone)]
pub struct Spread {
    connections: Arc<Vec<(Http, Arc<AtomicUsize>)>>,
}

/// Which connection a request goes to, from the streams each has open: the first with room,
/// else the least loaded. Pure, for tests.
fn pick(open: &[usize], per_connection: usize) -> usize {
    open.iter()
        .position(|n| *n < per_connection)
        .or_else(|| {
            open.iter()
                .enumerate()
                .min_by_key(|(_, n)| **n)
                .map(|(i, _)| i)
        })
        .unwrap_or(0)
}

/// One open stream, counted until its response's body is gone (a watch's, when it ends).
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body holding its stream's count.
pub struct Counted {
    body: Incoming,
    _open: Open,
}

impl http_body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl tower::Service<Request<Body>> for Spread {
    type Response = Response<Counted>;
    type Error = hyper_util::client::legacy::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // A legacy client is always ready: it queues in its pool.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let open: Vec<usize> = self
            .connections
            .iter()
            .map(|(_, n)| n.load(Ordering::Relaxed))
            .collect();
        let (http, count) = &self.connections[pick(&open, STREAMS_PER_CONNECTION)];
        count.fetch_add(1, Ordering::Relaxed);
        let stream = Open(count.clone());
        let answer = http.request(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| Counted {
                body,
                _open: stream,
            }))
        })
    }
}

/// kube's `ClientBuilder` for `config`, over HTTP/2 where the apiserver offers it.
pub fn builder(config: Config) -> Result<ClientBuilder<ApiService>, kube::Error> {
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config);
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(config.connect_timeout);
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name.clone().try_into().map_err(|e| {
            kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
        })?;
        tls = tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let connector = tls.enable_all_versions().wrap_connector(tcp);
    let connections = (0..MAX_CONNECTIONS)
        .map(|_| {
            let http: Http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .timer(TokioTimer::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(IDLE_TIMEOUT)
                .http2_keep_alive_interval(PING_EVERY)
                .http2_keep_alive_timeout(PING_TIMEOUT)
                .http2_keep_alive_while_idle(true)
                .build(connector.clone());
            (http, Arc::new(AtomicUsize::new(0)))
        })
        .collect();
    let http = Spread {
        connections: Arc::new(connections),
    };
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then_some(RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http)
        .map_response(|response: Response<Counted>| {
            response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
            })
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_connection_serves_until_it_is_full() {
        assert_eq!(pick(&[0, 0, 0], 200), 0);
        assert_eq!(pick(&[199, 0, 0], 200), 0);
        assert_eq!(
            pick(&[200, 0, 0], 200),
            1,
            "the next opens only when needed"
        );
        assert_eq!(pick(&[200, 200, 37], 200), 2);
        assert_eq!(
            pick(&[120, 200, 3], 200),
            0,
            "the first with room, not the emptiest"
        );
        assert_eq!(pick(&[250, 210, 230], 200), 1, "all full: the least loaded");
    }
}
