//! Clair's config rules for the keys the operator depends on (see
//! `../shared/notes/clair-config.md`, checked against Clair v4.9.0): unknown keys are fatal
//! (Clair ≥ 4.7 decodes with `DisallowUnknownFields`, matching keys case-insensitively),
//! scalar types as Go's JSON decoder takes them, and the keys each mode requires.

use serde_json::{Map, Value};

use crate::api::ServiceKind;

/// One finding: an error stops the config from being used, a warning does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Dotted path of the field, for example `matcher.indexer_addr`.
    pub path: String,
    pub message: String,
    pub warning: bool,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    String,
    Bool,
    Int,
    Float,
    Duration,
    /// `log_level`: one of [`LOG_LEVELS`], any case.
    LogLevel,
    /// Standard, padded base64 (Go's `base64.StdEncoding`).
    Base64,
    /// A list of strings (a bare string is a decoding error in Go).
    Strings,
    /// A mapping of strings to strings.
    StringMap,
    /// An HTTP header map: strings to lists of strings.
    Headers,
    /// A free-form mapping (updater and matcher configs, scanner configs).
    Mapping,
    Section(&'static [Field]),
}

type Field = (&'static str, Kind);

const TLS: &[Field] = &[
    ("root_ca", Kind::String),
    ("cert", Kind::String),
    ("key", Kind::String),
];

const SCANNER: &[Field] = &[
    ("package", Kind::Mapping),
    ("dist", Kind::Mapping),
    ("repo", Kind::Mapping),
];

const INDEXER: &[Field] = &[
    ("scanner", Kind::Section(SCANNER)),
    ("connstring", Kind::String),
    ("scanlock_retry", Kind::Int),
    ("layer_scan_concurrency", Kind::Int),
    ("index_report_request_concurrency", Kind::Int),
    ("migrations", Kind::Bool),
    ("airgap", Kind::Bool),
];

const MATCHER: &[Field] = &[
    ("connstring", Kind::String),
    ("indexer_addr", Kind::String),
    ("period", Kind::Duration),
    ("update_retention", Kind::Int),
    ("max_conn_pool", Kind::Int),
    ("cache_age", Kind::Duration),
    ("migrations", Kind::Bool),
    ("disable_updaters", Kind::Bool),
    ("disable_enrichment", Kind::Bool),
];

const MATCHERS: &[Field] = &[("config", Kind::Mapping), ("names", Kind::Strings)];

const UPDATERS: &[Field] = &[
    ("filter", Kind::String),
    ("config", Kind::Mapping),
    ("sets", Kind::Strings),
];

const WEBHOOK: &[Field] = &[
    ("headers", Kind::Headers),
    ("target", Kind::String),
    ("callback", Kind::String),
    ("signed", Kind::Bool),
];

const EXCHANGE: &[Field] = &[
    ("name", Kind::String),
    ("type", Kind::String),
    ("durability", Kind::Bool),
    ("auto_delete", Kind::Bool),
];

const AMQP: &[Field] = &[
    ("tls", Kind::Section(TLS)),
    ("exchange", Kind::Section(EXCHANGE)),
    ("routing_key", Kind::String),
    ("callback", Kind::String),
    ("uris", Kind::Strings),
    ("rollup", Kind::Int),
    ("direct", Kind::Bool),
];

const LOGIN: &[Field] = &[("login", Kind::String), ("passcode", Kind::String)];

const STOMP: &[Field] = &[
    ("tls", Kind::Section(TLS)),
    ("user", Kind::Section(LOGIN)),
    ("callback", Kind::String),
    ("destination", Kind::String),
    ("uris", Kind::Strings),
    ("rollup", Kind::Int),
    ("direct", Kind::Bool),
];

const NOTIFIER: &[Field] = &[
    ("webhook", Kind::Section(WEBHOOK)),
    ("amqp", Kind::Section(AMQP)),
    ("stomp", Kind::Section(STOMP)),
    ("connstring", Kind::String),
    ("indexer_addr", Kind::String),
    ("matcher_addr", Kind::String),
    ("poll_interval", Kind::Duration),
    ("delivery_interval", Kind::Duration),
    ("disable_summary", Kind::Bool),
    ("migrations", Kind::Bool),
];

const PSK: &[Field] = &[("key", Kind::Base64), ("iss", Kind::Strings)];

const KEYSERVER: &[Field] = &[("api", Kind::String), ("intraservice", Kind::Base64)];

const AUTH: &[Field] = &[
    ("psk", Kind::Section(PSK)),
    ("keyserver", Kind::Section(KEYSERVER)),
];

/// OTLP exporters: the common fields, plus `url_path` over HTTP or `reconnect` and
/// `service_config` over gRPC (Go embeds the common struct, so the keys sit side by side).
const OTLP_HTTP: &[Field] = &[
    ("compression", Kind::Int),
    ("endpoint", Kind::String),
    ("headers", Kind::StringMap),
    ("insecure", Kind::Bool),
    ("timeout", Kind::Duration),
    ("client_tls", Kind::Section(TLS)),
    ("url_path", Kind::String),
];

const OTLP_GRPC: &[Field] = &[
    ("compression", Kind::Int),
    ("endpoint", Kind::String),
    ("headers", Kind::StringMap),
    ("insecure", Kind::Bool),
    ("timeout", Kind::Duration),
    ("client_tls", Kind::Section(TLS)),
    ("reconnect", Kind::Duration),
    ("service_config", Kind::String),
];

const OTLP: &[Field] = &[
    ("http", Kind::Section(OTLP_HTTP)),
    ("grpc", Kind::Section(OTLP_GRPC)),
];

const JAEGER_AGENT: &[Field] = &[("endpoint", Kind::String)];

const JAEGER_COLLECTOR: &[Field] = &[
    ("username", Kind::String),
    ("password", Kind::String),
    ("endpoint", Kind::String),
];

const JAEGER: &[Field] = &[
    ("tags", Kind::StringMap),
    ("agent", Kind::Section(JAEGER_AGENT)),
    ("collector", Kind::Section(JAEGER_COLLECTOR)),
    ("service_name", Kind::String),
    ("buffer_max", Kind::Int),
];

const SENTRY: &[Field] = &[("dsn", Kind::String), ("environment", Kind::String)];

const TRACE: &[Field] = &[
    ("name", Kind::String),
    ("probability", Kind::Float),
    ("jaeger", Kind::Section(JAEGER)),
    ("otlp", Kind::Section(OTLP)),
    ("sentry", Kind::Section(SENTRY)),
];

const PROMETHEUS: &[Field] = &[("endpoint", Kind::String)];

const METRICS: &[Field] = &[
    ("name", Kind::String),
    ("prometheus", Kind::Section(PROMETHEUS)),
    ("otlp", Kind::Section(OTLP)),
];

const ROOT: &[Field] = &[
    ("tls", Kind::Section(TLS)),
    ("http_listen_addr", Kind::String),
    ("introspection_addr", Kind::String),
    ("log_level", Kind::LogLevel),
    ("indexer", Kind::Section(INDEXER)),
    ("matcher", Kind::Section(MATCHER)),
    ("matchers", Kind::Section(MATCHERS)),
    ("updaters", Kind::Section(UPDATERS)),
    ("notifier", Kind::Section(NOTIFIER)),
    ("auth", Kind::Section(AUTH)),
    ("trace", Kind::Section(TRACE)),
    ("metrics", Kind::Section(METRICS)),
];

const LOG_LEVELS: &[&str] = &[
    "info",
    "debug-color",
    "debug",
    "warn",
    "error",
    "fatal",
    "panic",
];

/// Every problem of `config` for a process in `mode`: what Go's decoder refuses (unknown keys,
/// wrong types), then the rules of Clair's `config.Validate`. Errors are what Clair would
/// refuse to start with; warnings are its lints.
pub fn validate(config: &Value, mode: ServiceKind) -> Vec<Problem> {
    let mut problems = Vec::new();
    let root = config.as_object().cloned().unwrap_or_default();
    check_section(&root, ROOT, "", &mut problems);
    if problems.iter().any(|p| !p.warning) {
        // Clair stops at the decoding error; the rules below assume well-typed values.
        return problems;
    }
    rules(&root, mode, &mut problems);
    lints(&root, mode, &mut problems);
    problems
}

fn warning(path: &str, message: impl Into<String>) -> Problem {
    Problem {
        path: path.to_string(),
        message: message.into(),
        warning: true,
    }
}

/// Clair's lints for the mode: they do not stop it, but usually mean a mistake.
fn lints(root: &Map<String, Value>, mode: ServiceKind, out: &mut Vec<Problem>) {
    let section = mode.as_str();
    let connstring = text(root, &format!("{section}.connstring"));
    if connstring.contains("://") && !connstring.starts_with("postgresql://") {
        out.push(warning(
            &format!("{section}.connstring"),
            "use the postgresql:// scheme (or key=value form)",
        ));
    }
    if at(root, "matcher.max_conn_pool").is_some() {
        out.push(warning(
            "matcher.max_conn_pool",
            "deprecated: set pool_max_conns in the connstring",
        ));
    }
    if at(root, "auth.keyserver").is_some() {
        out.push(warning(
            "auth.keyserver",
            "deprecated and ignored: use auth.psk",
        ));
    }
    match mode {
        ServiceKind::Matcher => {
            if let Some(period) = at(root, "matcher.period").and_then(Value::as_str)
                && parse_go_duration(period).is_ok_and(|s| s != 0.0 && s < 6.0 * 3600.0)
            {
                out.push(warning(
                    "matcher.period",
                    "updater period is very aggressive: most sources update daily",
                ));
            }
            if at(root, "matcher.update_retention")
                .and_then(Value::as_i64)
                .is_some_and(|n| n < 0)
            {
                out.push(warning(
                    "matcher.update_retention",
                    "negative: old vulnerability data is never deleted",
                ));
            }
        }
        ServiceKind::Notifier => {
            let deliveries = ["webhook", "amqp", "stomp"]
                .iter()
                .filter(|d| at(root, &format!("notifier.{d}")).is_some())
                .count();
            if deliveries == 0 && at(root, "notifier").is_some() {
                out.push(warning(
                    "notifier",
                    "no delivery (webhook, amqp or stomp): the notifier will not start",
                ));
            }
            if deliveries > 1 {
                out.push(warning(
                    "notifier",
                    "more than one delivery: only one is used (webhook, then amqp, then stomp)",
                ));
            }
            if flag(root, "notifier.webhook.signed") {
                out.push(warning("notifier.webhook.signed", "deprecated"));
            }
            if flag(root, "notifier.disable_summary") {
                out.push(warning(
                    "notifier.disable_summary",
                    "significantly increases memory use",
                ));
            }
        }
        ServiceKind::Indexer => {}
    }
}

/// The value at a dotted path, matching keys as Go does.
fn at<'a>(root: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let first = lookup(root, parts.next()?)?;
    parts
        .try_fold(first, |value, key| lookup(value.as_object()?, key))
        .filter(|v| !v.is_null())
}

