//! Credentials the operator generates: once, into a Secret, never logged. Later reconciles
//! read what is there, so a value rotated by hand is kept.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::Error;
use super::apply::apply;

fn random_bytes(count: usize) -> Result<Vec<u8>, Error> {
    let mut buffer = vec![0u8; count];
    getrandom::fill(&mut buffer).map_err(|e| Error::Random(e.to_string()))?;
    Ok(buffer)
}

/// `count` random bytes from the operating system, hex-encoded (safe in any connection
/// string or shell).
pub fn random_hex(count: usize) -> Result<String, Error> {
    Ok(random_bytes(count)?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// `count` random bytes, standard padded base64 (what Clair's `auth.psk.key` decodes).
pub fn random_base64(count: usize) -> Result<String, Error> {
    use base64::Engine;
    Ok(base64::engine::general_purpose::STANDARD.encode(random_bytes(count)?))
}

/// Reads `name`'s string data, adding a `generate`d value for each of `keys` it lacks
/// (creating the Secret when it does not exist).
pub async fn generated_secret(
    api: &Api<Secret>,
    name: &str,
    keys: &[String],
    generate: impl Fn() -> Result<String, Error>,
    build: impl FnOnce(&BTreeMap<String, String>) -> Secret,
) -> Result<BTreeMap<String, String>, Error> {
    let current = api.get_opt(name).await?;
    let mut values: BTreeMap<String, String> = current
        .as_ref()
        .and_then(|secret| secret.data.as_ref())
        .map(|data| {
            data.iter()
                .filter_map(|(k, v)| String::from_utf8(v.0.clone()).ok().map(|v| (k.clone(), v)))
                .collect()
        })
        .unwrap_or_default();
    let missing: Vec<&String> = keys.iter().filter(|k| !values.contains_key(*k)).collect();
    if !missing.is_empty() {
        for key in missing {
            values.insert(key.clone(), generate()?);
        }
        // Only missing keys are added; values already there are written back unchanged.
        apply(api, &build(&values), current.as_ref()).await?;
    }
    Ok(values)
}
