//! Credentials the operator generates: once, into a Secret, never logged. Each reconcile
//! reads what is there and generates only what is missing, so a value rotated by hand is
//! kept; the Secret itself is an ordinary desired object, written when a value was added.

use std::collections::BTreeMap;

use crate::controller::Error;
use crate::controller::error::ObserveError;
use crate::controller::observer::{Credential, Observer};

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

/// The string data of Secret `name`, with a generated `credential` for each of `keys` it
/// lacks (all of them when the Secret does not exist). Reads only.
pub async fn read_or_generate(
    source: &impl Observer,
    namespace: &str,
    name: &str,
    keys: &[String],
    credential: Credential,
) -> Result<BTreeMap<String, String>, Error> {
    let current = source
        .secret(namespace, name)
        .await
        .map_err(ObserveError::reading(format!("Secret {name}")))?;
    // `stringData` only in a file given to `render` (the apiserver folds it into `data`).
    let (data, text) = current.map(|s| (s.data, s.string_data)).unwrap_or_default();
    let mut values: BTreeMap<String, String> = (data.unwrap_or_default().into_iter())
        .filter_map(|(k, v)| String::from_utf8(v.0).ok().map(|v| (k, v)))
        .chain(text.unwrap_or_default())
        .collect();
    for key in keys {
        if !values.contains_key(key) {
            values.insert(key.clone(), source.generate(credential, key)?);
        }
    }
    Ok(values)
}