fn text<'a>(root: &'a Map<String, Value>, path: &str) -> &'a str {
    at(root, path).and_then(Value::as_str).unwrap_or_default()
}

fn flag(root: &Map<String, Value>, path: &str) -> bool {
    at(root, path).and_then(Value::as_bool).unwrap_or(false)
}

/// The checks of Clair's `validate` methods, in the modes where each runs.
fn rules(root: &Map<String, Value>, mode: ServiceKind, out: &mut Vec<Problem>) {
    let listen = text(root, "http_listen_addr");
    if !listen.is_empty()
        && let Err(message) = split_host_port(listen)
    {
        out.push(error("http_listen_addr", message));
    }
    // TLS blocks are checked in every mode. Whether the files exist is checked by Clair at
    // start-up, on the pod's filesystem, which the operator cannot see.
    for tls in [
        "tls",
        "notifier.amqp.tls",
        "notifier.stomp.tls",
        "trace.otlp.http.client_tls",
        "trace.otlp.grpc.client_tls",
        "metrics.otlp.http.client_tls",
        "metrics.otlp.grpc.client_tls",
    ] {
        if at(root, tls).is_some() {
            let cert = text(root, &format!("{tls}.cert"));
            let key = text(root, &format!("{tls}.key"));
            if cert.is_empty() != key.is_empty() {
                out.push(error(tls, "set both cert and key, or neither"));
            }
        }
    }
    if at(root, "notifier.amqp").is_some() && text(root, "notifier.amqp.exchange.type").is_empty() {
        out.push(error(
            "notifier.amqp.exchange.type",
            "required: the AMQP exchange type, for example direct",
        ));
    }
    if at(root, "auth.psk").is_some() {
        if text(root, "auth.psk.key").trim().is_empty() {
            out.push(error("auth.psk.key", "required: a base64-encoded key"));
        }
        if at(root, "auth.psk.iss")
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty())
        {
            out.push(error("auth.psk.iss", "required: at least one issuer"));
        }
    }
    for otlp in ["trace.otlp.http", "metrics.otlp.http"] {
        let url_path = text(root, &format!("{otlp}.url_path"));
        if !url_path.is_empty() && !url_path.starts_with('/') {
            out.push(error(
                &format!("{otlp}.url_path"),
                format!("{url_path:?} must be an absolute path"),
            ));
        }
    }
    match mode {
        ServiceKind::Indexer => {}
        ServiceKind::Matcher => match text(root, "matcher.indexer_addr") {
            "" => out.push(error(
                "matcher.indexer_addr",
                "required in matcher mode: the indexer's URL, for example http://indexer:6060",
            )),
            addr => {
                if let Err(message) = url_parses(addr) {
                    out.push(error("matcher.indexer_addr", message));
                }
            }
        },
        ServiceKind::Notifier => notifier_rules(root, out),
    }
}

