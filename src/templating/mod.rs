//! Templates: a ConfigMap or Secret labelled `clair.projectquay.io/template-config` has the
//! `secret://` and `configmap://` references of its template-input key resolved into its
//! template-output key. [`template`] is the pure part (parse, find references, render);
//! [`render_object`] reads the references. Used by the templating webhook (as the writing
//! user) and by the controller that re-renders when a referenced value changes.
//!
//! Only in the object's own namespace, only what the requesting user may `get` themselves
//! (a SubjectAccessReview with the request's user), and never a Secret's value into a
//! ConfigMap: otherwise anyone who may write a ConfigMap could read any Secret through the
//! operator.

pub mod seal;
pub mod template;

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject};
use kube::{Client, ResourceExt};

use crate::api::keys::{TEMPLATE_INPUT, TEMPLATE_OUTPUT};
use crate::sources::value_of;
use seal::Sealed;
use template::{Reference, SourceKind};

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

/// A templated object's template: which key it reads, which it writes, and the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pub input_key: String,
    pub output_key: String,
    pub input: String,
}

impl Template {
    /// The template of `object` (a ConfigMap or Secret labelled for templating).
    pub fn of(object: &DynamicObject, kind: &str) -> Result<Self, Refusal> {
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
        let input = value_of(object, kind, &input_key).ok_or_else(|| {
            Refusal::Request(format!(
                "{kind} {} has no key {input_key:?} (named by {TEMPLATE_INPUT})",
                object.name_any()
            ))
        })?;
        Ok(Template {
            input_key,
            output_key,
            input,
        })
    }

    /// What the webhook's seal covers for this template in a `kind` object of `namespace`.
    pub fn sealed<'a>(&'a self, namespace: &'a str, kind: &'a str) -> Sealed<'a> {
        Sealed {
            namespace,
            kind,
            input_key: &self.input_key,
            output_key: &self.output_key,
            input: &self.input,
        }
    }
}

/// What a template will read, known from its text alone.
struct Plan {
    parsed: serde_json::Value,
    format: crate::clairconfig::Format,
    references: Vec<Reference>,
}

/// Parses `template` (of a `kind` object) and lists its references; refuses a ConfigMap that
/// names a Secret. Reads nothing.
fn plan(template: &Template, kind: &str) -> Result<Plan, Refusal> {
    let (parsed, _) = template::parse(&template.input_key, &template.input)?;
    let format = template::format_of(&template.output_key)?;
    let references = template::references(&parsed)?;
    if kind == "ConfigMap"
        && let Some(secret) = references.iter().find(|r| r.kind == SourceKind::Secret)
    {
        return Err(Refusal::Request(format!(
            "{secret}: a Secret's value is never written into a ConfigMap; keep this template in a Secret"
        )));
    }
    Ok(Plan {
        parsed,
        format,
        references,
    })
}

/// The checks any caller of the templating webhook gets: the template itself, and whether
/// `user` may get every object it names. Nothing is read, so a forged review learns nothing
/// about the cluster but what an access review says.
pub async fn check(
    client: &Client,
    template: &Template,
    kind: &str,
    namespace: &str,
    user: &UserInfo,
) -> Result<(), Refusal> {
    for reference in &plan(template, kind)?.references {
        check_access(client, user, namespace, reference).await?;
    }
    Ok(())
}

/// The rendered output of `template` (of a `kind` object in `namespace`), as `user` may see
/// it. `user: None` renders with the operator's own access: only for a template the webhook
/// sealed (see [`seal`]). What is read is held to the output's limit as it is read: every
/// value appears in the output at least once, so more than that is refused at once, before
/// the next object is fetched.
pub async fn render(
    client: &Client,
    template: &Template,
    kind: &str,
    namespace: &str,
    user: Option<&UserInfo>,
) -> Result<String, Refusal> {
    let plan = plan(template, kind)?;
    let mut values = BTreeMap::new();
    let mut read = 0usize;
    for reference in &plan.references {
        if let Some(user) = user {
            check_access(client, user, namespace, reference).await?;
        }
        let value = fetch(client, namespace, reference).await?;
        read = read.saturating_add(value.len());
        if read > crate::clairconfig::limits::MAX_DOCUMENT_BYTES {
            return Err(template::too_large().into());
        }
        values.insert(reference.clone(), value);
    }
    Ok(template::render(&plan.parsed, plan.format, &values)?)
}

async fn check_access(
    client: &Client,
    user: &UserInfo,
    namespace: &str,
    reference: &Reference,
) -> Result<(), Refusal> {
    let resource = reference.kind.resource();
    if crate::sources::may_get(client, user, namespace, resource, &reference.name).await? {
        Ok(())
    } else {
        Err(Refusal::Request(format!(
            "{reference}: user {} may not get {resource} {} in {namespace}, so the template may not use it",
            user.username.as_deref().unwrap_or("(unknown)"),
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
