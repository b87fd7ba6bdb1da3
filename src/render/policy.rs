//! The NetworkPolicy over a `Clair`'s service pods (`spec.networkPolicy`): the Clair's own
//! pods on the API port (the notifier and matcher call the indexer; the updaters and
//! upgrade steps run as the Clair), the named namespaces' pods on the API port (Quay, the
//! router), and the monitoring namespaces' on the introspection port. Ingress only.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use strum::VariantArray;

use super::clair::ClairInput;
use super::service::{API_PORT, INTROSPECTION_PORT};
use crate::api::ServiceKind;
use crate::api::clair::ServicesNetworkPolicy;
use crate::api::labels;

const COMPONENT: &str = "services";

/// The policy's name: `NAME-services`.
pub fn name(input: &ClairInput) -> String {
    format!("{}-{COMPONENT}", input.name)
}

/// The Clair's own pods: its services' (`NAME-indexer`, ...) and its updaters' and upgrade
/// steps' (`NAME`).
pub fn own_pods(input: &ClairInput) -> LabelSelector {
    clair_pods(
        std::iter::once(input.name.to_string())
            .chain(ServiceKind::VARIANTS.iter().map(|k| input.child_name(*k)))
            .collect(),
    )
}

/// Pods labelled `app.kubernetes.io/name=clair` whose instance is one of `instances`.
fn clair_pods(instances: Vec<String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(
            labels::NAME.to_string(),
            "clair".to_string(),
        )])),
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: labels::INSTANCE.to_string(),
            operator: "In".to_string(),
            values: Some(instances),
        }]),
    }
}

/// Every pod of the namespaces `names`, by their `kubernetes.io/metadata.name` label.
fn namespaces(names: Vec<String>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".to_string(),
                operator: "In".to_string(),
                values: Some(names),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn tcp(port: i32) -> Option<Vec<NetworkPolicyPort>> {
    Some(vec![NetworkPolicyPort {
        port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".to_string()),
        ..Default::default()
    }])
}

/// The policy `spec.networkPolicy` asks for.
pub fn services(input: &ClairInput, policy: &ServicesNetworkPolicy) -> NetworkPolicy {
    let services: Vec<String> = ServiceKind::VARIANTS
        .iter()
        .map(|k| input.child_name(*k))
        .collect();
    let mut api_from = vec![NetworkPolicyPeer {
        pod_selector: Some(own_pods(input)),
        ..Default::default()
    }];
    let callers: Vec<String> = policy
        .clients
        .iter()
        .chain(&policy.routers)
        .cloned()
        .collect();
    if !callers.is_empty() {
        api_from.push(namespaces(callers));
    }
    let mut ingress = vec![NetworkPolicyIngressRule {
        from: Some(api_from),
        ports: tcp(API_PORT),
    }];
    let monitoring = policy.monitoring();
    if !monitoring.is_empty() {
        ingress.push(NetworkPolicyIngressRule {
            from: Some(vec![namespaces(monitoring)]),
            ports: tcp(INTROSPECTION_PORT),
        });
    }
    NetworkPolicy {
        metadata: input.metadata(name(input), COMPONENT),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(clair_pods(services)),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(ingress),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ClairSpec;

    use crate::api::labels::selects;

    /// The labels the service controller gives a service's pods (`deployment.rs`).
    fn pod_labels(input: &ClairInput, kind: ServiceKind) -> BTreeMap<String, String> {
        labels::selector(&input.child_name(kind), kind.as_str())
    }

    #[test]
    fn the_policy_covers_the_services_pods_and_admits_whom_it_names() {
        let spec = ClairSpec::default();
        let input = ClairInput::example(&spec);
        let asked = ServicesNetworkPolicy {
            clients: vec!["quay".to_string()],
            routers: vec!["openshift-ingress".to_string()],
            monitoring: None,
        };
        let policy = services(&input, &asked).spec.unwrap();
        let covered = policy.pod_selector.clone().unwrap();
        for kind in ServiceKind::VARIANTS {
            assert!(selects(&covered, &pod_labels(&input, *kind)), "{kind:?}");
        }
        // Another Clair's pods in the namespace are not covered, nor let in.
        let other = labels::selector("other-indexer", "indexer");
        assert!(!selects(&covered, &other));
        let ingress = policy.ingress.unwrap();
        let api = &ingress[0];
        assert_eq!(api.ports, tcp(API_PORT));
        let peers = api.from.as_ref().unwrap();
        let own = peers[0].pod_selector.as_ref().unwrap();
        assert!(selects(own, &pod_labels(&input, ServiceKind::Notifier)));
        assert!(selects(own, &pod_labels(&input, ServiceKind::Matcher)));
        // The updater CronJob's and upgrade steps' pods are the Clair's own.
        assert!(selects(own, &labels::all(input.name, "updaters")));
        assert!(!selects(own, &other));
        let callers = peers[1].namespace_selector.as_ref().unwrap();
        let namespace = |name: &str| {
            BTreeMap::from([("kubernetes.io/metadata.name".to_string(), name.to_string())])
        };
        assert!(selects(callers, &namespace("quay")));
        assert!(selects(callers, &namespace("openshift-ingress")));
        assert!(!selects(callers, &namespace("tenant-b")));
        let scrapes = &ingress[1];
        assert_eq!(scrapes.ports, tcp(INTROSPECTION_PORT));
        let monitoring = scrapes.from.as_ref().unwrap()[0]
            .namespace_selector
            .as_ref()
            .unwrap();
        assert!(selects(monitoring, &namespace("openshift-monitoring")));
        assert!(!selects(monitoring, &namespace("quay")));
    }

    #[test]
    fn with_no_callers_named_only_the_clairs_own_pods_reach_the_api() {
        let spec = ClairSpec::default();
        let input = ClairInput::example(&spec);
        let asked = ServicesNetworkPolicy {
            monitoring: Some(Vec::new()),
            ..Default::default()
        };
        let ingress = services(&input, &asked).spec.unwrap().ingress.unwrap();
        assert_eq!(ingress.len(), 1);
        assert_eq!(ingress[0].from.as_ref().unwrap().len(), 1);
    }
}