/// The notifier's intervals under a minute in `config` (a whole config or one drop-in).
/// Clair replaces such an interval (zero and negative ones too) with its default, without a
/// word, and starts: refusing it is the operator's own rule, stricter than Clair on purpose
/// (a delivery retried hourly looks like a broken Quay integration).
pub fn notifier_intervals(config: &Map<String, Value>) -> Vec<Problem> {
    let mut out = Vec::new();
    for (key, default) in [("poll_interval", "6h"), ("delivery_interval", "1h")] {
        let path = format!("notifier.{key}");
        if let Some(text) = at(config, &path).and_then(Value::as_str)
            && parse_go_duration(text).is_ok_and(|s| s < 60.0)
        {
            out.push(error(
                &path,
                format!(
                    "{text} is under a minute, which Clair silently replaces with {default}: \
                     set 1m or more"
                ),
            ));
        }
    }
    out
}

fn notifier_rules(root: &Map<String, Value>, out: &mut Vec<Problem>) {
    for key in ["indexer_addr", "matcher_addr"] {
        if text(root, &format!("notifier.{key}")).is_empty() {
            out.push(error(
                &format!("notifier.{key}"),
                "required in notifier mode: the service's URL, for example http://indexer:6060",
            ));
        }
    }
    let url = |path: &str, out: &mut Vec<Problem>| {
        if let Err(message) = url_parses(text(root, path)) {
            out.push(error(path, message));
        }
    };
    out.extend(notifier_intervals(root));
    if at(root, "notifier.webhook").is_some() {
        url("notifier.webhook.target", out);
        url("notifier.webhook.callback", out);
        let callback = text(root, "notifier.webhook.callback");
        if !callback.is_empty() && !callback.ends_with('/') {
            out.push(warning(
                "notifier.webhook.callback",
                "Clair joins each notification's id onto it as a path: end it with / (Clair \
                 serves /notifier/api/v1/notification/)",
            ));
        }
    }
    if at(root, "notifier.amqp").is_some() {
        if text(root, "notifier.amqp.routing_key").is_empty() {
            out.push(error(
                "notifier.amqp.routing_key",
                "required: the routing key for notifications",
            ));
        }
        uris(root, "notifier.amqp.uris", url_parses, out);
        if !flag(root, "notifier.amqp.direct") {
            url("notifier.amqp.callback", out);
        }
    }
    if at(root, "notifier.stomp").is_some() {
        uris(root, "notifier.stomp.uris", split_host_port, out);
        if !flag(root, "notifier.stomp.direct") {
            url("notifier.stomp.callback", out);
        }
    }
}

