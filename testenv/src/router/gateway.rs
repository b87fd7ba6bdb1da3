//! HTTPRoutes → the stand-in's routes, by Gateway API v1's rules for what the operator
//! renders (`render/routing.rs`), and no more:
//!
//! - a route is served when a `parentRefs` entry names a Gateway of the stand-in's class
//!   (the route's namespace when the entry names none); others are reported, not served;
//! - `hostnames` (none: every host), each rule's `matches` (none: `PathPrefix /`),
//!   `PathPrefix` element-wise and `Exact` as for Ingresses; other match types reported;
//! - the first `backendRefs` entry, a Service of the route's namespace by port number (one in
//!   another namespace needs a ReferenceGrant, which the stand-in does not read: reported);
//!   an unresolved backend is answered 500, as Gateway API asks;
//! - `timeouts.request` (a Gateway API duration) as nginx's read and send timeouts, 60 s
//!   without (Gateway API leaves the default to the implementation);
//! - among routes, the oldest keeps a contested path (then namespace and name), after every
//!   Ingress.
//!
//! TLS lives on a Gateway's listeners, which the stand-in does not model: HTTPRoutes are
//! served over plain HTTP.

use std::collections::BTreeMap;

use serde_json::Value;

use super::nginx::{Route, Server, Snapshot, add, service_upstream};

/// nginx's timeouts where a route asks for none, in seconds.
const DEFAULT_TIMEOUT: u32 = 60;
const CONNECT_TIMEOUT: u32 = 5;

/// An HTTPRoute as the stand-in reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HttpRoute {
    pub namespace: String,
    pub name: String,
    pub created: Option<String>,
    /// The Gateways it attaches to, by namespace and name.
    pub parents: Vec<(String, String)>,
    pub hostnames: Vec<String>,
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rule {
    /// `(exact, path)`; `Err(type)` for a match type the stand-in does not serve.
    pub matches: Vec<Result<(bool, String), String>>,
    /// The first backend: namespace (when named), Service name, port number.
    pub backend: Option<(Option<String>, String, Option<i32>)>,
    /// `timeouts.request`, as written.
    pub timeout: Option<String>,
}

