//! Server-side apply under one field manager, skipped when the object already holds what we
//! would write, so a steady-state reconcile makes no write at all; and deletion of owned
//! objects that are no longer desired.

use std::fmt::Debug;

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Error, FIELD_MANAGER};

/// The annotation holding the hash of what the operator last applied. A change of the
/// desired object (including a field it stops setting) changes the hash and forces an apply.
pub const APPLIED: &str = "clair.projectquay.io/applied";

/// What an apply did, for metrics and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Updated,
    Unchanged,
}

/// Applies `desired` unless `current` already holds it. A hand edit of a field the operator
/// owns makes `current` differ, so it is reverted; fields others own are left alone.
pub async fn apply<T>(api: &Api<T>, desired: &T, current: Option<&T>) -> Result<Outcome, Error>
where
    T: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let mut value = serde_json::to_value(desired).map_err(Error::Serialize)?;
    let digest = Sha256::digest(value.to_string().as_bytes());
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    value["metadata"]["annotations"][APPLIED] = Value::String(hash.clone());
    if let Some(current) = current {
        let current_value = serde_json::to_value(current).map_err(Error::Serialize)?;
        let recorded = current.annotations().get(APPLIED);
        if recorded == Some(&hash) && contains(&current_value, &value) {
            return Ok(Outcome::Unchanged);
        }
    }
    let name = desired.name_any();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&value),
    )
    .await?;
    Ok(if current.is_some() {
        Outcome::Updated
    } else {
        Outcome::Created
    })
}

/// Reads the live object named like `desired`, then [`apply`]s.
pub async fn apply_fresh<T>(api: &Api<T>, desired: &T) -> Result<Outcome, Error>
where
    T: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let current = api.get_opt(&desired.name_any()).await?;
    apply(api, desired, current.as_ref()).await
}

/// Whether `actual` holds every field of `desired` with the same value (lists element by
/// element). Fields only in `actual` (defaults, other managers) do not matter.
pub fn contains(actual: &Value, desired: &Value) -> bool {
    match (actual, desired) {
        (_, Value::Null) => true,
        (Value::Object(a), Value::Object(d)) => d
            .iter()
            .all(|(k, dv)| a.get(k).is_some_and(|av| contains(av, dv)) || dv.is_null()),
        (Value::Array(a), Value::Array(d)) => {
            a.len() == d.len() && a.iter().zip(d).all(|(av, dv)| contains(av, dv))
        }
        (a, d) => a == d,
    }
}

/// Deletes the objects of `api` that carry `selector`, are controlled by `owner_uid`, and
/// whose names `keep` rejects. Returns the names deleted.
pub async fn delete_unwanted<T>(
    api: &Api<T>,
    selector: &str,
    owner_uid: &str,
    keep: impl Fn(&T) -> bool,
) -> Result<Vec<String>, Error>
where
    T: Resource + DeserializeOwned + Clone + Debug,
{
    let mut deleted = Vec::new();
    for object in api.list(&ListParams::default().labels(selector)).await? {
        let owned = object
            .owner_references()
            .iter()
            .any(|o| o.uid == owner_uid && o.controller == Some(true));
        if owned && !keep(&object) {
            let name = object.name_any();
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => deleted.push(name),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::contains;
    use serde_json::json;

    #[test]
    fn an_object_with_defaults_contains_what_was_applied() {
        let desired = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let actual = json!({"spec": {"replicas": 2, "revisionHistoryLimit": 10, "template": {"spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicy": "IfNotPresent"}], "dnsPolicy": "ClusterFirst"}}}});
        assert!(contains(&actual, &desired));
    }

    #[test]
    fn a_hand_edit_or_a_missing_list_item_is_a_difference() {
        let desired = json!({"spec": {"replicas": 2, "ports": [{"port": 1}, {"port": 2}]}});
        assert!(!contains(
            &json!({"spec": {"replicas": 3, "ports": [{"port": 1}, {"port": 2}]}}),
            &desired
        ));
        assert!(!contains(
            &json!({"spec": {"replicas": 2, "ports": [{"port": 1}]}}),
            &desired
        ));
        assert!(!contains(&json!({"spec": {}}), &desired));
    }
}
