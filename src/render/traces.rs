//! Clair's `trace` section from a resource's `tracing`: an OTLP exporter over HTTP or gRPC,
//! its sampling probability and the headers of a Secret. The section reaches the pods as a
//! generated drop-in placed before the user's, so a drop-in of theirs still has the last word.
//!
//! Two rules of Clair 4.9 shape it (`introspection/server.go`, `config/tls.go`): without a
//! `probability` Clair samples nothing (it sets no propagator, so no caller's trace context
//! ever asks), so one is always written; and a `client_tls` block loads a client certificate
//! even when only `root_ca` is set, so none is written: over `https://` Go's system roots are
//! used, which include `pod.caBundle` (mounted where `SSL_CERT_DIR` points).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use serde_json::{Value, json};

use crate::api::{OtlpProtocol, TracingSpec};

/// The sampling ratio when the spec names none.
pub const DEFAULT_SAMPLING_RATIO: f64 = 0.1;
/// Bounds on the headers Secret: a tenant writes it, the operator copies it into every pod's
/// config.
pub const MAX_HEADERS: usize = 32;
pub const MAX_HEADER_VALUE_BYTES: usize = 4096;

/// The exporter's settings, checked: what Clair's OTLP client is given.
#[derive(Clone, Debug, PartialEq)]
pub struct Exporter {
    pub protocol: OtlpProtocol,
    /// `host:port` (Clair's `endpoint` is not a URL).
    pub endpoint: String,
    /// `http://`: no TLS.
    pub insecure: bool,
    /// Over HTTP, the endpoint's path with `/v1/traces` appended, when it has one (without,
    /// Clair's default `/v1/traces`).
    pub url_path: Option<String>,
    pub probability: f64,
}

/// A service's base URL, as OTLP reads one (`OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `spec.tracing.endpoint`) and KEDA a Prometheus address: `http://` or `https://`, a host,
/// and no user, query or fragment, which a client appending its own path would never send
/// as such. `field` names the setting in errors, `example` a good value, `headers` where
/// credentials go instead.
pub fn base_url(text: &str, field: &str, example: &str, headers: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text)
        .map_err(|e| format!("{field}: {text:?} is not a URL ({e}), for example {example}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{field}: scheme {}: is not served; use http:// (no TLS) or https://, for example {example}",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "{field}: holds a user or password; put credentials in {headers}"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "{field}: a query or fragment is not sent; remove it (headers go in {headers})"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{field}: names no host, for example {example}"));
    }
    Ok(url)
}

/// Checks what the spec alone decides (the webhook and both controllers ask this): the
/// endpoint and the ratio. Each error names the field and the fix.
pub fn exporter(spec: &TracingSpec) -> Result<Exporter, String> {
    let protocol = spec.protocol.unwrap_or_default();
    let field = "spec.tracing.endpoint";
    let example = match protocol {
        OtlpProtocol::Http => "http://collector.observability:4318",
        OtlpProtocol::Grpc => "http://collector.observability:4317",
    };
    let url = base_url(&spec.endpoint, field, example, "spec.tracing.headersSecret")?;
    let insecure = url.scheme() == "http";
    let host = url.host_str().unwrap_or_default();
    let Some(port) = url
        .port_or_known_default()
        .filter(|_| names_a_port(&spec.endpoint))
    else {
        return Err(format!(
            "{field}: name the collector's port, for example {example}"
        ));
    };
    let path = url.path();
    let url_path = match (protocol, path) {
        (_, "" | "/") => None,
        // A base, as `OTEL_EXPORTER_OTLP_ENDPOINT` is (and `--otlp-endpoint` for the operator).
        (OtlpProtocol::Http, path) => Some(format!("{}/v1/traces", path.trim_end_matches('/'))),
        (OtlpProtocol::Grpc, path) => {
            return Err(format!(
                "{field}: path {path} cannot be sent over gRPC; remove it, or use protocol http"
            ));
        }
    };
    let probability = match &spec.sampling_ratio {
        None => DEFAULT_SAMPLING_RATIO,
        Some(text) => text
            .parse::<f64>()
            .ok()
            .filter(|p| (0.0..=1.0).contains(p))
            .ok_or_else(|| {
                format!(
                    "spec.tracing.samplingRatio: {text:?} is not a decimal from 0 to 1, for example 0.05"
                )
            })?,
    };
    Ok(Exporter {
        protocol,
        endpoint: format!("{host}:{port}"),
        insecure,
        url_path,
        probability,
    })
}

