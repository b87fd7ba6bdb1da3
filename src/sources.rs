//! Reading the keys of ConfigMaps and Secrets that resources and templates reference:
//! through the API (a resource's config sources) or from an admitted object (a webhook's
//! or the re-render controller's view of a ConfigMap or Secret); and whether the user who
//! writes a reference may read what it names, since the operator reads with its own access.

use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::api::ConfigSource;
use crate::api::common::CaBundle;
use crate::clairconfig::Document;

/// Where referenced ConfigMaps and Secrets are read from: the cluster (a [`Client`], with
/// the operator's access), or the files given to `clair-operator render`.
pub trait ObjectSource: Sync {
    fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ConfigMap>, kube::Error>> + Send;
    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Secret>, kube::Error>> + Send;
}

impl ObjectSource for Client {
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ConfigMap>, kube::Error> {
        Api::namespaced(self.clone(), namespace).get_opt(name).await
    }
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, kube::Error> {
        Api::namespaced(self.clone(), namespace).get_opt(name).await
    }
}

/// Reads through `client`, each object once: the sources of one admission review often
/// name one Secret several times (a `Clair`'s three database keys in one Secret).
pub struct ReadOnce<'a> {
    client: &'a Client,
    config_maps: tokio::sync::Mutex<std::collections::BTreeMap<String, Option<ConfigMap>>>,
    secrets: tokio::sync::Mutex<std::collections::BTreeMap<String, Option<Secret>>>,
}

impl<'a> ReadOnce<'a> {
    pub fn new(client: &'a Client) -> Self {
        Self {
            client,
            config_maps: Default::default(),
            secrets: Default::default(),
        }
    }
}

impl ObjectSource for ReadOnce<'_> {
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ConfigMap>, kube::Error> {
        let key = format!("{namespace}/{name}");
        let mut read = self.config_maps.lock().await;
        if let Some(object) = read.get(&key) {
            return Ok(object.clone());
        }
        let object = self.client.config_map(namespace, name).await?;
        read.insert(key, object.clone());
        Ok(object)
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, kube::Error> {
        let key = format!("{namespace}/{name}");
        let mut read = self.secrets.lock().await;
        if let Some(object) = read.get(&key) {
            return Ok(object.clone());
        }
        let object = self.client.secret(namespace, name).await?;
        read.insert(key, object.clone());
        Ok(object)
    }
}

/// Reads one config source; `Ok(Err(what))` names what is missing.
pub async fn read_source(
    objects: &impl ObjectSource,
    namespace: &str,
    source: &ConfigSource,
) -> Result<Result<Document, String>, kube::Error> {
    if let Some(reference) = &source.config_map {
        let object = objects.config_map(namespace, &reference.name).await?;
        return Ok(config_map_document(
            object.as_ref(),
            &reference.name,
            &reference.key,
        ));
    }
    if let Some(reference) = &source.secret {
        let object = objects.secret(namespace, &reference.name).await?;
        return Ok(secret_document(
            object.as_ref(),
            &reference.name,
            &reference.key,
        ));
    }
    Ok(Err(
        "the config reference names neither a ConfigMap nor a Secret".into(),
    ))
}

/// The document under `key` of the ConfigMap `name` (`None`: it does not exist).
fn config_map_document(
    object: Option<&ConfigMap>,
    name: &str,
    key: &str,
) -> Result<Document, String> {
    let name = format!("ConfigMap {name}");
    let Some(object) = object else {
        return Err(format!("{name} does not exist"));
    };
    let text = object
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .cloned()
        .or_else(|| {
            object
                .binary_data
                .as_ref()
                .and_then(|d| d.get(key))
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        });
    match text {
        Some(text) => Ok(Document {
            name: format!("{name} key {key}"),
            key: key.to_string(),
            text,
            secret: false,
        }),
        None => Err(format!("{name} has no key {key}")),
    }
}

