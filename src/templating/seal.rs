//! The templating webhook's seal on what it admitted. The webhook renders a template with
//! the writer's access; the re-render controller later renders it again with the operator's
//! own, when a referenced value changes. That is safe only for a template the webhook
//! checked: one written while the webhook was not registered yet (or by a tenant who forges
//! the output) must never be filled in with values its author may not read. So the webhook
//! stamps an HMAC of the template (namespace, kind, keys and input text) made with a key only
//! the operator holds, and the controller re-renders only what carries a valid one. The name
//! is left out (a `generateName` has none yet at admission): copying a seal to another object
//! takes reading the sealed one, whose rendered output is there to read anyway.

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use sha2::Sha256;

/// The annotation holding the seal.
pub const SEAL: &str = "clair.projectquay.io/template-seal";

const KEY: &str = "key";

/// What a seal covers: the template as the webhook admitted it.
#[derive(Clone, Copy, Debug)]
pub struct Sealed<'a> {
    pub namespace: &'a str,
    pub kind: &'a str,
    pub input_key: &'a str,
    pub output_key: &'a str,
    pub input: &'a str,
}

impl Sealed<'_> {
    /// Unambiguous bytes: a JSON array of the parts.
    fn message(&self) -> Vec<u8> {
        serde_json::json!([
            self.namespace,
            self.kind,
            self.input_key,
            self.output_key,
            self.input
        ])
        .to_string()
        .into_bytes()
    }
}

/// The operator's sealing key.
#[derive(Clone)]
pub struct Seal {
    key: Vec<u8>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seal(..)")
    }
}

impl Seal {
    pub fn from_key(key: Vec<u8>) -> Self {
        Seal { key }
    }

    fn mac(&self, what: &Sealed) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(&what.message());
        mac
    }

    /// The seal of `what`, hex.
    pub fn stamp(&self, what: &Sealed) -> String {
        hex::encode(self.mac(what).finalize().into_bytes())
    }

    /// Whether `seal` is the seal of `what` (compared in constant time).
    pub fn verify(&self, what: &Sealed, seal: &str) -> bool {
        let Ok(bytes) = hex::decode(seal) else {
            return false;
        };
        self.mac(what).verify_slice(&bytes).is_ok()
    }

    /// The key kept in Secret `name` of `namespace`, created with 32 random bytes the first
    /// time (by whichever replica comes first; the others read it).
    pub async fn load_or_create(
        client: &Client,
        namespace: &str,
        name: &str,
    ) -> Result<Self, kube::Error> {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        loop {
            if let Some(secret) = secrets.get_opt(name).await? {
                return match secret.data.as_ref().and_then(|d| d.get(KEY)) {
                    Some(key) if key.0.len() >= 32 => Ok(Seal::from_key(key.0.clone())),
                    // Not ours to overwrite: someone must look at it.
                    _ => Err(kube::Error::Service(
                        format!(
                            "Secret {namespace}/{name} has no key {KEY:?} of 32 bytes or more: \
                             delete it and the operator makes a new one"
                        )
                        .into(),
                    )),
                };
            }
            let mut key = vec![0u8; 32];
            getrandom::fill(&mut key).map_err(|e| {
                kube::Error::Service(
                    format!("the operating system gave no random bytes: {e}").into(),
                )
            })?;
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(namespace.to_string()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([(KEY.to_string(), ByteString(key.clone()))])),
                type_: Some("Opaque".to_string()),
                ..Default::default()
            };
            match secrets.create(&PostParams::default(), &secret).await {
                Ok(_) => return Ok(Seal::from_key(key)),
                // Another replica made it first: read theirs.
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed(input: &str) -> Sealed<'_> {
        Sealed {
            namespace: "team",
            kind: "Secret",
            input_key: "config.yaml.in",
            output_key: "config.yaml",
            input,
        }
    }

    #[test]
    fn a_seal_holds_for_what_was_stamped_only() {
        let seal = Seal::from_key(vec![7; 32]);
        let stamp = seal.stamp(&sealed("a: secret://db/dsn"));
        assert!(seal.verify(&sealed("a: secret://db/dsn"), &stamp));
        assert!(!seal.verify(&sealed("a: secret://other/dsn"), &stamp));
        let elsewhere = Sealed {
            namespace: "other-team",
            ..sealed("a: secret://db/dsn")
        };
        assert!(!seal.verify(&elsewhere, &stamp));
        assert!(!Seal::from_key(vec![8; 32]).verify(&sealed("a: secret://db/dsn"), &stamp));
        assert!(!seal.verify(&sealed("a: secret://db/dsn"), "forged"));
        assert!(!seal.verify(&sealed("a: secret://db/dsn"), ""));
    }
}
