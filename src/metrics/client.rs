//! Counting the operator's requests to the Kubernetes API: a tower layer on its client that
//! names each request's verb and resource (as the apiserver's audit log would) and counts it
//! with the answer's status.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Method, Request, Response, Uri};
use tower::{Layer, Service};

use super::{Metrics, RequestLabels};

/// The operator's API client ([`crate::apiclient::builder`]) with every request counted.
pub fn counted_client(
    config: kube::Config,
    metrics: Arc<Metrics>,
) -> Result<kube::Client, kube::Error> {
    Ok(crate::apiclient::builder(config)?
        .with_layer(&CountRequests::new(metrics))
        .build())
}

/// The counting layer, as [`counted_client`] puts it on the client.
#[derive(Clone, Debug)]
pub struct CountRequests {
    metrics: Arc<Metrics>,
}

impl CountRequests {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Counted {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, R> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (verb, resource) = classify(request.method(), request.uri());
        let metrics = self.metrics.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            let code = match &answer {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            metrics
                .api_requests
                .get_or_create(&RequestLabels {
                    verb: verb.to_string(),
                    resource,
                    code,
                })
                .inc();
            answer
        })
    }
}

/// The resources the operator requests, by the name in their paths: a label value is one of
/// these (or `other`), never a segment of a path, which may be built from a name a tenant
/// wrote (`x/y",namespace="kube-system` would otherwise be a forged label).
const RESOURCES: &[&str] = &[
    "clairs",
    "indexers",
    "matchers",
    "notifiers",
    "configmaps",
    "secrets",
    "services",
    "pods",
    "namespaces",
    "events",
    "persistentvolumeclaims",
    "serviceaccounts",
    "deployments",
    "replicasets",
    "statefulsets",
    "horizontalpodautoscalers",
    "poddisruptionbudgets",
    "cronjobs",
    "jobs",
    "ingresses",
    "networkpolicies",
    "routes",
    "httproutes",
    "servicemonitors",
    "scaledobjects",
    "customresourcedefinitions",
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
    "subjectaccessreviews",
    "selfsubjectaccessreviews",
    "selfsubjectreviews",
    "leases",
    "endpointslices",
    "securitycontextconstraints",
];

/// The subresources the operator requests.
const SUBRESOURCES: &[&str] = &["status", "scale"];

/// `(verb, resource)` of a request: `/api/v1/namespaces/NS/secrets/NAME` is a `get` of
/// `secrets`, the same path without a name a `list` (`watch` with `watch=true`),
/// `/apis/GROUP/VERSION/...` likewise; anything else (discovery) is `discovery`.
pub fn classify(method: &Method, uri: &Uri) -> (&'static str, String) {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[][..],
    };
    // namespaces/NS/RESOURCE[/NAME[/SUB]] or RESOURCE[/NAME[/SUB]]; `namespaces/NS` alone
    // is the namespace itself.
    let (resource, named, subresource) = match rest {
        ["namespaces", _ns, resource, name_and_sub @ ..] => (
            Some(*resource),
            !name_and_sub.is_empty(),
            name_and_sub.get(1),
        ),
        [resource, name_and_sub @ ..] => (
            Some(*resource),
            !name_and_sub.is_empty(),
            name_and_sub.get(1),
        ),
        [] => (None, false, None),
    };
    let Some(resource) = resource else {
        return ("get", "discovery".to_string());
    };
    let known = |name: &str, set: &[&'static str]| {
        set.iter().find(|k| **k == name).copied().unwrap_or("other")
    };
    let resource = match subresource {
        Some(sub) => format!(
            "{}/{}",
            known(resource, RESOURCES),
            known(sub, SUBRESOURCES)
        ),
        None => known(resource, RESOURCES).to_string(),
    };
    let watching = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        Method::GET if watching => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PATCH => "patch",
        Method::PUT => "update",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: Method, uri: &str) -> (&'static str, String) {
        classify(&method, &uri.parse().expect("a URI"))
    }

    #[test]
    fn requests_are_named_as_the_audit_log_names_them() {
        assert_eq!(
            of(Method::GET, "/api/v1/namespaces/a/secrets/s"),
            ("get", "secrets".into())
        );
        assert_eq!(
            of(Method::GET, "/api/v1/secrets?limit=500"),
            ("list", "secrets".into())
        );
        assert_eq!(
            of(
                Method::GET,
                "/apis/apps/v1/namespaces/a/deployments?watch=true&resourceVersion=1"
            ),
            ("watch", "deployments".into())
        );
        assert_eq!(
            of(
                Method::PATCH,
                "/apis/clair.projectquay.io/v1alpha1/namespaces/a/clairs/c/status?fieldManager=x"
            ),
            ("patch", "clairs/status".into())
        );
        assert_eq!(
            of(
                Method::POST,
                "/apis/authorization.k8s.io/v1/subjectaccessreviews"
            ),
            ("create", "subjectaccessreviews".into())
        );
        assert_eq!(
            of(Method::DELETE, "/apis/batch/v1/namespaces/a/jobs/j"),
            ("delete", "jobs".into())
        );
        assert_eq!(
            of(Method::GET, "/api/v1/namespaces/a"),
            ("get", "namespaces".into())
        );
        assert_eq!(
            of(Method::GET, "/apis/monitoring.coreos.com/v1"),
            ("get", "discovery".into())
        );
        assert_eq!(of(Method::GET, "/version"), ("get", "discovery".into()));
    }

    #[test]
    fn a_name_in_the_path_never_becomes_a_label() {
        // A ConfigMap named by a tenant, as it would reach the path unescaped.
        let forged = r#"/api/v1/namespaces/a/configmaps/x/y",namespace="kube-system"#;
        assert_eq!(of(Method::GET, forged), ("get", "configmaps/other".into()));
        assert_eq!(
            of(Method::GET, "/apis/example.com/v1/namespaces/a/widgets\\"),
            ("list", "other".into())
        );
    }
}
