//! The server of `/metrics` (OpenMetrics text), `/healthz` (every task the operator
//! started still runs) and `/readyz` (and its caches are synced and its webhook serves).
//! Every replica serves them, leader or not. Secure by default: over TLS, each scrape
//! reviewed by the apiserver ([`super::access`]); the health endpoints answer the kubelet
//! unauthenticated (they tell only "ok" or which of the operator's own tasks is not). Plain
//! HTTP to anyone only when asked (`--metrics-insecure`, a local run).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum_server::tls_rustls::RustlsConfig;

use super::Metrics;
use super::access::{Access, Refused};
use super::health::Health;

/// How long a client has for its TLS handshake and then its request's headers.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);

/// How the server is reached.
#[derive(Clone, Debug)]
pub enum Serving {
    /// Plain HTTP, metrics to anyone (`--metrics-insecure`).
    Insecure,
    /// TLS with `tls`, each scrape of `/metrics` reviewed by `access`.
    Secure {
        tls: RustlsConfig,
        access: Arc<Access>,
    },
}

/// What Prometheus asks for first.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The older text format, for clients that do not ask for OpenMetrics (curl, promtool).
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    /// Who reviews scrapers; none: anyone may scrape.
    access: Option<Arc<Access>>,
}

fn router(shared: Shared) -> Router {
    let reviewed = axum::middleware::from_fn_with_state(shared.clone(), reviewed);
    Router::new()
        .route("/metrics", get(scrape).layer(reviewed))
        .route("/healthz", get(live))
        .route("/readyz", get(ready))
        .with_state(shared)
}

/// The request, if its caller may read the metrics; else 401, 403 or 503, counted.
async fn reviewed(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let Some(access) = &shared.access else {
        return next.run(request).await;
    };
    let refused = match access.check(request.headers()).await {
        Ok(()) => return next.run(request).await,
        Err(refused) => refused,
    };
    shared
        .metrics
        .scrape_refusals
        .get_or_create(&super::RefusalLabels {
            reason: refused.to_string(),
        })
        .inc();
    match refused {
        Refused::Unauthenticated => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a bearer token the apiserver authenticates is needed\n",
        )
            .into_response(),
        Refused::Forbidden => (
            StatusCode::FORBIDDEN,
            "this user may not get the non-resource URL /metrics: bind it the ClusterRole clair-operator-metrics-reader\n",
        )
            .into_response(),
        Refused::Unavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "5")],
            "the token cannot be reviewed now\n",
        )
            .into_response(),
    }
}

/// OpenMetrics to those who ask for it (Prometheus does), the 0.0.4 text format otherwise.
async fn scrape(State(shared): State<Shared>, headers: HeaderMap) -> impl IntoResponse {
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let text = shared.metrics.encode();
    if openmetrics {
        ([(header::CONTENT_TYPE, OPENMETRICS)], text)
    } else {
        (
            [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
            prometheus_text(&text),
        )
    }
}

/// The 0.0.4 text format of an OpenMetrics exposition as `prometheus-client` writes it
/// (no exemplars, no `_created`): a counter's family is named with its `_total` suffix,
/// and the `# UNIT` and `# EOF` lines go.
pub fn prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut text = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => text.push_str(&line),
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

fn verdict(result: Result<(), Vec<String>>, what: &str) -> (StatusCode, String) {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(parts) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what}: {}\n", parts.join(", ")),
        ),
    }
}

async fn live(State(shared): State<Shared>) -> impl IntoResponse {
    verdict(shared.health.live(), "not running")
}

async fn ready(State(shared): State<Shared>) -> impl IntoResponse {
    verdict(shared.health.ready(), "not ready")
}

/// Serves as `serving` says until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    serving: Serving,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (tls, access) = match serving {
        Serving::Insecure => {
            let router = router(Shared {
                metrics,
                health,
                access: None,
            });
            return axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await;
        }
        Serving::Secure { tls, access } => (tls, access),
    };
    let router = router(Shared {
        metrics,
        health,
        access: Some(access),
    });
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(Some(Duration::from_secs(5)));
    });
    let acceptor =
        axum_server::tls_rustls::RustlsAcceptor::new(tls).handshake_timeout(HANDSHAKE_DEADLINE);
    let mut server = axum_server::from_tcp(listener.into_std()?)?
        .acceptor(acceptor)
        .handle(handle);
    server
        .http_builder()
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HANDSHAKE_DEADLINE);
    server.serve(router.into_make_service()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_keep_their_total_name_in_the_old_text_format() {
        let openmetrics = "# HELP a_reconciles Reconciles.\n# TYPE a_reconciles counter\na_reconciles_total{kind=\"Clair\"} 1\n# HELP a_took Took.\n# TYPE a_took histogram\n# UNIT a_took seconds\na_took_sum 0.5\n# EOF\n";
        assert_eq!(
            prometheus_text(openmetrics),
            "# HELP a_reconciles_total Reconciles.\n# TYPE a_reconciles_total counter\na_reconciles_total{kind=\"Clair\"} 1\n# HELP a_took Took.\n# TYPE a_took histogram\na_took_sum 0.5\n"
        );
    }
}
