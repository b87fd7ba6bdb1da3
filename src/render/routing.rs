//! Routing outside traffic to the services by the API paths Clair serves (`/indexer/`,
//! `/matcher/`, `/notifier/`): a networking.k8s.io Ingress, OpenShift Routes (one per path:
//! a Route has one backend), or a Gateway API HTTPRoute. TLS terminates at the router with
//! the certificate the user names. Pure builders.

use std::collections::BTreeMap;
use strum::VariantArray;

use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort,
};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use super::clair::ClairInput;
use super::service::API_PORT;
use crate::api::ServiceKind;
use crate::api::clair::{RoutingKind, RoutingSpec};

pub fn route_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("route.openshift.io", "v1", "Route"),
        "routes",
    )
}

pub fn http_route_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute"),
        "httproutes",
    )
}

/// What the cluster serves, for `kind: Auto`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    pub routes: bool,
    pub http_routes: bool,
    /// The installed HTTPRoute CRD keeps a rule's `timeouts.request` (Gateway API v1.2+).
    pub http_route_timeouts: bool,
}

/// The kind to create, or why none can be.
pub fn resolve(routing: Option<&RoutingSpec>, served: Served) -> Result<RoutingKind, String> {
    let Some(routing) = routing else {
        return Ok(RoutingKind::None);
    };
    match routing.kind.unwrap_or_default() {
        RoutingKind::Auto if served.routes => Ok(RoutingKind::Route),
        RoutingKind::Auto if served.http_routes && routing.gateway.is_some() => {
            Ok(RoutingKind::HttpRoute)
        }
        RoutingKind::Auto => Ok(RoutingKind::Ingress),
        RoutingKind::Route if !served.routes => Err(
            "spec.routing.kind is Route but the cluster serves no route.openshift.io/v1 Routes: \
             use Ingress or HTTPRoute, or Auto"
                .to_string(),
        ),
        RoutingKind::HttpRoute if !served.http_routes => Err(
            "spec.routing.kind is HTTPRoute but the cluster serves no gateway.networking.k8s.io/v1 \
             HTTPRoutes: install the Gateway API CRDs, or use Ingress"
                .to_string(),
        ),
        kind => Ok(kind),
    }
}

/// `https://HOST` (TLS when a certificate is named), when a host is set.
pub fn external_url(routing: &RoutingSpec) -> Option<String> {
    let host = routing.host.as_ref()?;
    let scheme = if routing.tls_secret_name.is_some() {
        "https"
    } else {
        "http"
    };
    Some(format!("{scheme}://{host}"))
}

fn paths(input: &ClairInput) -> Vec<(String, String)> {
    ServiceKind::VARIANTS
        .iter()
        .filter(|role| input.enabled(**role))
        .map(|role| (format!("/{}/", role.as_str()), input.child_name(*role)))
        .collect()
}

/// How long a request through the router may take: Quay gives an index request 600 s (a
/// large manifest's layers are fetched and scanned while it waits), and routers default to
/// a minute. Set where the router takes it from the object: ingress-nginx's annotations, the
/// OpenShift router's, an HTTPRoute rule's `timeouts.request` where the installed CRD keeps
/// it (Gateway API CRDs before v1.2 lack the field: the apiserver would prune it, and the
/// operator would see its own object drift at every reconcile; docs/decisions.md).
pub const REQUEST_TIMEOUT_SECONDS: u32 = 600;

/// ingress-nginx's read and send timeouts, in seconds.
pub const NGINX_READ_TIMEOUT: &str = "nginx.ingress.kubernetes.io/proxy-read-timeout";
pub const NGINX_SEND_TIMEOUT: &str = "nginx.ingress.kubernetes.io/proxy-send-timeout";
/// The OpenShift router's server timeout, with a unit.
pub const OPENSHIFT_TIMEOUT: &str = "haproxy.router.openshift.io/timeout";
/// The OpenShift router pins a client to one pod by a session cookie unless told not to,
/// and Quay's client (a `requests.Session`) keeps cookies: every request of a Quay worker
/// would reach one indexer. quay.io's indexer Route sets both (docs/autoscaling.md,
/// "Traffic to every pod").
pub const OPENSHIFT_DISABLE_COOKIES: &str = "haproxy.router.openshift.io/disable_cookies";
pub const OPENSHIFT_BALANCE: &str = "haproxy.router.openshift.io/balance";

pub fn ingress_name(input: &ClairInput) -> String {
    input.name.to_string()
}