impl HttpRoute {
    /// From an HTTPRoute object's JSON; `None` without a name.
    pub fn parse(object: &Value) -> Option<Self> {
        let metadata = &object["metadata"];
        let namespace = metadata["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let spec = &object["spec"];
        let strings = |value: &Value| -> Vec<String> {
            value
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        };
        let parents = spec["parentRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["kind"].as_str().is_none_or(|k| k == "Gateway"))
            .filter_map(|p| {
                let name = p["name"].as_str()?.to_string();
                let ns = p["namespace"].as_str().unwrap_or(&namespace).to_string();
                Some((ns, name))
            })
            .collect();
        let rules = spec["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|rule| Rule {
                matches: rule["matches"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|m| {
                        let path = &m["path"];
                        let value = path["value"].as_str().unwrap_or("/").to_string();
                        match path["type"].as_str().unwrap_or("PathPrefix") {
                            "PathPrefix" => Ok((false, value)),
                            "Exact" => Ok((true, value)),
                            other => Err(other.to_string()),
                        }
                    })
                    .collect(),
                backend: rule["backendRefs"]
                    .as_array()
                    .and_then(|b| b.first())
                    .and_then(|b| {
                        let kind = b["kind"].as_str().unwrap_or("Service");
                        (kind == "Service").then(|| {
                            (
                                b["namespace"].as_str().map(str::to_string),
                                b["name"].as_str().unwrap_or_default().to_string(),
                                b["port"].as_i64().and_then(|p| i32::try_from(p).ok()),
                            )
                        })
                    }),
                timeout: rule["timeouts"]["request"].as_str().map(str::to_string),
            })
            .collect();
        Some(Self {
            name: metadata["name"].as_str()?.to_string(),
            namespace,
            created: metadata["creationTimestamp"].as_str().map(str::to_string),
            parents,
            hostnames: strings(&spec["hostnames"]),
            rules,
        })
    }
}

/// The routes of the served HTTPRoutes, added to `servers` after the Ingresses'.
pub(super) fn add_routes(
    snapshot: &Snapshot,
    servers: &mut BTreeMap<String, Server>,
    report: &mut Vec<String>,
) {
    let mut routes: Vec<&HttpRoute> = snapshot.http_routes.iter().collect();
    // RFC 3339 in UTC sorts as time; a route without one (not from the apiserver) last.
    routes.sort_by_key(|r| {
        (
            r.created.is_none(),
            r.created.clone(),
            r.namespace.clone(),
            r.name.clone(),
        )
    });
    for route in routes {
        let source = format!("HTTPRoute {}/{}", route.namespace, route.name);
        if !route.parents.iter().any(|p| snapshot.gateways.contains(p)) {
            report.push(format!(
                "{source}: attached to no Gateway of class {}: not served",
                snapshot.class
            ));
            continue;
        }
        let hosts = match route.hostnames.is_empty() {
            true => vec![String::new()],
            false => route.hostnames.clone(),
        };
        for rule in &route.rules {
            let upstream = match &rule.backend {
                Some((Some(namespace), name, _)) if *namespace != route.namespace => {
                    report.push(format!(
                        "{source}: backend {namespace}/{name} is in another namespace (a \
                         ReferenceGrant, which the stand-in does not read): 500"
                    ));
                    None
                }
                Some((_, name, port)) => {
                    let found = service_upstream(snapshot, &route.namespace, name, *port, None);
                    if found.is_none() {
                        report.push(format!(
                            "{source}: backend Service {name} port {port:?} is missing: 500"
                        ));
                    }
                    found
                }
                None => {
                    report.push(format!("{source}: a rule without a Service backend: 500"));
                    None
                }
            };
            let timeout = match &rule.timeout {
                None => DEFAULT_TIMEOUT,
                Some(text) => seconds(text).unwrap_or_else(|| {
                    report.push(format!(
                        "{source}: timeouts.request {text:?} is not a Gateway API duration: ignored"
                    ));
                    DEFAULT_TIMEOUT
                }),
            };
            let default = [Ok((false, "/".to_string()))];
            let matches = match rule.matches.is_empty() {
                true => &default[..],
                false => &rule.matches[..],
            };
            for matched in matches {
                let (exact, path) = match matched {
                    Ok(found) => found.clone(),
                    Err(kind) => {
                        report.push(format!(
                            "{source}: path match type {kind} is not served by the stand-in"
                        ));
                        continue;
                    }
                };
                for host in &hosts {
                    let served = Route {
                        path: path.clone(),
                        exact,
                        upstream: upstream.clone(),
                        missing: 500,
                        read: timeout,
                        send: timeout,
                        connect: CONNECT_TIMEOUT,
                        source: source.clone(),
                    };
                    add(servers, host, served, report);
                }
            }
        }
    }
}

/// A Gateway API duration (GEP-2257: `1h`, `10m`, `600s`, `1h30m`, `500ms`) in whole
/// seconds, rounded up; `0s` (no timeout) is nginx's largest practical value.
fn seconds(text: &str) -> Option<u32> {
    let mut millis: u64 = 0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        if digits == 0 || digits > 5 {
            return None;
        }
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, factor) = [("ms", 1), ("h", 3_600_000), ("m", 60_000), ("s", 1000)]
            .into_iter()
            .find(|(unit, _)| rest.starts_with(unit))?;
        millis += number * factor;
        rest = &rest[unit.len()..];
    }
    if millis == 0 {
        return Some(86_400);
    }
    u32::try_from(millis.div_ceil(1000)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::nginx::render;
    use crate::router::nginx::tests::{
        block, indexer_and_matcher_reached_within_600s, listen, snapshot,
    };
    use serde_json::json;

    /// The operator's HTTPRoute for Clair `clair` in `scan`, on Gateway `gw`.
    fn clairs(timeout: Option<&str>) -> HttpRoute {
        let rule = |path: &str, service: &str| {
            let mut rule = json!({"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                   "backendRefs": [{"name": service, "port": 6060}]});
            if let Some(timeout) = timeout {
                rule["timeouts"] = json!({"request": timeout});
            }
            rule
        };
        HttpRoute::parse(&json!({
            "metadata": {"name": "clair", "namespace": "scan",
                         "creationTimestamp": "2026-12-02T10:00:00Z"},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["clair.example.com"],
                     "rules": [rule("/indexer/", "clair-indexer"), rule("/matcher/", "clair-matcher"),
                               rule("/notifier/", "clair-notifier")]},
        }))
        .unwrap()
    }

    fn served(routes: Vec<HttpRoute>, gateway: Option<(&str, &str)>) -> Snapshot {
        let mut snapshot = snapshot(vec![]);
        snapshot.http_routes = routes;
        snapshot.gateways = gateway
            .into_iter()
            .map(|(ns, name)| (ns.to_string(), name.to_string()))
            .collect();
        snapshot
    }

    #[test]
    fn a_route_on_a_gateway_of_the_class_reaches_each_service_by_prefix() {
        let rendered = render(
            &served(vec![clairs(Some("10m"))], Some(("scan", "gw"))),
            listen(),
            "/r".as_ref(),
            1,
        );
        let config = &rendered.config;
        indexer_and_matcher_reached_within_600s(config);
        // No notifier Service: Gateway API's 500.
        assert!(block(config, "/notifier/").contains("return 500;"));
        assert_eq!(rendered.report.len(), 1, "{:?}", rendered.report);
    }

    #[test]
    fn a_route_on_no_gateway_of_the_class_is_not_served_and_the_default_timeout_holds() {
        let rendered = render(
            &served(vec![clairs(None)], Some(("other", "gw"))),
            listen(),
            "/r".as_ref(),
            1,
        );
        assert!(!rendered.config.contains("clair.example.com"));
        assert!(
            rendered.report[0].contains("attached to no Gateway"),
            "{:?}",
            rendered.report
        );
        let rendered = render(
            &served(vec![clairs(None)], Some(("scan", "gw"))),
            listen(),
            "/r".as_ref(),
            1,
        );
        assert!(block(&rendered.config, "/matcher/").contains("proxy_read_timeout 60s;"));
    }

    #[test]
    fn gateway_durations_become_whole_seconds() {
        assert_eq!(seconds("600s"), Some(600));
        assert_eq!(seconds("10m"), Some(600));
        assert_eq!(seconds("1h30m"), Some(5400));
        assert_eq!(seconds("1500ms"), Some(2));
        assert_eq!(seconds("0s"), Some(86_400));
        for bad in ["", "10", "1d", "m", "s10", "123456s"] {
            assert_eq!(seconds(bad), None, "{bad}");
        }
    }
}
