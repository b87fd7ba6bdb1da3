//! Quay's side of a `Clair` with `spec.quay` (what Quay expects of Clair, checked in Quay's
//! and Clair's source: `../shared/notes/quay.md`; how to connect one: `docs/quay.md`): the
//! notifier's delivery to Quay's `/secscan/notification`, the one base URL Quay is given,
//! and the Secret holding the keys of Quay's config that point it at this Clair.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

use super::clair::ClairInput;
use super::routing;
use crate::api::clair::{QuaySpec, QuayStatus};

/// The key of the Secret `<clair>-quay`: a fragment of Quay's `config.yaml`.
pub const CONFIG_KEY: &str = "config.yaml";
/// Quay's endpoint for Clair's notifications.
pub const NOTIFICATION_PATH: &str = "/secscan/notification";
/// Where Clair serves a notification's pages (its route ends with `/`: Clair joins the
/// notification's id onto it).
pub const CALLBACK_PATH: &str = "/notifier/api/v1/notification/";
/// How often the notifier looks for new notifications and retries a refused delivery:
/// quay-operator's values. Clair's own defaults are six hours and one hour, and it replaces
/// anything under a minute with them.
pub const POLL_INTERVAL: &str = "5m";
pub const DELIVERY_INTERVAL: &str = "1m";

/// The name of the Secret holding Quay's side.
pub fn secret_name(input: &ClairInput) -> String {
    format!("{}-quay", input.name)
}

/// The base URL Quay is given (`SECURITY_SCANNER_V4_ENDPOINT`), without a trailing `/`:
/// `spec.quay.endpoint`, else the routing host's URL. `None` without `spec.quay` (or with
/// neither, which the schema refuses).
pub fn endpoint(input: &ClairInput) -> Option<String> {
    let quay = input.spec.quay.as_ref()?;
    let url = match &quay.endpoint {
        Some(endpoint) => endpoint.clone(),
        None => routing::external_url(input.spec.routing.as_ref()?)?,
    };
    Some(url.trim_end_matches('/').to_string())
}

/// Quay's notification endpoint under `spec.quay.url`.
pub fn notification_url(quay: &QuaySpec) -> String {
    format!("{}{NOTIFICATION_PATH}", quay.url.trim_end_matches('/'))
}

/// The notifier keys of the generated config: delivery to Quay, with a callback Clair
/// serves under the endpoint Quay is given.
pub fn notifier_config(input: &ClairInput) -> Option<Value> {
    let quay = input.spec.quay.as_ref()?;
    let endpoint = endpoint(input)?;
    Some(json!({
        "poll_interval": POLL_INTERVAL,
        "delivery_interval": DELIVERY_INTERVAL,
        "webhook": {
            "target": notification_url(quay),
            "callback": format!("{endpoint}{CALLBACK_PATH}"),
        },
    }))
}

/// The keys of Quay's `config.yaml` that point it at this Clair, signing with `psk`.
pub fn quay_config(input: &ClairInput, psk: &str) -> Option<Value> {
    Some(json!({
        "FEATURE_SECURITY_SCANNER": true,
        // Without a notifier, no notification ever comes; Quay's worker would wait idle.
        "FEATURE_SECURITY_NOTIFICATIONS": input.notifier_enabled(),
        "SECURITY_SCANNER_V4_ENDPOINT": endpoint(input)?,
        "SECURITY_SCANNER_V4_PSK": psk,
    }))
}

/// The Secret `<clair>-quay`, whose `config.yaml` merges into Quay's config bundle.
pub fn secret(input: &ClairInput, psk: &str) -> Option<Secret> {
    let config = quay_config(input, psk)?;
    let text = serde_saphyr::to_string(&config).ok()?;
    Some(Secret {
        metadata: input.metadata(secret_name(input), "quay"),
        data: Some(BTreeMap::from([(
            CONFIG_KEY.to_string(),
            ByteString(text.into_bytes()),
        )])),
        type_: Some("Opaque".to_string()),
        ..Default::default()
    })
}

