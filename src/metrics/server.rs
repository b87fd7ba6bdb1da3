//! The plain-HTTP server of `/metrics` (OpenMetrics text), `/healthz` (every task the
//! operator started still runs) and `/readyz` (and its caches are synced and its webhook
//! serves). Every replica serves them, leader or not.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::Metrics;
use super::health::Health;

/// What Prometheus asks for first.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The older text format, for clients that do not ask for OpenMetrics (curl, promtool).
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(live))
        .route("/readyz", get(ready))
        .with_state(Shared { metrics, health })
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

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics, health))
        .with_graceful_shutdown(shutdown)
        .await
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
