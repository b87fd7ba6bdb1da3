//! What the cluster serves beyond core Kubernetes (ServiceMonitors, OpenShift Routes, Gateway
//! API HTTPRoutes, KEDA's ScaledObjects, CloudNativePG's Clusters), checked through discovery, and the optional fields
//! of those APIs the installed CRD keeps (an HTTPRoute rule's `timeouts`), read from its
//! schema; shared by every controller. The answers are forgotten when a
//! CustomResourceDefinition changes, so an API installed after the operator started is
//! picked up without a restart, and after [`RECHECK`] in any case.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::render::pod::PodUsers;

/// How long an answer stands without a CRD event. CRD-served APIs (all but OpenShift's
/// Routes and SCCs, which are there from the cluster's start) come and go with a CRD, which
/// the metadata watch hears at once: this is the backstop for an aggregated API and a
/// missed event. Short, it cost an idle operator five discovery requests a minute (the
/// scale benchmark's idle minute, issue 27).
const RECHECK: Duration = Duration::from_secs(30 * 60);

/// After a CRD event, discovery may still answer "not served" for a while (it publishes a
/// new group on its own schedule, and another apiserver may be behind): for this long after
/// one, a "not served" stands only [`RECHECK_AFTER_CHANGE`].
const SETTLING: Duration = Duration::from_secs(5 * 60);
const RECHECK_AFTER_CHANGE: Duration = Duration::from_secs(30);

/// An optional API the operator uses when the cluster serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::VariantArray)]
pub enum OptionalApi {
    /// `monitoring.coreos.com/v1` ServiceMonitor (Prometheus Operator).
    ServiceMonitor,
    /// `route.openshift.io/v1` Route (OpenShift).
    Route,
    /// `gateway.networking.k8s.io/v1` HTTPRoute (Gateway API).
    HttpRoute,
    /// `security.openshift.io/v1` SecurityContextConstraints: OpenShift assigns pods their
    /// users, so the operator names none.
    SecurityContextConstraints,
    /// `keda.sh/v1alpha1` ScaledObject (KEDA): autoscaling on Clair's own metrics.
    ScaledObject,
    /// `postgresql.cnpg.io/v1` Cluster (CloudNativePG): a managed database's engines.
    PostgresCluster,
    /// An HTTPRoute rule's `timeouts.request`: in Gateway API's standard CRDs from v1.2 on.
    /// Where the installed CRD lacks it the apiserver prunes it, and an object that carries
    /// it would differ from its own apply at every reconcile: so it is read from the CRD's
    /// schema (a `get` of that one CRD), not assumed from the version served.
    HttpRouteTimeouts,
}

impl OptionalApi {
    fn group_version(self) -> &'static str {
        match self {
            OptionalApi::ServiceMonitor => "monitoring.coreos.com/v1",
            OptionalApi::Route => "route.openshift.io/v1",
            OptionalApi::HttpRoute | OptionalApi::HttpRouteTimeouts => {
                "gateway.networking.k8s.io/v1"
            }
            OptionalApi::SecurityContextConstraints => "security.openshift.io/v1",
            OptionalApi::ScaledObject => "keda.sh/v1alpha1",
            OptionalApi::PostgresCluster => "postgresql.cnpg.io/v1",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            OptionalApi::ServiceMonitor => "servicemonitors",
            OptionalApi::Route => "routes",
            OptionalApi::HttpRoute | OptionalApi::HttpRouteTimeouts => "httproutes",
            OptionalApi::SecurityContextConstraints => "securitycontextconstraints",
            OptionalApi::ScaledObject => "scaledobjects",
            OptionalApi::PostgresCluster => "clusters",
        }
    }

    /// The CRD name that serves it (`servicemonitors.monitoring.coreos.com`).
    fn crd_name(self) -> String {
        let group = self.group_version().split('/').next().unwrap_or_default();
        format!("{}.{group}", self.plural())
    }
}