/// What `status.quay` tells.
pub fn status(input: &ClairInput) -> Option<QuayStatus> {
    let quay = input.spec.quay.as_ref()?;
    Some(QuayStatus {
        endpoint: endpoint(input)?,
        config_secret: secret_name(input),
        notification_url: notification_url(quay),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ClairSpec;
    use crate::api::ServiceKind;
    use crate::clairconfig::{self, Document};
    use crate::render::clair::{ConnStrings, root_config};

    fn spec(quay: Value) -> ClairSpec {
        serde_json::from_value(json!({
            "database": {"external": {
                "indexer": {"name": "db", "key": "i"}, "matcher": {"name": "db", "key": "m"},
                "notifier": {"name": "db", "key": "n"}}},
            "routing": {"host": "clair.example.com", "tlsSecretName": "tls"},
            "quay": quay,
        }))
        .unwrap()
    }

    #[test]
    fn the_notifier_delivers_to_quay_with_a_callback_under_the_endpoint() {
        let spec = spec(json!({"url": "https://quay.example.com/"}));
        let input = ClairInput::example(&spec);
        assert_eq!(
            endpoint(&input).as_deref(),
            Some("https://clair.example.com")
        );
        let config = root_config(&input, &ConnStrings::example(), "a2V5");
        let notifier = &config["notifier"];
        assert_eq!(
            notifier["webhook"]["target"],
            "https://quay.example.com/secscan/notification"
        );
        assert_eq!(
            notifier["webhook"]["callback"],
            "https://clair.example.com/notifier/api/v1/notification/"
        );
        assert_eq!(notifier["poll_interval"], POLL_INTERVAL);
        assert_eq!(notifier["delivery_interval"], DELIVERY_INTERVAL);
        assert!(
            (config["auth"]["psk"]["iss"].as_array().unwrap()).contains(&json!("quay")),
            "{config}"
        );
        // The generated config is one Clair's notifier starts with (no error, no warning).
        let root = Document {
            name: "root".to_string(),
            key: "config.yaml".to_string(),
            text: config.to_string(),
            secret: true,
        };
        let checked = clairconfig::check(&root, &[], ServiceKind::Notifier);
        assert!(checked.problems.is_empty(), "{:?}", checked.problems);
    }

    #[test]
    fn quays_side_holds_the_endpoint_the_key_and_the_features() {
        let spec = spec(
            json!({"url": "http://quay-app.quay.svc", "endpoint": "http://ingress.example.internal/"}),
        );
        let input = ClairInput::example(&spec);
        let secret = secret(&input, "a2V5").unwrap();
        assert_eq!(secret.metadata.name.as_deref(), Some("clair-quay"));
        let text = String::from_utf8(secret.data.unwrap()[CONFIG_KEY].0.clone()).unwrap();
        let config: Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(
            config,
            json!({
                "FEATURE_SECURITY_SCANNER": true,
                "FEATURE_SECURITY_NOTIFICATIONS": true,
                "SECURITY_SCANNER_V4_ENDPOINT": "http://ingress.example.internal",
                "SECURITY_SCANNER_V4_PSK": "a2V5",
            })
        );
        let status = status(&input).unwrap();
        assert_eq!(
            status.notification_url,
            "http://quay-app.quay.svc/secscan/notification"
        );
        assert_eq!(status.config_secret, "clair-quay");
    }

    #[test]
    fn without_quay_nothing_changes() {
        let mut spec = spec(Value::Null);
        spec.quay = None;
        let input = ClairInput::example(&spec);
        assert!(secret(&input, "a2V5").is_none());
        assert!(status(&input).is_none());
        assert!(
            root_config(&input, &ConnStrings::example(), "a2V5")["notifier"]["webhook"].is_null()
        );
    }
}