/// Whether the URL's authority ends in `:PORT` (`Url` forgets a port that is the scheme's
/// default, and a collector's port is seldom that: one left out is a mistake, not 80).
fn names_a_port(endpoint: &str) -> bool {
    let authority = endpoint.split_once("://").map_or("", |(_, rest)| rest);
    let authority = authority.split(['/', '?', '#']).next().unwrap_or_default();
    authority
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
}

/// Headers the transports set themselves (gRPC drops them silently, HTTP would send two).
fn reserved(name: &str) -> bool {
    matches!(
        name,
        "content-type"
            | "content-length"
            | "content-encoding"
            | "host"
            | "te"
            | "connection"
            | "user-agent"
    ) || name.starts_with("grpc-")
}

/// The headers from the data of the Secret `name`: each key a header name, each value its
/// value, both checked as HTTP allows them (a tenant writes them). Messages quote no value.
pub fn headers(
    name: &str,
    data: &BTreeMap<String, ByteString>,
) -> Result<BTreeMap<String, String>, String> {
    let field = format!("spec.tracing.headersSecret (Secret {name})");
    if data.len() > MAX_HEADERS {
        return Err(format!(
            "{field}: {} keys; at most {MAX_HEADERS} headers are sent",
            data.len()
        ));
    }
    let mut headers = BTreeMap::new();
    for (key, ByteString(value)) in data {
        let header = key.to_ascii_lowercase();
        if http::HeaderName::from_bytes(key.as_bytes()).is_err() || reserved(&header) {
            return Err(format!(
                "{field}: key {key} cannot be sent as a header (the transport sets it, or it is no header name)"
            ));
        }
        if value.len() > MAX_HEADER_VALUE_BYTES {
            return Err(format!(
                "{field}: the value of {key} is {} bytes; at most {MAX_HEADER_VALUE_BYTES}",
                value.len()
            ));
        }
        let text = std::str::from_utf8(value)
            .ok()
            .filter(|v| http::HeaderValue::from_str(v).is_ok())
            .ok_or_else(|| {
                format!(
                    "{field}: the value of {key} is not a header value (printable text on one line)"
                )
            })?;
        if headers.insert(header, text.to_string()).is_some() {
            return Err(format!(
                "{field}: key {key} names a header another key names too (header names ignore case)"
            ));
        }
    }
    Ok(headers)
}

