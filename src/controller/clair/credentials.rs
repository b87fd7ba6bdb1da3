//! Credentials the operator generates: once, into a Secret, never logged. Each reconcile
//! reads what is there and generates only what is missing, so a value rotated by hand is
//! kept; the Secret itself is an ordinary desired object, written when a value was added.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;

use crate::controller::Error;
use crate::controller::error::ObserveError;

fn random_bytes(count: usize) -> Result<Vec<u8>, Error> {
    let mut buffer = vec![0u8; count];
    getrandom::fill(&mut buffer).map_err(|e| Error::Random(e.to_string()))?;
    Ok(buffer)
}

/// `count` random bytes from the operating system, hex-encoded (safe in any connection
/// string or shell).
pub fn random_hex(count: usize) -> Result<String, Error> {
    Ok(hex::encode(random_bytes(count)?))
}

/// `count` random bytes, standard padded base64 (what Clair's `auth.psk.key` decodes).
pub fn random_base64(count: usize) -> Result<String, Error> {
    use base64::Engine;
    Ok(base64::engine::general_purpose::STANDARD.encode(random_bytes(count)?))
}

/// The string data of Secret `name`, with a `generate`d value for each of `keys` it lacks
/// (all of them when the Secret does not exist). Reads only.
pub async fn read_or_generate(
    client: &Client,
    namespace: &str,
    name: &str,
    keys: &[String],
    generate: impl Fn() -> Result<String, Error>,
) -> Result<BTreeMap<String, String>, Error> {
    let current = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(ObserveError::reading(format!("Secret {name}")))?;
    let mut values: BTreeMap<String, String> = current
        .and_then(|secret| secret.data)
        .map(|data| {
            data.into_iter()
                .filter_map(|(k, v)| String::from_utf8(v.0).ok().map(|v| (k, v)))
                .collect()
        })
        .unwrap_or_default();
    for key in keys {
        if !values.contains_key(key) {
            values.insert(key.clone(), generate()?);
        }
    }
    Ok(values)
}
