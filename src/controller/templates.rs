//! Re-rendering templated configs: the templating webhook only sees writes to the templated
//! object itself, so when a Secret or ConfigMap it references changes, this controller
//! renders the template again and updates the output key.
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
            debug!(name = %object.name_any(), error = %e, "template not rendered");
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
