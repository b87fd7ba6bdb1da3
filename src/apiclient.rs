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
//! The stack is kube's own otherwise: the cluster's address, its credentials (tokens re-read
//! as they rotate), kube's retry of 429 and 503, the kubeconfig's extra headers, the connect
//! timeout. Left out: kube's debug-level HTTP spans, and its socket read and write timeouts
//! (the pings find a stalled connection; one stream cannot time out the others' socket). A
//! kubeconfig with a proxy gets kube's default client unchanged.

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
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(IDLE_TIMEOUT)
        .http2_keep_alive_interval(PING_EVERY)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(connector);
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
        .map_response(|response: Response<Incoming>| {
            response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
            })
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}