/// The document under `key` of the Secret `name` (`None`: it does not exist).
pub fn secret_document(object: Option<&Secret>, name: &str, key: &str) -> Result<Document, String> {
    let name = format!("Secret {name}");
    let Some(object) = object else {
        return Err(format!("{name} does not exist"));
    };
    let bytes = object
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            object
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        });
    match bytes {
        Some(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Ok(Document {
                name: format!("{name} key {key}"),
                key: key.to_string(),
                text,
                secret: true,
            }),
            Err(_) => Err(format!("{name} key {key} is not UTF-8 text")),
        },
        None => Err(format!("{name} has no key {key}")),
    }
}

/// The CA certificates of a `caBundle`: every PEM certificate under any key of the
/// ConfigMap or Secret. `Ok(Err(what))` says what is missing, never what a value holds.
pub async fn read_ca_bundle(
    objects: &impl ObjectSource,
    namespace: &str,
    bundle: &CaBundle,
) -> Result<Result<Vec<CertificateDer<'static>>, String>, kube::Error> {
    let (name, values): (String, Option<Vec<Vec<u8>>>) = match (&bundle.config_map, &bundle.secret)
    {
        (Some(name), _) => {
            let values = objects.config_map(namespace, name).await?.map(|object| {
                let text = object
                    .data
                    .unwrap_or_default()
                    .into_values()
                    .map(String::into_bytes);
                let binary = object
                    .binary_data
                    .unwrap_or_default()
                    .into_values()
                    .map(|b| b.0);
                text.chain(binary).collect()
            });
            (format!("caBundle: ConfigMap {name}"), values)
        }
        (None, Some(name)) => {
            let values = objects.secret(namespace, name).await?.map(|object| {
                // `stringData` only in a file given to `render`.
                let text = object
                    .string_data
                    .unwrap_or_default()
                    .into_values()
                    .map(String::into_bytes);
                let binary = object.data.unwrap_or_default().into_values().map(|b| b.0);
                binary.chain(text).collect()
            });
            (format!("caBundle: Secret {name}"), values)
        }
        (None, None) => return Ok(Err("caBundle names neither a ConfigMap nor a Secret".into())),
    };
    let Some(values) = values else {
        return Ok(Err(format!("{name} does not exist")));
    };
    let certificates: Vec<CertificateDer<'static>> = values
        .iter()
        .flat_map(|value| CertificateDer::pem_slice_iter(value).filter_map(Result::ok))
        .collect();
    if certificates.is_empty() {
        return Ok(Err(format!(
            "{name} holds no PEM certificate (-----BEGIN CERTIFICATE-----) under any key"
        )));
    }
    Ok(Ok(certificates))
}

/// The text under `key` of a ConfigMap (`data`, `binaryData`) or Secret (`data` base64,
/// `stringData`).
pub fn value_of(object: &DynamicObject, kind: &str, key: &str) -> Option<String> {
    let data = &object.data;
    if kind == "Secret" {
        if let Some(text) = data["stringData"][key].as_str() {
            return Some(text.to_string());
        }
        let encoded = data["data"].get(key)?.clone();
        let bytes: ByteString = serde_json::from_value(encoded).ok()?;
        return String::from_utf8(bytes.0).ok();
    }
    if let Some(text) = data["data"][key].as_str() {
        return Some(text.to_string());
    }
    let encoded = data["binaryData"].get(key)?.clone();
    let bytes: ByteString = serde_json::from_value(encoded).ok()?;
    String::from_utf8(bytes.0).ok()
}

/// Whether `user` may `get` the object `name` of `resource` (`secrets`, `configmaps`) in
/// `namespace`: a SubjectAccessReview, so the operator's own access never stands in for
/// the writer's.
pub async fn may_get(
    client: &Client,
    user: &UserInfo,
    namespace: &str,
    resource: &str,
    name: &str,
) -> Result<bool, kube::Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_string()),
                verb: Some("get".to_string()),
                resource: Some(resource.to_string()),
                name: Some(name.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviewed = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(reviewed.status.is_some_and(|s| s.allowed))
}