fn uris(
    root: &Map<String, Value>,
    path: &str,
    check: fn(&str) -> Result<(), String>,
    out: &mut Vec<Problem>,
) {
    let list: Vec<&str> = at(root, path)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if list.is_empty() {
        out.push(error(path, "required: at least one broker address"));
    }
    for uri in list {
        if let Err(message) = check(uri) {
            out.push(error(path, message));
        }
    }
}

fn error(path: &str, message: impl Into<String>) -> Problem {
    Problem {
        path: path.to_string(),
        message: message.into(),
        warning: false,
    }
}

/// Go's `encoding/json` matches keys exactly first, then case-insensitively.
fn lookup<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).or_else(|| {
        object
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

fn check_section(
    object: &Map<String, Value>,
    fields: &[Field],
    prefix: &str,
    out: &mut Vec<Problem>,
) {
    for (key, value) in object {
        let path = format!("{prefix}{key}");
        let Some((_, kind)) = fields
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(key))
        else {
            let known: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
            out.push(error(
                &path,
                format!(
                    "unknown key (Clair 4.7 and later refuse unknown keys); known here: {}",
                    known.join(", ")
                ),
            ));
            continue;
        };
        // Go's decoder leaves a field at its default for null.
        if value.is_null() {
            continue;
        }
        if let Err(message) = check_value(value, *kind, &path, out) {
            out.push(error(&path, message));
        }
    }
}

fn check_value(
    value: &Value,
    kind: Kind,
    path: &str,
    out: &mut Vec<Problem>,
) -> Result<(), String> {
    let want = |what: &str| Err(format!("must be {what}, not {}", describe(value)));
    match kind {
        Kind::String => value
            .as_str()
            .map(|_| ())
            .map_or_else(|| want("a string"), Ok),
        Kind::Bool => value
            .as_bool()
            .map(|_| ())
            .map_or_else(|| want("true or false"), Ok),
        Kind::Int => match value.as_f64() {
            Some(n) if n.fract() == 0.0 => Ok(()),
            _ => want("a whole number"),
        },
        Kind::Float => value
            .as_f64()
            .map(|_| ())
            .map_or_else(|| want("a number"), Ok),
        Kind::Duration => match value.as_str() {
            Some(text) => parse_go_duration(text).map(|_| ()),
            None => want("a duration string such as \"6h\" or \"30m\""),
        },
        Kind::LogLevel => match value.as_str() {
            Some(level) if LOG_LEVELS.contains(&level.to_ascii_lowercase().as_str()) => Ok(()),
            Some(level) => Err(format!(
                "unknown level {level:?}: use one of {}",
                LOG_LEVELS.join(", ")
            )),
            None => want("a log level string"),
        },
        Kind::Base64 => match value.as_str() {
            Some(text) => decode_base64(text),
            None => want("a base64 string"),
        },
        Kind::Strings => match value.as_array() {
            Some(items) if items.iter().all(|i| i.is_string() || i.is_null()) => Ok(()),
            _ => want("a list of strings"),
        },
        Kind::StringMap => match value.as_object() {
            Some(map) if map.values().all(|v| v.is_string() || v.is_null()) => Ok(()),
            _ => want("a mapping of strings to strings"),
        },
        Kind::Headers => match value.as_object() {
            Some(map)
                if map.values().all(|v| {
                    v.is_null() || v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
                }) =>
            {
                Ok(())
            }
            _ => want("a mapping of header names to lists of strings"),
        },
        Kind::Mapping => value
            .as_object()
            .map(|_| ())
            .map_or_else(|| want("a mapping"), Ok),
        Kind::Section(fields) => match value.as_object() {
            Some(object) => {
                check_section(object, fields, &format!("{path}."), out);
                Ok(())
            }
            None => want("a mapping"),
        },
    }
}

/// Go's `base64.StdEncoding.Decode`: padded standard alphabet; carriage returns and
/// newlines are skipped.
fn decode_base64(text: &str) -> Result<(), String> {
    use base64::Engine;
    let cleaned: String = text.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    base64::engine::general_purpose::STANDARD
        .decode(cleaned.as_bytes())
        .map(|_| ())
        // The decoder's message names the offending byte and its offset: from a key, that
        // would be part of the key.
        .map_err(|_| {
            "not standard padded base64 (A-Z, a-z, 0-9, + and /, padded with =)".to_string()
        })
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Go's `net.SplitHostPort`: `host:port`, `:port` or `[v6]:port`.
fn split_host_port(text: &str) -> Result<(), String> {
    let bad = || {
        Err(format!(
            "{text:?} is not host:port (for example \":6060\" or \"0.0.0.0:6060\")"
        ))
    };
    let Some((host, _port)) = text.rsplit_once(':') else {
        return bad();
    };
    let bracketed = host.starts_with('[') && host.ends_with(']');
    if host.contains(':') && !bracketed || host.contains('/') {
        return bad();
    }
    Ok(())
}

/// Go's `url.Parse`: a scheme, if any, must be well formed (a scheme-less reference must
/// not have a colon in its first segment), an authority's port must be numeric and its
/// brackets balanced, and percent-escapes must be complete. Anything else parses, as in Go
/// (`not a url` is a valid relative reference).
fn url_parses(text: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "{text:?} is not a URL ({why}): write it as http://HOST:PORT"
        ))
    };
    if text.chars().any(|c| c.is_ascii_control()) {
        return bad("control character");
    }
    let (without_fragment, fragment) = text.split_once('#').unwrap_or((text, ""));
    if !escapes_complete(fragment) {
        return bad("invalid escape in fragment");
    }
    let mut scheme_end = None;
    for (i, c) in without_fragment.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i == 0 => return bad("missing protocol scheme"),
            ':' => {
                scheme_end = Some(i);
                break;
            }
            _ => break,
        }
    }
    let rest = match scheme_end {
        Some(i) => &without_fragment[i + 1..],
        None => {
            let first_segment = without_fragment
                .split(['/', '?'])
                .next()
                .unwrap_or_default();
            if first_segment.contains(':') {
                return bad("colon in the first path segment");
            }
            without_fragment
        }
    };
    let (rest, _query) = rest.split_once('?').unwrap_or((rest, ""));
    let path = if let Some(after) = rest.strip_prefix("//") {
        let (authority, path) = after.find('/').map_or((after, ""), |i| after.split_at(i));
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let port = if let Some(inner) = host.strip_prefix('[') {
            let Some((_, after_bracket)) = inner.split_once(']') else {
                return bad("missing ']' in host");
            };
            match after_bracket {
                "" => "",
                p if p.starts_with(':') => &p[1..],
                _ => return bad("junk after the bracketed host"),
            }
        } else {
            if host.contains(' ') {
                return bad("space in host");
            }
            host.rsplit_once(':').map_or("", |(_, p)| p)
        };
        if !port.chars().all(|c| c.is_ascii_digit()) {
            return bad("port is not a number");
        }
        if !escapes_complete(host) {
            return bad("invalid escape in host");
        }
        path
    } else {
        rest
    };
    if !escapes_complete(path) {
        return bad("invalid escape in path");
    }
    Ok(())
}

