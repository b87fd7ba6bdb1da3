//! The validating and mutating webhook configurations, pure: built from a [`Registration`]
//! and the `caBundle` to trust. `register` keeps them published; the OLM bundle's
//! `webhookdefinitions` are made from the same builders.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use super::{TEMPLATE_CONFIG_PATH, VALIDATE_CONFIG, VALIDATE_CONFIG_PATH, VALIDATE_RESOURCE_PATH};
use crate::api::keys::TEMPLATE_CONFIG;

/// How the apiserver reaches the webhook.
#[derive(Clone, Debug)]
pub enum Target {
    /// A Service in the cluster (the normal deployment).
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
    /// A URL (an operator running outside the cluster, or in tests on loopback).
    Url(String),
}

/// What the webhook configurations are made of: their name, how the apiserver reaches the
/// server, and the namespaces they cover (every one when empty). Their builders are also
/// the OLM bundle's.
#[derive(Clone, Debug)]
pub struct Registration {
    pub name: String,
    pub target: Target,
    pub namespaces: Vec<String>,
}

fn client_config(settings: &Registration, ca_bundle: &str, path: &str) -> WebhookClientConfig {
    let ca_bundle = Some(ByteString(ca_bundle.as_bytes().to_vec()));
    match &settings.target {
        Target::Url(base) => WebhookClientConfig {
            url: Some(format!("{base}{path}")),
            ca_bundle,
            ..Default::default()
        },
        Target::Service {
            namespace,
            name,
            port,
        } => WebhookClientConfig {
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path.to_string()),
                port: Some(*port),
            }),
            ca_bundle,
            ..Default::default()
        },
    }
}

/// ConfigMaps and Secrets carrying `label: "true"`, on create and update. Selecting by label
/// means the operator being down never blocks anyone else's writes.
fn selected(label: &str) -> (Option<LabelSelector>, Option<Vec<RuleWithOperations>>) {
    (
        Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(label.to_string(), "true".to_string())])),
            ..Default::default()
        }),
        Some(vec![RuleWithOperations {
            api_groups: Some(vec![String::new()]),
            api_versions: Some(vec!["v1".to_string()]),
            operations: Some(vec!["CREATE".to_string(), "UPDATE".to_string()]),
            resources: Some(vec!["configmaps".to_string(), "secrets".to_string()]),
            scope: Some("Namespaced".to_string()),
        }]),
    )
}

/// The namespaces the webhooks are called for: those in scope (by the name label every
/// namespace carries), or all.
fn in_scope(settings: &Registration) -> Option<LabelSelector> {
    if settings.namespaces.is_empty() {
        return None;
    }
    Some(LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".to_string(),
            operator: "In".to_string(),
            values: Some(settings.namespaces.clone()),
        }]),
        ..Default::default()
    })
}

/// The ValidatingWebhookConfiguration: config validation for labelled objects.
pub fn validating(settings: &Registration, ca_bundle: &str) -> ValidatingWebhookConfiguration {
    let (object_selector, rules) = selected(VALIDATE_CONFIG);
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(settings.name.clone()),
            ..Default::default()
        },
        webhooks: Some(vec![
            ValidatingWebhook {
                name: "config.clair.projectquay.io".to_string(),
                admission_review_versions: vec!["v1".to_string()],
                side_effects: "None".to_string(),
                failure_policy: Some("Fail".to_string()),
                timeout_seconds: Some(5),
                client_config: client_config(settings, ca_bundle, VALIDATE_CONFIG_PATH),
                namespace_selector: in_scope(settings),
                object_selector,
                rules,
                ..Default::default()
            },
            ValidatingWebhook {
                // Mostly warnings, so the operator being down must not block these writes.
                name: "resources.clair.projectquay.io".to_string(),
                admission_review_versions: vec!["v1".to_string()],
                side_effects: "None".to_string(),
                failure_policy: Some("Ignore".to_string()),
                timeout_seconds: Some(5),
                client_config: client_config(settings, ca_bundle, VALIDATE_RESOURCE_PATH),
                namespace_selector: in_scope(settings),
                rules: Some(vec![RuleWithOperations {
                    api_groups: Some(vec![crate::api::GROUP.to_string()]),
                    api_versions: Some(vec![crate::api::VERSION.to_string()]),
                    operations: Some(vec!["CREATE".to_string(), "UPDATE".to_string()]),
                    resources: Some(
                        ["clairs", "indexers", "matchers", "notifiers"]
                            .map(String::from)
                            .to_vec(),
                    ),
                    scope: Some("Namespaced".to_string()),
                }]),
                ..Default::default()
            },
        ]),
    }
}

/// The MutatingWebhookConfiguration: templating for labelled objects. Mutation runs before
/// validation, so a rendered config is validated too when the object asks for both.
pub fn mutating(settings: &Registration, ca_bundle: &str) -> MutatingWebhookConfiguration {
    let (object_selector, rules) = selected(TEMPLATE_CONFIG);
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(settings.name.clone()),
            ..Default::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: "template.clair.projectquay.io".to_string(),
            admission_review_versions: vec!["v1".to_string()],
            side_effects: "None".to_string(),
            failure_policy: Some("Fail".to_string()),
            reinvocation_policy: Some("Never".to_string()),
            timeout_seconds: Some(10),
            client_config: client_config(settings, ca_bundle, TEMPLATE_CONFIG_PATH),
            namespace_selector: in_scope(settings),
            object_selector,
            rules,
            ..Default::default()
        }]),
    }
}
