//! The templating webhook: answers an admission request for a ConfigMap or Secret labelled
//! for templating with a patch that writes the rendered output (see [`crate::templating`]).

use base64::Engine;
use kube::Client;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use serde_json::{Value, json};

use crate::templating::seal::{SEAL, Seal};
use crate::templating::{Template, render};

/// JSON Pointer escaping of one path segment.
fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The admission answer: the request patched with the rendered output, or refused.
pub async fn admit(
    client: &Client,
    seal: &Seal,
    request: &AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(object) = &request.object else {
        return response;
    };
    let kind = request.kind.kind.as_str();
    let namespace = request.namespace.clone().unwrap_or_default();
    let template = match Template::of(object, kind) {
        Ok(template) => template,
        Err(refusal) => return response.deny(refusal.to_string()),
    };
    let user = Some(&request.user_info);
    let rendered = match render(client, &template, kind, &namespace, user).await {
        Ok(rendered) => rendered,
        Err(refusal) => return response.deny(refusal.to_string()),
    };
    let output_key = &template.output_key;
    // The seal that lets the re-render controller fill this template in again later.
    let stamp = seal.stamp(&template.sealed(&namespace, kind));
    let value = if kind == "Secret" {
        Value::String(base64::engine::general_purpose::STANDARD.encode(rendered.as_bytes()))
    } else {
        Value::String(rendered)
    };
    let mut operations = Vec::new();
    if object.data.get("data").is_none_or(Value::is_null) {
        operations.push(json!({"op": "add", "path": "/data", "value": {}}));
    }
    operations.push(json!({"op": "add", "path": format!("/data/{}", pointer_segment(output_key)), "value": value}));
    operations.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", pointer_segment(SEAL)), "value": stamp}));
    match serde_json::from_value::<json_patch::Patch>(Value::Array(operations)) {
        Ok(patch) => match response.clone().with_patch(patch) {
            Ok(patched) => patched,
            Err(e) => response.deny(format!("cannot encode the patch: {e}")),
        },
        Err(e) => response.deny(format!("cannot build the patch: {e}")),
    }
}