/// Every `%` is followed by two hex digits.
fn escapes_complete(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.iter().enumerate().all(|(i, b)| {
        *b != b'%'
            || (bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

/// Go's `time.ParseDuration`: a signed sequence of decimal numbers with units ns, us, µs,
/// ms, s, m, h; a bare `0` is allowed.
pub(crate) fn parse_go_duration(text: &str) -> Result<f64, String> {
    let bad = || {
        format!("{text:?} is not a duration: use a number with a unit, such as \"6h\" or \"90s\"")
    };
    let negative = text.starts_with('-');
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    if body == "0" {
        return Ok(0.0);
    }
    if body.is_empty() {
        return Err(bad());
    }
    let mut rest = body;
    let mut seconds = 0.0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        seconds += number * scale;
        rest = &rest[unit_len..];
    }
    // Go's durations are int64 nanoseconds: time.ParseDuration refuses anything longer,
    // and Clair with it.
    if seconds > GO_DURATION_MAX_SECONDS {
        return Err(format!(
            "{text:?} is longer than a Go duration holds (about 292 years)"
        ));
    }
    Ok(if negative { -seconds } else { seconds })
}

/// The longest Go duration, in seconds (`math.MaxInt64` nanoseconds).
pub(crate) const GO_DURATION_MAX_SECONDS: f64 = 9_223_372_036.854_775;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::api::ServiceKind;

    fn errors(config: Value, mode: ServiceKind) -> Vec<String> {
        validate(&config, mode)
            .iter()
            .filter(|p| !p.warning)
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn notifier_intervals_under_a_minute_are_refused_and_a_callback_needs_its_slash() {
        let config = |poll: &str, callback: &str| {
            json!({
                "notifier": {"connstring": "host=db", "indexer_addr": "http://i:6060", "matcher_addr": "http://m:6060",
                    "poll_interval": poll, "delivery_interval": "30s",
                    "webhook": {"target": "http://quay/secscan/notification", "callback": callback}},
            })
        };
        let found = errors(
            config("5m", "http://n:6060/notifier/api/v1/notification/"),
            ServiceKind::Notifier,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("notifier.delivery_interval: 30s is under a minute"),
            "{found:?}"
        );
        assert!(found[0].contains("replaces with 1h"), "{found:?}");
        let found = errors(
            config("59s", "http://n:6060/notifier/api/v1/notification/"),
            ServiceKind::Notifier,
        );
        assert!(
            found
                .iter()
                .any(|e| e.contains("notifier.poll_interval") && e.contains("6h")),
            "{found:?}"
        );
        // Zero and negative intervals are replaced too (Go keeps the sign of "-5m").
        for poll in ["0s", "0", "-5m"] {
            let found = errors(
                config(poll, "http://n:6060/notifier/api/v1/notification/"),
                ServiceKind::Notifier,
            );
            assert!(
                found.iter().any(|e| e.contains("notifier.poll_interval")),
                "{poll}: {found:?}"
            );
        }
        let problems = validate(
            &config("1m", "http://n:6060/notifier/api/v1/notification"),
            ServiceKind::Notifier,
        );
        assert!(
            problems
                .iter()
                .any(|p| p.warning && p.path == "notifier.webhook.callback"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_matcher_period_under_six_hours_warns_negative_too() {
        let warned = |period: &str| {
            let config = json!({"matcher": {"connstring": "host=db",
                "indexer_addr": "http://i:6060", "period": period}});
            validate(&config, ServiceKind::Matcher)
                .iter()
                .any(|p| p.warning && p.path == "matcher.period")
        };
        assert!(warned("1h"));
        assert!(
            warned("-1h"),
            "Go keeps the sign, and Clair's lint warns of it"
        );
        assert!(!warned("0"), "0 is Clair's default, 6h");
        assert!(!warned("6h"));
    }

    #[test]
    fn a_complete_config_passes_in_every_mode() {
        let config = json!({
            "http_listen_addr": ":6060", "log_level": "Info",
            "indexer": {"connstring": "host=db", "migrations": true},
            "matcher": {"connstring": "host=db", "indexer_addr": "http://indexer:6060", "period": "6h"},
            "notifier": {"connstring": "host=db", "indexer_addr": "http://indexer:6060", "matcher_addr": "http://matcher:6060", "poll_interval": "5m"},
            "metrics": {"name": "prometheus"}
        });
        for mode in [
            ServiceKind::Indexer,
            ServiceKind::Matcher,
            ServiceKind::Notifier,
        ] {
            assert!(
                errors(config.clone(), mode).is_empty(),
                "{mode:?}: {:?}",
                errors(config.clone(), mode)
            );
        }
    }

    #[test]
    fn unknown_keys_are_fatal_at_any_modelled_depth_but_keys_match_case_insensitively() {
        let errs = errors(
            json!({"indexr": {}, "INDEXER": {"conn_string": "x"}}),
            ServiceKind::Indexer,
        );
        assert!(
            errs.iter().any(|e| e.starts_with("indexr: unknown key")),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("INDEXER.conn_string: unknown key")),
            "{errs:?}"
        );
        assert_eq!(errs.len(), 2, "{errs:?}");
    }

    #[test]
    fn each_mode_requires_its_addresses() {
        let errs = errors(json!({}), ServiceKind::Matcher);
        assert!(
            errs[0].starts_with("matcher.indexer_addr: required"),
            "{errs:?}"
        );
        let errs = errors(
            json!({"notifier": {"indexer_addr": "http://i:6060"}}),
            ServiceKind::Notifier,
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("notifier.matcher_addr: required"),
            "{errs:?}"
        );
        assert!(errors(json!({}), ServiceKind::Indexer).is_empty());
    }

    #[test]
    fn addresses_parse_as_go_parses_them() {
        for (addr, ok) in [
            ("http://indexer:6060", true),
            ("indexer:6060", true),
            ("not a url", true),
            ("1.2.3.4:6060", false),
            (":6060", false),
        ] {
            let errs = errors(
                json!({"matcher": {"indexer_addr": addr}}),
                ServiceKind::Matcher,
            );
            assert_eq!(errs.is_empty(), ok, "{addr}: {errs:?}");
        }
        for (addr, ok) in [
            (":6060", true),
            ("0.0.0.0:6060", true),
            ("[::1]:6060", true),
            ("6060", false),
            ("http://h:1", false),
        ] {
            let errs = errors(json!({"http_listen_addr": addr}), ServiceKind::Indexer);
            assert_eq!(errs.is_empty(), ok, "{addr}: {errs:?}");
        }
    }

    #[test]
    fn scalars_follow_go_json_decoding() {
        let errs = errors(
            json!({"indexer": {"migrations": "yes", "scanlock_retry": 1.5, "layer_scan_concurrency": 4.0}}),
            ServiceKind::Indexer,
        );
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("indexer.migrations: must be true or false"))
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("indexer.scanlock_retry: must be a whole number"))
        );
        let errs = errors(
            json!({"matcher": {"indexer_addr": "http://i", "period": 30, "cache_age": "1d"}}),
            ServiceKind::Matcher,
        );
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errors(json!({"log_level": ""}), ServiceKind::Indexer)[0]
                .starts_with("log_level: unknown level")
        );
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1h30m").unwrap(), 5400.0);
        assert_eq!(parse_go_duration("1.5s").unwrap(), 1.5);
        assert_eq!(parse_go_duration("0").unwrap(), 0.0);
        assert_eq!(
            parse_go_duration("-5m").unwrap(),
            -300.0,
            "Go keeps the sign"
        );
        for bad in ["", "1d", "h", "30", "1h 30m"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }
}