pub fn ingress(input: &ClairInput, routing: &RoutingSpec) -> Ingress {
    let paths = paths(input)
        .into_iter()
        .map(|(path, service)| HTTPIngressPath {
            path: Some(path),
            path_type: "Prefix".to_string(),
            backend: IngressBackend {
                service: Some(IngressServiceBackend {
                    name: service,
                    port: Some(ServiceBackendPort {
                        number: Some(API_PORT),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            },
        })
        .collect();
    let mut metadata = input.metadata(ingress_name(input), "routing");
    let seconds = REQUEST_TIMEOUT_SECONDS.to_string();
    metadata.annotations = Some(BTreeMap::from([
        (NGINX_READ_TIMEOUT.to_string(), seconds.clone()),
        (NGINX_SEND_TIMEOUT.to_string(), seconds),
    ]));
    Ingress {
        metadata,
        spec: Some(IngressSpec {
            ingress_class_name: routing.ingress_class_name.clone(),
            rules: Some(vec![IngressRule {
                host: routing.host.clone(),
                http: Some(HTTPIngressRuleValue { paths }),
            }]),
            tls: routing.tls_secret_name.as_ref().map(|secret| {
                vec![IngressTLS {
                    hosts: routing.host.clone().map(|h| vec![h]),
                    secret_name: Some(secret.clone()),
                }]
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// One Route per path (a Route has a single backend). TLS: edge termination with the
/// named Secret as external certificate (OpenShift 4.14+), plain HTTP redirected.
pub fn routes(input: &ClairInput, routing: &RoutingSpec) -> Vec<DynamicObject> {
    let resource = route_resource();
    paths(input)
        .into_iter()
        .map(|(path, service)| {
            let mut object = DynamicObject::new(&service, &resource);
            object.metadata = input.metadata(service.clone(), "routing");
            object.metadata.annotations = Some(BTreeMap::from([
                (
                    OPENSHIFT_TIMEOUT.to_string(),
                    format!("{REQUEST_TIMEOUT_SECONDS}s"),
                ),
                (OPENSHIFT_DISABLE_COOKIES.to_string(), "true".to_string()),
                (OPENSHIFT_BALANCE.to_string(), "roundrobin".to_string()),
            ]));
            let mut spec = json!({
                "path": path.trim_end_matches('/'),
                "to": {"kind": "Service", "name": service, "weight": 100},
                "port": {"targetPort": "api"},
            });
            if let Some(host) = &routing.host {
                spec["host"] = json!(host);
            }
            if let Some(secret) = &routing.tls_secret_name {
                spec["tls"] = json!({
                    "termination": "edge",
                    "insecureEdgeTerminationPolicy": "Redirect",
                    "externalCertificate": {"name": secret},
                });
            }
            object.data = json!({ "spec": spec });
            object
        })
        .collect()
}

/// An HTTPRoute attached to the named Gateway; TLS is the Gateway listener's. Each rule
/// carries Quay's request timeout when `timeouts` (the installed CRD keeps the field).
pub fn http_route(input: &ClairInput, routing: &RoutingSpec, timeouts: bool) -> DynamicObject {
    let resource = http_route_resource();
    let mut object = DynamicObject::new(input.name, &resource);
    object.metadata = input.metadata(input.name.to_string(), "routing");
    let mut parent = BTreeMap::new();
    if let Some(gateway) = &routing.gateway {
        parent.insert("name", json!(gateway.name));
        if let Some(namespace) = &gateway.namespace {
            parent.insert("namespace", json!(namespace));
        }
        if let Some(section) = &gateway.section_name {
            parent.insert("sectionName", json!(section));
        }
    }
    let rules: Vec<_> = paths(input)
        .into_iter()
        .map(|(path, service)| {
            let mut rule = json!({
                "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                "backendRefs": [{"name": service, "port": API_PORT}],
            });
            if timeouts {
                rule["timeouts"] = json!({"request": format!("{REQUEST_TIMEOUT_SECONDS}s")});
            }
            rule
        })
        .collect();
    let mut spec = json!({ "parentRefs": [parent], "rules": rules });
    if let Some(host) = &routing.host {
        spec["hostnames"] = json!([host]);
    }
    object.data = json!({ "spec": spec });
    object
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ClairSpec;
    use crate::api::clair::{GatewayReference, NotifierOverrides};

    fn input(spec: &ClairSpec) -> ClairInput<'_> {
        ClairInput::example(spec)
    }

    fn routing(kind: RoutingKind) -> RoutingSpec {
        RoutingSpec {
            kind: Some(kind),
            host: Some("clair.example.com".into()),
            tls_secret_name: Some("clair-tls".into()),
            gateway: Some(GatewayReference {
                name: "public".into(),
                namespace: Some("gateways".into()),
                section_name: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn auto_picks_what_is_served() {
        let auto = routing(RoutingKind::Auto);
        let none = Served::default();
        assert_eq!(resolve(Some(&auto), none), Ok(RoutingKind::Ingress));
        let gateway = Served {
            http_routes: true,
            ..Served::default()
        };
        assert_eq!(resolve(Some(&auto), gateway), Ok(RoutingKind::HttpRoute));
        let openshift = Served {
            routes: true,
            http_routes: true,
            http_route_timeouts: true,
        };
        assert_eq!(resolve(Some(&auto), openshift), Ok(RoutingKind::Route));
        assert_eq!(resolve(None, openshift), Ok(RoutingKind::None));
        let error = resolve(Some(&routing(RoutingKind::Route)), none).unwrap_err();
        assert!(error.contains("spec.routing.kind"), "{error}");
    }

    #[test]
    fn ingress_routes_each_service_by_its_path() {
        let spec = ClairSpec {
            notifier: Some(Box::new(NotifierOverrides {
                enabled: Some(false),
                ..Default::default()
            })),
            ..Default::default()
        };
        let r = routing(RoutingKind::Ingress);
        let ingress = ingress(&input(&spec), &r);
        // Quay's 600 s for an index request, in ingress-nginx's terms (seconds, no unit).
        let annotations = ingress.metadata.annotations.clone().unwrap();
        assert_eq!(annotations[NGINX_READ_TIMEOUT], "600");
        assert_eq!(annotations[NGINX_SEND_TIMEOUT], "600");
        let spec = ingress.spec.unwrap();
        let paths: Vec<(String, String)> = spec.rules.unwrap()[0]
            .http
            .as_ref()
            .unwrap()
            .paths
            .iter()
            .map(|p| {
                (
                    p.path.clone().unwrap(),
                    p.backend.service.as_ref().unwrap().name.clone(),
                )
            })
            .collect();
        assert_eq!(
            paths,
            [
                ("/indexer/".to_string(), "clair-indexer".to_string()),
                ("/matcher/".to_string(), "clair-matcher".to_string())
            ]
        );
        assert_eq!(
            spec.tls.unwrap()[0].secret_name.as_deref(),
            Some("clair-tls")
        );
        assert_eq!(
            external_url(&r).as_deref(),
            Some("https://clair.example.com")
        );
    }

    #[test]
    fn routes_and_http_routes() {
        let spec = ClairSpec::default();
        let r = routing(RoutingKind::Route);
        let routes = routes(&input(&spec), &r);
        assert_eq!(routes.len(), 3);
        assert_eq!(routes[1].data["spec"]["path"], "/matcher");
        for route in &routes {
            let annotations = route.metadata.annotations.as_ref().unwrap();
            assert_eq!(annotations[OPENSHIFT_TIMEOUT], "600s");
            // No session cookie pins a Quay worker to one pod; each request balanced.
            assert_eq!(annotations[OPENSHIFT_DISABLE_COOKIES], "true");
            assert_eq!(annotations[OPENSHIFT_BALANCE], "roundrobin");
        }
        assert_eq!(
            routes[1].data["spec"]["tls"]["externalCertificate"]["name"],
            "clair-tls"
        );
        let h = http_route(&input(&spec), &routing(RoutingKind::HttpRoute), true);
        assert_eq!(h.data["spec"]["parentRefs"][0]["namespace"], "gateways");
        assert_eq!(
            h.data["spec"]["rules"][2]["backendRefs"][0]["name"],
            "clair-notifier"
        );
        // Quay's 600 s on every rule, where the CRD keeps the field (Gateway API v1.2+).
        let rules = h.data["spec"]["rules"].as_array().unwrap();
        assert!(
            rules.iter().all(|r| r["timeouts"]["request"] == "600s"),
            "{rules:?}"
        );
        // Left out where it would be pruned (Gateway API CRDs before v1.2).
        let h = http_route(&input(&spec), &routing(RoutingKind::HttpRoute), false);
        assert!(h.data["spec"]["rules"][0].get("timeouts").is_none());
    }
}
