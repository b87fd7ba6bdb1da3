//! The admission webhooks: an HTTPS server (axum, rustls) the apiserver calls for objects
//! that opt in by label, its certificate (generated, kept in a Secret, renewed and reloaded
//! without a restart), and the webhook configuration that points the apiserver at it.

pub mod callers;
pub mod certs;
pub mod configurations;
pub mod limits;
pub mod register;
pub mod replicas;
pub mod resources;
pub mod rotation;
pub mod server;
pub mod shares;
pub mod storage;
pub mod templating;
pub mod trust;
pub mod validate;

/// The label that opts a ConfigMap or Secret in to config validation.
pub use crate::api::keys::VALIDATE_CONFIG;

/// Name of the ValidatingWebhookConfiguration the operator keeps.
pub const CONFIGURATION_NAME: &str = "clair-operator";
/// Path of the config validation webhook.
pub const VALIDATE_CONFIG_PATH: &str = "/validate-config";
/// Path of the custom resource checks.
pub const VALIDATE_RESOURCE_PATH: &str = "/validate-resource";
/// Path of the templating webhook.
pub const TEMPLATE_CONFIG_PATH: &str = "/template-config";