/// Clair's `trace` section.
pub fn section(exporter: &Exporter, headers: &BTreeMap<String, String>) -> Value {
    let mut transport = json!({
        "endpoint": exporter.endpoint,
        "insecure": exporter.insecure,
    });
    if !headers.is_empty() {
        transport["headers"] = json!(headers);
    }
    if let Some(path) = &exporter.url_path {
        transport["url_path"] = json!(path);
    }
    json!({
        "trace": {
            "name": "otlp",
            "probability": exporter.probability,
            "otlp": { exporter.protocol.to_string(): transport },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(endpoint: &str) -> TracingSpec {
        TracingSpec {
            endpoint: endpoint.into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_http_url_becomes_host_port_without_tls_and_a_default_ratio() {
        let e = exporter(&spec("http://jaeger.observability:4318")).unwrap();
        assert_eq!(e.endpoint, "jaeger.observability:4318");
        assert!(e.insecure);
        assert_eq!(e.url_path, None);
        assert_eq!(e.probability, DEFAULT_SAMPLING_RATIO);
        let section = section(&e, &BTreeMap::new());
        assert_eq!(
            section,
            json!({"trace": {"name": "otlp", "probability": 0.1,
                "otlp": {"http": {"endpoint": "jaeger.observability:4318", "insecure": true}}}})
        );
    }

    #[test]
    fn https_grpc_ipv6_paths_and_ratios() {
        let mut grpc = spec("https://[fd00::1]:4317");
        grpc.protocol = Some(OtlpProtocol::Grpc);
        grpc.sampling_ratio = Some("1".into());
        let e = exporter(&grpc).unwrap();
        assert_eq!(
            (e.endpoint.as_str(), e.insecure, e.probability),
            ("[fd00::1]:4317", false, 1.0)
        );
        let s = section(&e, &BTreeMap::from([("x-api-key".into(), "k".into())]));
        assert_eq!(s["trace"]["otlp"]["grpc"]["headers"]["x-api-key"], "k");

        let e = exporter(&spec("https://otlp.example:443/otlp/")).unwrap();
        assert_eq!(e.endpoint, "otlp.example:443");
        assert_eq!(e.url_path.as_deref(), Some("/otlp/v1/traces"));
    }

    #[test]
    fn what_clair_cannot_send_to_is_refused_with_the_field_and_the_fix() {
        let refused = |endpoint: &str, protocol: Option<OtlpProtocol>, ratio: Option<&str>| {
            let mut s = spec(endpoint);
            s.protocol = protocol;
            s.sampling_ratio = ratio.map(str::to_string);
            exporter(&s).unwrap_err()
        };
        for (endpoint, protocol, ratio, says) in [
            ("collector:4318", None, None, "scheme collector"),
            ("grpc://collector:4317", None, None, "use http://"),
            ("http://collector", None, None, "name the collector's port"),
            ("http://user:pw@collector:4318", None, None, "headersSecret"),
            ("http://collector:4318/?a=b", None, None, "query"),
            (
                "http://collector:4317/v1/traces",
                Some(OtlpProtocol::Grpc),
                None,
                "over gRPC",
            ),
            ("http://collector:4318", None, Some("1.5"), "samplingRatio"),
            ("http://collector:4318", None, Some("NaN"), "samplingRatio"),
        ] {
            let message = refused(endpoint, protocol, ratio);
            assert!(message.contains(says), "{endpoint}: {message}");
            assert!(message.starts_with("spec.tracing."), "{message}");
        }
        // A port that is the scheme's default is still named.
        assert_eq!(
            exporter(&spec("http://collector:80")).unwrap().endpoint,
            "collector:80"
        );
        assert_eq!(
            exporter(&spec("https://[::1]:443")).unwrap().endpoint,
            "[::1]:443"
        );
    }

    #[test]
    fn header_secrets_are_checked_and_their_values_never_quoted() {
        let data = |pairs: &[(&str, &[u8])]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                .collect::<BTreeMap<_, _>>()
        };
        let ok = headers("h", &data(&[("X-Scope-OrgID", b"tenant-a")])).unwrap();
        assert_eq!(ok["x-scope-orgid"], "tenant-a");
        for bad in [
            data(&[("bad key", b"v")]),
            data(&[("Content-Type", b"text/plain")]),
            data(&[("grpc-timeout", b"1S")]),
            data(&[("X-Key", b"a"), ("x-key", b"b")]),
            data(&[("x-key", b"top-secret\r\nInjected: 1")]),
            data(&[("x-key", &[0xff, 0xfe])]),
            data(&[("x-key", &[b'a'; MAX_HEADER_VALUE_BYTES + 1])]),
        ] {
            let message = headers("h", &bad).unwrap_err();
            assert!(message.contains("Secret h"), "{message}");
            assert!(!message.contains("top-secret"), "{message}");
        }
        let many: BTreeMap<String, ByteString> = (0..=MAX_HEADERS)
            .map(|i| (format!("x-{i}"), ByteString(b"v".to_vec())))
            .collect();
        assert!(headers("h", &many).unwrap_err().contains("at most"));
    }
}
