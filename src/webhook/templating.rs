//! The templating webhook: checks a ConfigMap or Secret labelled for templating and seals its
//! template (see [`crate::templating`]). It never answers with a rendered value: whoever
//! reaches its port could otherwise read through it what the operator may read (a forged
//! review names any user and namespace). The output is written by the re-render controller,
//! with the operator's own access, for what this webhook sealed.

use kube::Client;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use serde_json::json;

use crate::templating::seal::{SEAL, Seal};
use crate::templating::{Template, check, render};

/// JSON Pointer escaping of one path segment.
fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The patch an admitted template gets: its seal, and nothing read from the cluster.
fn seal_patch(stamp: &str) -> Result<json_patch::Patch, serde_json::Error> {
    let path = format!("/metadata/annotations/{}", pointer_segment(SEAL));
    serde_json::from_value(json!([{"op": "add", "path": path, "value": stamp}]))
}

/// The admission answer: the request patched with the template's seal, or refused. With an
/// `authenticated` caller (the apiserver, by certificate) the template is also rendered, as
/// a check whose output is dropped, so a missing reference or an output over the limit is
/// refused at once; otherwise those are found by the re-render controller.
pub async fn admit(
    client: &Client,
    seal: &Seal,
    request: &AdmissionRequest<DynamicObject>,
    authenticated: bool,
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
    let user = &request.user_info;
    let checked = if authenticated {
        render(client, &template, kind, &namespace, Some(user))
            .await
            .map(drop)
    } else {
        check(client, &template, kind, &namespace, user).await
    };
    if let Err(refusal) = checked {
        return response.deny(refusal.to_string());
    }
    // The seal that lets the re-render controller fill this template in.
    let stamp = seal.stamp(&template.sealed(&namespace, kind));
    match seal_patch(&stamp) {
        Ok(patch) => match response.clone().with_patch(patch) {
            Ok(patched) => patched,
            Err(e) => response.deny(format!("cannot encode the patch: {e}")),
        },
        Err(e) => response.deny(format!("cannot build the patch: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn pointer_segments_are_escaped() {
        assert_eq!(
            pointer_segment("clair.projectquay.io/template-seal"),
            "clair.projectquay.io~1template-seal"
        );
        assert_eq!(pointer_segment("a~b"), "a~0b");
    }

    #[test]
    fn the_patch_holds_the_seal_alone() {
        let patch = seal_patch("stamp").unwrap();
        let Value::Array(operations) = serde_json::to_value(&patch).unwrap() else {
            panic!("a patch is a list");
        };
        assert_eq!(
            operations,
            vec![
                json!({"op": "add", "path": "/metadata/annotations/clair.projectquay.io~1template-seal", "value": "stamp"})
            ]
        );
    }
}
