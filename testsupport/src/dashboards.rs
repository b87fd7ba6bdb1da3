//! What a Grafana dashboard queries: its PromQL expressions and the metric names in them,
//! for the tests that check them against what is really exported and scraped.

use serde_json::Value;

/// Every `expr` of the dashboard's panels.
pub fn queries(dashboard: &Value) -> Vec<String> {
    let mut found = Vec::new();
    collect(dashboard, &mut found);
    found
}

fn collect(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", Value::String(expr)) => into.push(expr.clone()),
                    _ => collect(value, into),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, into)),
        _ => {}
    }
}

/// The metric names in a PromQL expression that start with one of `prefixes`.
pub fn metric_names(expr: &str, prefixes: &[&str]) -> Vec<String> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = Vec::new();
    let mut start = None;
    for (at, c) in expr
        .char_indices()
        .chain(std::iter::once((expr.len(), ' ')))
    {
        match (is_name(c), start) {
            (true, None) => start = Some(at),
            (false, Some(from)) => {
                let token = &expr[from..at];
                // Label names, functions and keywords are not metrics; a name is followed by
                // a selector, a range or nothing, and starts with a known prefix.
                if prefixes.iter().any(|p| token.starts_with(p))
                    && !names.iter().any(|n| n == token)
                {
                    names.push(token.to_string());
                }
                start = None;
            }
            _ => {}
        }
    }
    names
}