pub struct Capabilities {
    client: Client,
    known: Mutex<HashMap<OptionalApi, (bool, Instant)>>,
    /// When a CRD of an optional API last changed.
    changed: Mutex<Option<Instant>>,
}

impl Capabilities {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            known: Mutex::new(HashMap::new()),
            changed: Mutex::new(None),
        }
    }

    /// Whether the cluster serves `api`.
    pub async fn serves(&self, api: OptionalApi) -> bool {
        let settling = self
            .changed
            .lock()
            .ok()
            .and_then(|c| *c)
            .is_some_and(|at| at.elapsed() < SETTLING);
        if let Ok(known) = self.known.lock()
            && let Some((served, at)) = known.get(&api)
            && at.elapsed() < stands_for(*served, settling)
        {
            return *served;
        }
        let answer = match api {
            OptionalApi::HttpRouteTimeouts => self.crd_keeps(api, HTTP_ROUTE_TIMEOUT).await,
            _ => self
                .client
                .list_api_group_resources(api.group_version())
                .await
                .map(|list| list.resources.iter().any(|r| r.name == api.plural())),
        };
        let served = match answer {
            Ok(served) => served,
            // Not served: learnt. So is a CRD the operator may not read (an install whose
            // roles predate the `get`): the field is left out, which is always safe. Any
            // other failure (a timeout, a 503 while the apiserver rebuilds discovery)
            // teaches nothing: keep the last answer, unremembered, so a passing error never
            // flips what the operator renders (on OpenShift, the pods' users).
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 403 => false,
            Err(_) => {
                let last = self
                    .known
                    .lock()
                    .ok()
                    .and_then(|known| known.get(&api).map(|(served, _)| *served));
                return last.unwrap_or(false);
            }
        };
        if let Ok(mut known) = self.known.lock() {
            known.insert(api, (served, Instant::now()));
        }
        served
    }

    /// Whether the served version of `api`'s CRD keeps the field at `path` (see [`keeps`]).
    async fn crd_keeps(&self, api: OptionalApi, path: &[&str]) -> Result<bool, kube::Error> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let crd = crds.get(&api.crd_name()).await?;
        let version = api.group_version().split('/').nth(1).unwrap_or_default();
        Ok(crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == version && v.served)
            .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
            .is_some_and(|schema| keeps(schema, path)))
    }

    /// Who picks the pods' users on this cluster.
    pub async fn pod_users(&self) -> PodUsers {
        if self.serves(OptionalApi::SecurityContextConstraints).await {
            PodUsers::AssignedByPlatform
        } else {
            PodUsers::Numeric
        }
    }

    /// Forgets what was learnt (a CRD of an optional API changed), so the next question
    /// asks discovery again.
    pub fn forget(&self) {
        if let Ok(mut known) = self.known.lock() {
            known.clear();
        }
        if let Ok(mut changed) = self.changed.lock() {
            *changed = Some(Instant::now());
        }
    }
}

/// How long an answer stands: [`RECHECK`], but a "not served" learnt while a CRD change
/// settles only [`RECHECK_AFTER_CHANGE`].
fn stands_for(served: bool, settling: bool) -> Duration {
    if !served && settling {
        RECHECK_AFTER_CHANGE
    } else {
        RECHECK
    }
}

/// Where an HTTPRoute's request timeout lives: `spec.rules[].timeouts.request` (`[]` is an
/// array's items).
const HTTP_ROUTE_TIMEOUT: &[&str] = &["spec", "rules", "[]", "timeouts", "request"];

