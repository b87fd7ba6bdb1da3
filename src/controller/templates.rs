//! Rendering templated configs: the templating webhook checks and seals a template but never
//! answers with its output (`webhook::templating`), so this controller writes the output key
//! when a sealed template is written, and again whenever a Secret or ConfigMap it references
//! changes. What it cannot render is said in a `TemplateNotRendered` Warning Event on the
//! object.
//!
//! It renders with the operator's own access: who may read each reference was checked when
//! the template was written, and a ConfigMap can never reference a Secret.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{debug, info, warn};

use super::error::ApplyError;
use super::watch::{self, Scope};
use super::{Context, Error};
use crate::api::keys::{TEMPLATE_CONFIG, TEMPLATE_INPUT};
use crate::sources::value_of;
use crate::templating::seal::SEAL;
use crate::templating::template::{self, SourceKind};
use crate::templating::{Template, render};

/// ConfigMap or Secret: the kinds that hold templates.
pub trait Holder:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl Holder for ConfigMap {}
impl Holder for Secret {}

fn as_dynamic<K: Holder>(object: &K) -> Result<DynamicObject, serde_json::Error> {
    serde_json::to_value(object).and_then(serde_json::from_value)
}

/// The references of a templated object, if its template parses.
fn references_of<K: Holder>(object: &K) -> Vec<template::Reference> {
    let Ok(dynamic) = as_dynamic(object) else {
        return Vec::new();
    };
    let kind = K::kind(&()).to_string();
    let Some(key) = dynamic.annotations().get(TEMPLATE_INPUT).cloned() else {
        return Vec::new();
    };
    value_of(&dynamic, &kind, &key)
        .and_then(|text| template::parse(&key, &text).ok())
        .and_then(|(parsed, _)| template::references(&parsed).ok())
        .unwrap_or_default()
}

/// Templated objects of kind `K` in the namespace of a changed `source` that reference it.
fn dependents<K: Holder, S: Resource>(
    store: Store<K>,
    kind: SourceKind,
) -> impl Fn(S) -> Vec<ObjectRef<K>> + Send + Sync + 'static {
    move |source: S| {
        let name = source.name_any();
        let namespace = source.namespace();
        super::related(&store, namespace.as_deref(), |k| {
            references_of(k)
                .iter()
                .any(|r| r.kind == kind && r.name == name)
        })
    }
}

/// Runs the re-rendering controller for templated objects of kind `K` in `scope`. The
/// templated objects themselves are cached in full (their template is needed to map an
/// input to them); their inputs are watched as metadata.
pub async fn run<K: Holder>(
    context: Arc<Context>,
    scope: Scope,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = context.client.clone();
    let labelled = watcher::Config::default().labels(&format!("{TEMPLATE_CONFIG}=true"));
    let controller = Controller::new(scope.api::<K>(&client), labelled);
    let store = controller.store();
    let _alive = super::synced(
        &context,
        format!("{} template controller, {scope}", K::kind(&())),
        store.clone(),
    );
    controller
        .watches(
            watch::metadata::<Secret>(&client, &scope),
            watch::every(),
            dependents(store.clone(), SourceKind::Secret),
        )
        .watches(
            watch::metadata::<ConfigMap>(&client, &scope),
            watch::every(),
            dependents(store, SourceKind::ConfigMap),
        )
        // Each render holds at most 1 MiB of values (`templating::render`): a bound on how
        // many run at once is a bound on what templates can make the operator hold.
        .with_config(super::controller_config())
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile::<K>,
            |_, _, _| Action::requeue(Duration::from_secs(30)),
            context,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!(error = %e, "template re-render failed");
            }
        })
        .await;
}

/// The reason of the Warning Event on a template that cannot be rendered.
pub const NOT_RENDERED: &str = "TemplateNotRendered";

/// Says on `object` why its template was not rendered (a reference missing, the output over
/// its limit): the templating webhook no longer reads references for callers it cannot
/// authenticate, so this is where the writer learns of it. The message names references and
/// limits, never a value.
async fn not_rendered<K: Holder>(context: &Context, object: &K, why: &str) {
    use kube::runtime::events::{Event, EventType};
    let reference = object.object_ref(&());
    let event = Event {
        type_: EventType::Warning,
        reason: NOT_RENDERED.to_string(),
        // Events longer than 1 KiB are refused.
        note: Some(
            format!("the template's output is not written: {why}")
                .chars()
                .take(1000)
                .collect(),
        ),
        action: "Render".to_string(),
        secondary: None,
    };
    if let Err(e) = context.events.publish(&event, &reference).await {
        warn!(name = %object.name_any(), error = %e, "cannot record the TemplateNotRendered Event");
    }
}

async fn reconcile<K: Holder>(object: Arc<K>, context: Arc<Context>) -> Result<Action, Error> {
    let namespace = object
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let kind = K::kind(&()).to_string();
    let dynamic = as_dynamic(object.as_ref()).map_err(|source| ApplyError::Serialize {
        kind: kind.clone(),
        name: object.name_any(),
        source,
    })?;
    let Some(seal) = &context.template_seal else {
        return Ok(Action::await_change());
    };
    let template = match Template::of(&dynamic, &kind) {
        Ok(template) => template,
        Err(e) => {
            // The webhook refused or will refuse this object; nothing to render.
            debug!(name = %object.name_any(), error = %e, "template not rendered");
            return Ok(Action::await_change());
        }
    };
    // Only what the webhook admitted, as it admitted it: anything else (written before the
    // webhook was registered, or a forged seal) would be filled in with the operator's access.
    let stamp = object
        .annotations()
        .get(SEAL)
        .map(String::as_str)
        .unwrap_or_default();
    if !seal.verify(&template.sealed(&namespace, &kind), stamp) {
        info!(name = %object.name_any(), %namespace, "template not re-rendered: the templating webhook did not admit it as it is; write it again to have it checked");
        return Ok(Action::await_change());
    }
    let rendered = match render(&context.client, &template, &kind, &namespace, None).await {
        Ok(rendered) => rendered,
        Err(e) => {
            info!(name = %object.name_any(), %namespace, error = %e, "template not rendered");
            not_rendered(&context, object.as_ref(), &e.to_string()).await;
            return Ok(Action::requeue(Duration::from_secs(300)));
        }
    };
    let key = template.output_key;
    if value_of(&dynamic, &kind, &key).as_deref() == Some(rendered.as_str()) {
        return Ok(Action::await_change());
    }
    let value = if kind == "Secret" {
        base64::engine::general_purpose::STANDARD.encode(rendered.as_bytes())
    } else {
        rendered
    };
    Api::<K>::namespaced(context.client.clone(), &namespace)
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {key: value}})),
        )
        .await
        .map_err(|source| ApplyError::Write {
            kind,
            name: object.name_any(),
            source,
        })?;
    debug!(name = %object.name_any(), "re-rendered a template");
    Ok(Action::await_change())
}
