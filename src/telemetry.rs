//! The operator's own traces: every reconcile is a span (`reconcile`, with the resource's
//! `kind`, `namespace`, `name` and the `phase` it decided, under kube-runtime's `reconciling
//! object`), exported over OTLP/HTTP to the collector `--otlp-endpoint` names. Off unless it
//! is set. Of the OpenTelemetry SDK's environment variables, `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_TRACES_SAMPLER` (with `_ARG`) and `OTEL_RESOURCE_ATTRIBUTES` apply; the endpoint,
//! protocol (always OTLP/HTTP with protobuf) and timeout are set here. Export failures are
//! logged by the SDK (targets `opentelemetry*`), which are never exported themselves.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// The service name the operator's spans carry.
pub const SERVICE_NAME: &str = "clair-operator";
/// How long one export may take before it is dropped (the collector is not worth holding
/// reconciles' memory for).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OTLP/HTTP traces URL of the collector at `base` (`http://collector:4318` →
/// `http://collector:4318/v1/traces`, a path kept as a prefix), as the OpenTelemetry
/// specification reads `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub fn traces_url(base: &str) -> Result<url::Url, String> {
    let mut url = crate::render::traces::base_url(
        base,
        "--otlp-endpoint (OTEL_EXPORTER_OTLP_ENDPOINT)",
        "http://collector.observability:4318",
        "OTEL_EXPORTER_OTLP_HEADERS",
    )?;
    let path = format!("{}/v1/traces", url.path().trim_end_matches('/'));
    url.set_path(&path);
    Ok(url)
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// For people.
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// Log lines on standard output in `format` (filtered by `RUST_LOG`, `info` by default),
/// and, with `traces` (from [`traces_url`]), the reconciles' spans exported there, their HTTP
/// requests run on `runtime`. Keep what it returns until the end: dropping it sends the
/// spans still buffered.
pub fn init_logs(
    format: LogFormat,
    traces: Option<&url::Url>,
    runtime: &tokio::runtime::Handle,
) -> Result<Option<Exporting>, String> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let lines = tracing_subscriber::fmt::layer()
        // Colour codes only for a terminal: in a pod they would litter `kubectl logs`.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    let lines = match format {
        LogFormat::Text => lines.with_filter(filter).boxed(),
        // One JSON object per line, the reconcile span's fields included.
        LogFormat::Json => lines
            .json()
            .with_current_span(true)
            .with_filter(filter)
            .boxed(),
    };
    let (spans, exporting) = match traces {
        Some(url) => {
            let (layer, exporting) = layer(url, runtime.clone())?;
            (Some(layer), Some(exporting))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(lines)
        .with(spans)
        .try_init()
        .map_err(|e| format!("cannot set up logging: {e}"))?;
    if let Some(url) = traces {
        tracing::info!(%url, "exporting reconcile spans over OTLP");
    }
    Ok(exporting)
}

/// Exporting spans until dropped: then what is buffered is sent.
pub struct Exporting(SdkTracerProvider);

impl Drop for Exporting {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("clair-operator: the last spans were not exported: {e}");
        }
    }
}

/// A layer exporting the operator's spans to `url` (from [`traces_url`]). Its HTTP requests
/// run on `runtime`: the SDK's batch exporter runs on a thread of its own, and the HTTP
/// client needs the runtime's reactor.
pub fn layer<S>(
    url: &url::Url,
    runtime: tokio::runtime::Handle,
) -> Result<(impl Layer<S> + Send + Sync + 'static, Exporting), String>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync + 'static,
{
    let tls =
        crate::database::tls::client_config(crate::database::connstring::TlsMode::VerifyFull, &[])?
            .ok_or("no TLS client configuration")?;
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(Some(EXPORT_TIMEOUT));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    let client = OnRuntime {
        client: opentelemetry_http::hyper::HyperClient::new(connector, EXPORT_TIMEOUT, None),
        runtime,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url.as_str())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot export traces to {url}: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(SERVICE_NAME)
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build();
    let tracer = provider.tracer(SERVICE_NAME);
    // The reconciles and what the controllers log in them; not the HTTP and TLS crates'
    // own spans.
    let spans = Targets::new()
        .with_target(env!("CARGO_CRATE_NAME"), tracing::Level::INFO)
        .with_target("kube_runtime", tracing::Level::INFO);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(spans);
    Ok((layer, Exporting(provider)))
}

/// An HTTP client whose requests run on a Tokio runtime, whoever polls them.
#[derive(Debug)]
struct OnRuntime {
    client: opentelemetry_http::hyper::HyperClient<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    >,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await
            .map_err(|e| Box::new(e) as HttpError)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_a_base_url_with_v1_traces_appended() {
        let url = |base: &str| traces_url(base).map(|u| u.to_string());
        assert_eq!(
            url("http://jaeger.observability:4318").unwrap(),
            "http://jaeger.observability:4318/v1/traces"
        );
        assert_eq!(
            url("https://otlp.example/tenant-a/").unwrap(),
            "https://otlp.example/tenant-a/v1/traces"
        );
        assert_eq!(
            url("http://[fd00::1]:4318").unwrap(),
            "http://[fd00::1]:4318/v1/traces"
        );
        for (bad, says) in [
            ("jaeger:4318", "use http://"),
            ("grpc://jaeger:4317", "use http://"),
            ("http://jaeger:4318/?x=1", "OTEL_EXPORTER_OTLP_HEADERS"),
            ("not a url", "not a URL"),
        ] {
            let message = url(bad).unwrap_err();
            assert!(message.contains(says), "{bad}: {message}");
            assert!(message.starts_with("--otlp-endpoint"), "{message}");
        }
    }
}