/// Whether the apiserver keeps the field at `path` of an object of this structural schema:
/// every step is a declared property (or, for `[]`, the array's items) until one is under
/// `x-kubernetes-preserve-unknown-fields` without being declared, which keeps whatever is
/// below it. Anything else is pruned.
pub fn keeps(schema: &JSONSchemaProps, path: &[&str]) -> bool {
    let Some((step, rest)) = path.split_first() else {
        return true;
    };
    let next = if *step == "[]" {
        match &schema.items {
            Some(JSONSchemaPropsOrArray::Schema(items)) => Some(items.as_ref()),
            _ => None,
        }
    } else {
        schema.properties.as_ref().and_then(|p| p.get(*step))
    };
    match next {
        Some(next) => keeps(next, rest),
        None => schema.x_kubernetes_preserve_unknown_fields == Some(true),
    }
}

/// One item each time a CRD of an optional API is added, changed or removed, after
/// [`Capabilities::forget`]: a controller given it with `reconcile_all_on` re-reconciles
/// everything with the new answer. Watches CRD metadata only.
pub fn optional_api_changes(
    client: Client,
    capabilities: std::sync::Arc<super::Context>,
) -> impl Stream<Item = ()> + Send + 'static {
    let names: Vec<String> = <OptionalApi as strum::VariantArray>::VARIANTS
        .iter()
        .map(|a| a.crd_name())
        .collect();
    let api: Api<PartialObjectMeta<CustomResourceDefinition>> = Api::all(client);
    watcher(api, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .filter_map(move |crd| {
            let relevant = crd.is_ok_and(|crd| names.contains(&crd.name_any()));
            if relevant {
                capabilities.capabilities.forget();
            }
            futures::future::ready(relevant.then_some(()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(value: serde_json::Value) -> JSONSchemaProps {
        serde_json::from_value(value).unwrap()
    }

    fn rule(properties: serde_json::Value) -> JSONSchemaProps {
        schema(
            serde_json::json!({"type": "object", "properties": {"spec": {
                "type": "object",
                "properties": {"rules": {"type": "array", "items": {"type": "object", "properties": properties}}},
            }}}),
        )
    }

    #[test]
    fn not_served_is_asked_again_soon_while_a_crd_change_settles() {
        assert_eq!(stands_for(false, true), RECHECK_AFTER_CHANGE);
        assert_eq!(stands_for(true, true), RECHECK);
        assert_eq!(stands_for(false, false), RECHECK);
        assert!(RECHECK_AFTER_CHANGE < SETTLING && SETTLING < RECHECK);
    }

    #[test]
    fn a_declared_field_is_kept_and_an_undeclared_one_pruned() {
        // Gateway API v1.2 and later: `timeouts.request` declared.
        let with = rule(serde_json::json!({
            "matches": {"type": "array"},
            "timeouts": {"type": "object", "properties": {"request": {"type": "string"}}},
        }));
        assert!(keeps(&with, HTTP_ROUTE_TIMEOUT));
        // v1.1 and before: no `timeouts` in a rule.
        let without = rule(serde_json::json!({"matches": {"type": "array"}}));
        assert!(!keeps(&without, HTTP_ROUTE_TIMEOUT));
        // `timeouts` without `request` prunes it too.
        let partial = rule(
            serde_json::json!({"timeouts": {"type": "object", "properties": {
            "backendRequest": {"type": "string"}}}}),
        );
        assert!(!keeps(&partial, HTTP_ROUTE_TIMEOUT));
    }

    #[test]
    fn an_open_schema_keeps_what_it_does_not_declare() {
        let open = schema(
            serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        assert!(keeps(&open, HTTP_ROUTE_TIMEOUT));
        // Open below a declared step: kept from there on.
        let open_rules = schema(
            serde_json::json!({"type": "object", "properties": {"spec": {
                "type": "object",
                "properties": {"rules": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
            }}}),
        );
        assert!(keeps(&open_rules, HTTP_ROUTE_TIMEOUT));
        // An array whose items are not described keeps nothing beneath.
        let bare = schema(
            serde_json::json!({"type": "object", "properties": {"spec": {
                "type": "object", "properties": {"rules": {"type": "array"}},
            }}}),
        );
        assert!(!keeps(&bare, HTTP_ROUTE_TIMEOUT));
    }
}
