//! The templating webhook: for a ConfigMap or Secret labelled
//! `clair.projectquay.io/template-config`, the config under the template-input key has its
//! `secret://` and `configmap://` references resolved into the template-output key.
//!
//! Only in the object's own namespace, only what the requesting user may `get` themselves
//! (a SubjectAccessReview with the request's user), and never a Secret's value into a
//! ConfigMap: otherwise anyone who may write a ConfigMap could read any Secret through the
//! operator.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::template::{self, Reference, SourceKind};
use super::validate::value_of;
use crate::api::keys::{TEMPLATE_INPUT, TEMPLATE_OUTPUT};

/// Why a request is refused; the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("{0}")]
    Request(String),
    #[error("{0}")]
    Template(#[from] template::Error),
    #[error("checking access failed: {0}")]
    Kube(#[from] kube::Error),
}

/// The rendered output for `object` (a ConfigMap or Secret in `namespace`), as `user` may
/// see it. `user: None` renders with the operator's own access (re-rendering after a
/// referenced value changed, for an object whose author was checked when it was written).
pub async fn render_object(
    client: &Client,
    object: &DynamicObject,
    kind: &str,
    namespace: &str,
    user: Option<&UserInfo>,
) -> Result<(String, String), Refusal> {
    let annotation = |key: &str| {
        object.annotations().get(key).cloned().ok_or_else(|| {
            Refusal::Request(format!(
                "{kind} {} is labelled for templating but has no {key} annotation",
                object.name_any()
            ))
        })
    };
    let input_key = annotation(TEMPLATE_INPUT)?;
    let output_key = annotation(TEMPLATE_OUTPUT)?;
    if input_key == output_key {
        return Err(Refusal::Request(format!(
            "{TEMPLATE_INPUT} and {TEMPLATE_OUTPUT} must name different keys"
        )));
    }
    let text = value_of(object, kind, &input_key).ok_or_else(|| {
        Refusal::Request(format!(
            "{kind} {} has no key {input_key:?} (named by {TEMPLATE_INPUT})",
            object.name_any()
        ))
    })?;
    let (parsed, _) = template::parse(&input_key, &text)?;
    let output_format = template::format_of(&output_key)?;
    let references = template::references(&parsed)?;
    if kind == "ConfigMap"
        && let Some(secret) = references.iter().find(|r| r.kind == SourceKind::Secret)
    {
        return Err(Refusal::Request(format!(
            "{secret}: a Secret's value is never written into a ConfigMap; keep this template in a Secret"
        )));
    }
    let mut values = BTreeMap::new();
    for reference in &references {
        if let Some(user) = user {
            check_access(client, user, namespace, reference).await?;
        }
        values.insert(
            reference.clone(),
            fetch(client, namespace, reference).await?,
        );
    }
    Ok((
        output_key,
        template::render(&parsed, output_format, &values)?,
    ))
}

async fn check_access(
    client: &Client,
    user: &UserInfo,
    namespace: &str,
    reference: &Reference,
) -> Result<(), Refusal> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_string()),
                verb: Some("get".to_string()),
                resource: Some(reference.kind.resource().to_string()),
                name: Some(reference.name.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviewed = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    if reviewed.status.is_some_and(|s| s.allowed) {
        Ok(())
    } else {
        Err(Refusal::Request(format!(
            "{reference}: user {} may not get {} {} in {namespace}, so the template may not use it",
            user.username.as_deref().unwrap_or("(unknown)"),
            reference.kind.resource(),
            reference.name
        )))
    }
}

async fn fetch(client: &Client, namespace: &str, reference: &Reference) -> Result<String, Refusal> {
    let missing = |what: String| Refusal::Request(format!("{reference}: {what}"));
    match reference.kind {
        SourceKind::Secret => {
            let secret = Api::<Secret>::namespaced(client.clone(), namespace)
                .get_opt(&reference.name)
                .await?
                .ok_or_else(|| missing(format!("Secret {} does not exist", reference.name)))?;
            let bytes = secret
                .data
                .and_then(|d| d.get(&reference.key).map(|b| b.0.clone()))
                .ok_or_else(|| {
                    missing(format!(
                        "Secret {} has no key {}",
                        reference.name, reference.key
                    ))
                })?;
            String::from_utf8(bytes).map_err(|_| missing("the value is not UTF-8 text".into()))
        }
        SourceKind::ConfigMap => {
            let map = Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .get_opt(&reference.name)
                .await?
                .ok_or_else(|| missing(format!("ConfigMap {} does not exist", reference.name)))?;
            map.data
                .and_then(|d| d.get(&reference.key).cloned())
                .ok_or_else(|| {
                    missing(format!(
                        "ConfigMap {} has no key {}",
                        reference.name, reference.key
                    ))
                })
        }
    }
}

/// JSON Pointer escaping of one path segment.
fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The admission answer: the request patched with the rendered output, or refused.
pub async fn admit(
    client: &Client,
    request: &AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(object) = &request.object else {
        return response;
    };
    let kind = request.kind.kind.as_str();
    let namespace = request.namespace.clone().unwrap_or_default();
    let (output_key, rendered) =
        match render_object(client, object, kind, &namespace, Some(&request.user_info)).await {
            Ok(done) => done,
            Err(refusal) => return response.deny(refusal.to_string()),
        };
    let value = if kind == "Secret" {
        Value::String(base64::engine::general_purpose::STANDARD.encode(rendered.as_bytes()))
    } else {
        Value::String(rendered)
    };
    let mut operations = Vec::new();
    if object.data.get("data").is_none_or(Value::is_null) {
        operations.push(json!({"op": "add", "path": "/data", "value": {}}));
    }
    operations.push(json!({"op": "add", "path": format!("/data/{}", pointer_segment(&output_key)), "value": value}));
    match serde_json::from_value::<json_patch::Patch>(Value::Array(operations)) {
        Ok(patch) => match response.clone().with_patch(patch) {
            Ok(patched) => patched,
            Err(e) => response.deny(format!("cannot encode the patch: {e}")),
        },
        Err(e) => response.deny(format!("cannot build the patch: {e}")),
    }
}
