//! Clair's config rules for the keys the operator depends on (see
//! `../shared/notes/clair-config.md`, checked against Clair v4.9.0): unknown keys are fatal
//! (Clair ≥ 4.7 decodes with `DisallowUnknownFields`, matching keys case-insensitively),
//! scalar types as Go's JSON decoder takes them, and the keys each mode requires.

use serde_json::{Map, Value};

/// The mode a Clair process runs in (`CLAIR_MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Indexer,
    Matcher,
    Notifier,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Indexer => "indexer",
            Mode::Matcher => "matcher",
            Mode::Notifier => "notifier",
        }
    }
}

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
        write!(f, "{}: {}", self.path, self.message)
    }
}

#[derive(Clone, Copy)]
enum Kind {
    String,
    Bool,
    Int,
    Duration,
    /// An address checked like Go's `net.SplitHostPort`.
    HostPort,
    /// Free-form or not yet modelled here: any value.
    Any,
    Section(&'static [Field]),
}

type Field = (&'static str, Kind);

const TLS: &[Field] = &[
    ("root_ca", Kind::String),
    ("cert", Kind::String),
    ("key", Kind::String),
];

const INDEXER: &[Field] = &[
    ("connstring", Kind::String),
    ("scanlock_retry", Kind::Int),
    ("layer_scan_concurrency", Kind::Int),
    ("migrations", Kind::Bool),
    ("scanner", Kind::Any),
    ("airgap", Kind::Bool),
    ("index_report_request_concurrency", Kind::Int),
];

const MATCHER: &[Field] = &[
    ("connstring", Kind::String),
    ("max_conn_pool", Kind::Int),
    ("indexer_addr", Kind::String),
    ("migrations", Kind::Bool),
    ("period", Kind::Duration),
    ("disable_updaters", Kind::Bool),
    ("update_retention", Kind::Int),
    ("cache_age", Kind::Duration),
    ("disable_enrichment", Kind::Bool),
];

const NOTIFIER: &[Field] = &[
    ("connstring", Kind::String),
    ("migrations", Kind::Bool),
    ("indexer_addr", Kind::String),
    ("matcher_addr", Kind::String),
    ("poll_interval", Kind::Duration),
    ("delivery_interval", Kind::Duration),
    ("disable_summary", Kind::Bool),
    ("webhook", Kind::Any),
    ("amqp", Kind::Any),
    ("stomp", Kind::Any),
];

const ROOT: &[Field] = &[
    ("http_listen_addr", Kind::HostPort),
    ("introspection_addr", Kind::String),
    ("log_level", Kind::String),
    ("tls", Kind::Section(TLS)),
    ("indexer", Kind::Section(INDEXER)),
    ("matcher", Kind::Section(MATCHER)),
    ("matchers", Kind::Any),
    ("updaters", Kind::Any),
    ("notifier", Kind::Section(NOTIFIER)),
    ("auth", Kind::Any),
    ("trace", Kind::Any),
    ("metrics", Kind::Any),
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

/// Every problem of `config` for a process in `mode`. Errors are what Clair would refuse to
/// start with.
pub fn validate(config: &Value, mode: Mode) -> Vec<Problem> {
    let mut problems = Vec::new();
    let root = config.as_object().cloned().unwrap_or_default();
    check_section(&root, ROOT, "", &mut problems);

    if let Some(level) = lookup(&root, "log_level").and_then(Value::as_str)
        && !LOG_LEVELS.contains(&level.to_ascii_lowercase().as_str())
    {
        problems.push(error(
            "log_level",
            format!(
                "unknown level {level:?}: use one of {}",
                LOG_LEVELS.join(", ")
            ),
        ));
    }
    match mode {
        Mode::Indexer => {}
        Mode::Matcher => match string_at(&root, "matcher", "indexer_addr") {
            None | Some("") => problems.push(error(
                "matcher.indexer_addr",
                "required in matcher mode: the indexer's URL, for example http://indexer:6060",
            )),
            Some(addr) => {
                if let Err(message) = url_parses(addr) {
                    problems.push(error("matcher.indexer_addr", message));
                }
            }
        },
        Mode::Notifier => {
            for key in ["indexer_addr", "matcher_addr"] {
                if matches!(string_at(&root, "notifier", key), None | Some("")) {
                    problems.push(error(
                        &format!("notifier.{key}"),
                        "required in notifier mode: the service's URL, for example http://indexer:6060",
                    ));
                }
            }
        }
    }
    problems
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

fn string_at<'a>(root: &'a Map<String, Value>, section: &str, key: &str) -> Option<&'a str> {
    lookup(root, section)
        .and_then(Value::as_object)
        .and_then(|s| lookup(s, key))
        .and_then(Value::as_str)
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
        Kind::Any => Ok(()),
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
        Kind::Duration => match value.as_str() {
            Some(text) => parse_go_duration(text).map(|_| ()),
            None => want("a duration string such as \"6h\" or \"30m\""),
        },
        Kind::HostPort => match value.as_str() {
            Some(text) => split_host_port(text),
            None => want("a host:port string such as \":6060\""),
        },
        Kind::Section(fields) => match value.as_object() {
            Some(object) => {
                check_section(object, fields, &format!("{path}."), out);
                Ok(())
            }
            None => want("a mapping"),
        },
    }
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

/// Go's `url.Parse`, for the cases that matter in Clair configs: a scheme, if any, must be
/// well formed, and a scheme-less reference must not start with a colon segment.
fn url_parses(text: &str) -> Result<(), String> {
    if text.chars().any(|c| c.is_ascii_control()) {
        return Err(format!("{text:?} has a control character"));
    }
    let first_segment = text.split(['/', '?', '#']).next().unwrap_or_default();
    if let Some((scheme, _)) = first_segment.split_once(':') {
        let well_formed = scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
        if !well_formed {
            return Err(format!(
                "{text:?} is not a URL (missing or malformed scheme): write it as http://HOST:PORT"
            ));
        }
    }
    Ok(())
}

/// Go's `time.ParseDuration`: a signed sequence of decimal numbers with units ns, us, µs,
/// ms, s, m, h; a bare `0` is allowed.
pub(crate) fn parse_go_duration(text: &str) -> Result<f64, String> {
    let bad = || {
        format!("{text:?} is not a duration: use a number with a unit, such as \"6h\" or \"90s\"")
    };
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
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(config: Value, mode: Mode) -> Vec<String> {
        validate(&config, mode)
            .iter()
            .filter(|p| !p.warning)
            .map(|p| p.to_string())
            .collect()
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
        for mode in [Mode::Indexer, Mode::Matcher, Mode::Notifier] {
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
            Mode::Indexer,
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
        let errs = errors(json!({}), Mode::Matcher);
        assert!(
            errs[0].starts_with("matcher.indexer_addr: required"),
            "{errs:?}"
        );
        let errs = errors(
            json!({"notifier": {"indexer_addr": "http://i:6060"}}),
            Mode::Notifier,
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("notifier.matcher_addr: required"),
            "{errs:?}"
        );
        assert!(errors(json!({}), Mode::Indexer).is_empty());
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
            let errs = errors(json!({"matcher": {"indexer_addr": addr}}), Mode::Matcher);
            assert_eq!(errs.is_empty(), ok, "{addr}: {errs:?}");
        }
        for (addr, ok) in [
            (":6060", true),
            ("0.0.0.0:6060", true),
            ("[::1]:6060", true),
            ("6060", false),
            ("http://h:1", false),
        ] {
            let errs = errors(json!({"http_listen_addr": addr}), Mode::Indexer);
            assert_eq!(errs.is_empty(), ok, "{addr}: {errs:?}");
        }
    }

    #[test]
    fn scalars_follow_go_json_decoding() {
        let errs = errors(
            json!({"indexer": {"migrations": "yes", "scanlock_retry": 1.5, "layer_scan_concurrency": 4.0}}),
            Mode::Indexer,
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
            Mode::Matcher,
        );
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errors(json!({"log_level": ""}), Mode::Indexer)[0]
                .starts_with("log_level: unknown level")
        );
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1h30m").unwrap(), 5400.0);
        assert_eq!(parse_go_duration("1.5s").unwrap(), 1.5);
        assert_eq!(parse_go_duration("0").unwrap(), 0.0);
        for bad in ["", "1d", "h", "30", "1h 30m"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }
}
