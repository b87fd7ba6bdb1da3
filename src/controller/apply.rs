//! The one applier: writes a resource's desired objects ([`crate::render::owned`]) kind by
//! kind, and deletes the objects of a pruned kind that the resource owns but no longer
//! wants. One list call per kind finds what the resource owns (its labels, then its UID in
//! the controller owner reference); a server-side apply under one field manager is skipped
//! when the live object already holds what would be written, so a steady-state reconcile
//! makes no write at all.

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::debug;

use super::error::ApplyError;
use crate::api::labels::{self, FIELD_MANAGER};
use crate::render::autoscaling::scaled_object_resource;
use crate::render::cloudnative_pg;
use crate::render::owned::{ClairObjects, Owned, ServiceObjects, Write};
use crate::render::routing::{http_route_resource, route_resource};
use crate::render::service::service_monitor_resource;

/// The annotation holding the hash of what the operator last applied. A change of the
/// desired object (including a field it stops setting) changes the hash and forces an apply.
pub const APPLIED: &str = "clair.projectquay.io/applied";

/// What an apply did, for logs, metrics and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Outcome {
    Created,
    Changed,
    Unchanged,
    Deleted,
    /// Someone else changed a field the operator owns; it was changed back.
    Reverted,
    /// The same, again, in a fight: changed back later ([`super::contest`]).
    Deferred,
}

/// Applies the desired objects of one resource, in its namespace.
pub struct Applier<'a> {
    pub client: &'a Client,
    pub namespace: &'a str,
    /// The owning resource's name (the `app.kubernetes.io/instance` label of what it owns).
    pub owner: &'a str,
    /// The owning resource's UID (what its controller owner references name).
    pub owner_uid: &'a str,
    /// The owning resource's kind (`Clair`, `Indexer`...): whose watches to consult.
    pub owner_kind: &'a str,
    /// What the watches show of the objects the operator owns.
    pub known: &'a super::owned::OwnedObjects,
    /// The referenced ConfigMaps and Secrets as last read: one written here is kept as written.
    pub contents: &'a super::contents::Contents,
    /// What this reconcile's observe step just read and found absent: not read again.
    pub absent: &'a super::absent::Absent,
    /// Where each outcome is counted.
    pub metrics: &'a crate::metrics::Metrics,
    /// Objects other writers keep changing: when to change them back.
    pub contests: &'a super::contest::Contests,
    /// The shortest wait of a deferred revert, for the reconcile's requeue.
    pub wait: std::sync::Mutex<Option<std::time::Duration>>,
}

impl Applier<'_> {
    /// [`Applier::apply`] for a kind known at compile time.
    pub async fn typed<T>(&self, owned: Owned<T>) -> Result<(), ApplyError>
    where
        T: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Serialize
            + DeserializeOwned
            + Clone
            + Debug,
    {
        let api = Api::namespaced(self.client.clone(), self.namespace);
        self.apply(api, &T::kind(&()), owned).await
    }

    /// [`Applier::apply`] for a kind served by an optional CRD.
    pub async fn dynamic(
        &self,
        owned: Owned<DynamicObject>,
        resource: &ApiResource,
    ) -> Result<(), ApplyError> {
        let api = Api::namespaced_with(self.client.clone(), self.namespace, resource);
        self.apply(api, &resource.kind, owned).await
    }

    /// Writes `owned` (objects of `kind`) and, when it prunes, deletes every other object
    /// of the kind the owner controls. What the owner controls, and whether an object still
    /// holds what was applied, come from the watch ([`super::owned`]) where it has an
    /// answer; otherwise one list of the kind, and a read of an object it does not settle.
    async fn apply<T>(&self, api: Api<T>, kind: &str, owned: Owned<T>) -> Result<(), ApplyError>
    where
        T: Resource + Serialize + DeserializeOwned + Clone + Debug,
    {
        if owned.untouched() {
            return Ok(());
        }
        let kind = kind.to_string();
        let cached = self
            .known
            .controlled(self.owner_kind, &kind, self.namespace, self.owner_uid);
        // Without a watch of the kind (or before it listed): one list, as before.
        let listed: Option<BTreeMap<String, T>> = match &cached {
            Some(_) => None,
            None => Some(
                api.list(&ListParams::default().labels(&labels::owned_selector(self.owner)))
                    .await
                    .map_err(|source| ApplyError::List {
                        kind: kind.clone(),
                        source,
                    })?
                    .items
                    .into_iter()
                    .filter(|o| controlled_by(o, self.owner_uid))
                    .map(|o| (o.name_any(), o))
                    .collect(),
            ),
        };
        let is_controlled = |name: &str| match (&cached, &listed) {
            (Some(cached), _) => cached.contains_key(name),
            (None, Some(listed)) => listed.contains_key(name),
            (None, None) => false,
        };
        for (name, write) in owned.objects() {
            let desired = match write {
                Write::Keep => continue,
                Write::Apply(desired) | Write::CreateOnce(desired) => desired,
            };
            let value = applied_value(desired).map_err(|source| ApplyError::Serialize {
                kind: kind.clone(),
                name: name.clone(),
                source,
            })?;
            let hash = value.hash.clone();
            // Settled by the watch: controlled, and as applied (made once, or unchanged since).
            let settled = is_controlled(name)
                && (matches!(write, Write::CreateOnce(_))
                    || self
                        .known
                        .holds(self.owner_kind, &kind, self.namespace, name, &hash));
            if settled {
                self.record(&kind, name, Outcome::Unchanged);
                continue;
            }
            // A ConfigMap or Secret the operator writes is kept as written, unless an event
            // of it passes while the write is under way ([`super::contents`]).
            let written = |now: Option<&T>, reading| match (now, reading) {
                (Some(now), Some(reading)) => self.contents.wrote(reading, now),
                (None, Some(reading)) => {
                    drop(reading);
                    if let Some(kind) = super::contents::Kind::of(&kind) {
                        self.contents.forget(kind, self.namespace, name);
                    }
                }
                (_, None) => {}
            };
            // What is applied again is kept as written; what is made once (a config
            // snapshot, mounted and never read back) only if a reconcile reads it.
            let keep = matches!(write, Write::Apply(_));
            let reading = super::contents::Kind::of(&kind)
                .map(|k| self.contents.writing(k, self.namespace, name, keep));
            // Controlled, and what it holds was applied with another hash: the operator's
            // own change, written without a read (the read would only look for a hand edit
            // of what the operator applied, and what it applied changes anyway).
            // Its UID goes with the write as a precondition: should the watch be behind a
            // delete and someone else's object of the name, the apiserver refuses the write
            // (the UID is immutable), and the object is read and judged below. (An object
            // never seen cannot be created so: the apiserver refuses a UID in an apply that
            // creates, 409, so there is no "create only" apply.)
            let superseded = cached
                .as_ref()
                .and_then(|c| c.get(name))
                .filter(|e| matches!(write, Write::Apply(_)) && !e.uid.is_empty())
                .filter(|e| e.applied_other_than(&hash))
                .map(|e| e.uid.clone());
            if let Some(uid) = superseded {
                let mut guarded = value.clone();
                guarded.value["metadata"]["uid"] = Value::String(uid);
                match apply(&api, &kind, guarded, None, None).await {
                    Ok((_, _, now)) => {
                        if let Some(now) = &now {
                            self.known
                                .verified(self.owner_kind, &kind, now.meta(), &hash);
                        }
                        written(now.as_ref(), reading);
                        self.record(&kind, name, Outcome::Changed);
                        continue;
                    }
                    Err(ApplyError::Write {
                        source: kube::Error::Api(status),
                        ..
                    }) if status.code == 409 || status.code == 422 => {}
                    Err(error) => return Err(error),
                }
            }
            // Made once and never changed after (a config snapshot): created without a read
            // first. A create never takes over an object of the name; if one exists, it is
            // read below and judged as before.
            if matches!(write, Write::CreateOnce(_))
                && let Some(created) = create(&api, &kind, name, &value.value).await?
            {
                self.known
                    .verified(self.owner_kind, &kind, created.meta(), &hash);
                written(Some(&created), reading);
                self.record(&kind, name, Outcome::Created);
                continue;
            }
            // Listed, or read by name: changed since it was seen, not (or not yet) controlled
            // by the owner (a kept Secret without an owner, or an object of the same name
            // someone else made), or not seen at all. Not read again when this reconcile's
            // observe step read it moments ago and found nothing ([`super::absent`]).
            let read;
            let current = match listed.as_ref().and_then(|l| l.get(name)) {
                Some(object) => Some(object),
                None if self.absent.take(&kind, self.namespace, name) => None,
                None => {
                    read = api.get_opt(name).await.map_err(|source| ApplyError::Read {
                        kind: kind.clone(),
                        name: name.clone(),
                        source,
                    })?;
                    // Taken over only if the operator made it and nothing else controls it
                    // (a kept Secret or claim of a deleted resource): never someone else's.
                    if let Some(existing) = &read
                        && !controlled_by(existing, self.owner_uid)
                        && !adoptable(existing)
                    {
                        return Err(ApplyError::NotOurs {
                            kind: kind.clone(),
                            name: name.clone(),
                        });
                    }
                    read.as_ref()
                }
            };
            let contest = super::contest::Key {
                owner_uid: self.owner_uid.to_string(),
                kind: kind.clone(),
                name: name.clone(),
            };
            let (outcome, now) = match (write, current) {
                (Write::CreateOnce(_), Some(current)) => {
                    (Outcome::Unchanged, Some(current.clone()))
                }
                // Gone between the create and the read: made again (a create, never a patch).
                (Write::CreateOnce(_), None) => {
                    let now = create(&api, &kind, name, &value.value).await?;
                    (Outcome::Created, now)
                }
                _ => {
                    let fight = (self.contests, &contest);
                    let (outcome, wait, now) =
                        apply(&api, &kind, value, current, Some(fight)).await?;
                    if let (Some(wait), Ok(mut shortest)) = (wait, self.wait.lock()) {
                        *shortest = Some(shortest.map_or(wait, |s| s.min(wait)));
                    }
                    (outcome, now)
                }
            };
            if let Some(now) = &now {
                self.known
                    .verified(self.owner_kind, &kind, now.meta(), &hash);
            }
            if outcome != Outcome::Unchanged {
                written(now.as_ref(), reading);
            }
            self.record(&kind, name, outcome);
        }
        if owned.prunes() {
            let unwanted: Vec<(String, Option<String>)> = match (&cached, &listed) {
                (Some(cached), _) => cached
                    .iter()
                    .map(|(name, e)| (name.clone(), Some(e.uid.clone())))
                    .collect(),
                (None, Some(listed)) => listed
                    .iter()
                    .map(|(name, o)| (name.clone(), o.uid()))
                    .collect(),
                (None, None) => Vec::new(),
            };
            for (name, uid) in unwanted {
                if !owned.objects().contains_key(&name) {
                    delete(&api, &kind, &name, uid).await?;
                    self.known
                        .forget(self.owner_kind, &kind, self.namespace, &name);
                    if let Some(kind) = super::contents::Kind::of(&kind) {
                        self.contents.forget(kind, self.namespace, &name);
                    }
                    self.record(&kind, &name, Outcome::Deleted);
                }
            }
        }
        Ok(())
    }
}

/// Everything a `Clair` owns, in dependency order. Destructured without `..`: a new kind
/// in [`ClairObjects`] does not compile until it is applied here.
pub async fn apply_clair(applier: &Applier<'_>, objects: ClairObjects) -> Result<(), ApplyError> {
    let ClairObjects {
        secrets,
        config_maps,
        services,
        stateful_sets,
        network_policies,
        postgres_clusters,
        postgres_databases,
        jobs,
        indexers,
        matchers,
        notifiers,
        cron_jobs,
        ingresses,
        routes,
        http_routes,
    } = objects;
    applier.typed(secrets).await?;
    applier.typed(config_maps).await?;
    applier.typed(services).await?;
    applier.typed(stateful_sets).await?;
    applier.typed(network_policies).await?;
    applier
        .dynamic(postgres_clusters, &cloudnative_pg::cluster_resource())
        .await?;
    applier
        .dynamic(postgres_databases, &cloudnative_pg::database_resource())
        .await?;
    applier.typed(jobs).await?;
    applier.typed(indexers).await?;
    applier.typed(matchers).await?;
    applier.typed(notifiers).await?;
    applier.typed(cron_jobs).await?;
    applier.typed(ingresses).await?;
    applier.dynamic(routes, &route_resource()).await?;
    applier.dynamic(http_routes, &http_route_resource()).await
}

/// Everything an `Indexer`, `Matcher` or `Notifier` owns, in dependency order (the config
/// snapshot before the Deployment that mounts it). Destructured without `..`, as above.
pub async fn apply_service(
    applier: &Applier<'_>,
    objects: ServiceObjects,
) -> Result<(), ApplyError> {
    let ServiceObjects {
        secrets,
        deployments,
        services,
        disruption_budgets,
        autoscalers,
        service_monitors,
        scaled_objects,
    } = objects;
    applier.typed(secrets).await?;
    applier.typed(deployments).await?;
    applier.typed(services).await?;
    applier.typed(disruption_budgets).await?;
    applier.typed(autoscalers).await?;
    applier
        .dynamic(service_monitors, &service_monitor_resource())
        .await?;
    applier
        .dynamic(scaled_objects, &scaled_object_resource())
        .await
}

impl Applier<'_> {
    /// Counts an outcome, and logs what changed.
    fn record(&self, kind: &str, name: &str, outcome: Outcome) {
        self.metrics.applied(kind, outcome.into());
        if outcome != Outcome::Unchanged {
            debug!(kind, name, ?outcome, "applied");
        }
    }
}

/// Whether an object no owner controls may be taken over: the operator made it (its
/// `managed-by` label) and no controller owns it now.
fn adoptable(object: &impl Resource) -> bool {
    let meta = object.meta();
    let ours = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::api::labels::MANAGED_BY))
        .is_some_and(|v| v == crate::api::labels::OPERATOR);
    let controlled = meta
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true));
    ours && !controlled
}

fn controlled_by(object: &impl Resource, uid: &str) -> bool {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true))
}

/// Deletes `name`, only if it is still the object listed (`uid`): one recreated under the
/// same name since is not this reconcile's to delete.
async fn delete<T>(
    api: &Api<T>,
    kind: &str,
    name: &str,
    uid: Option<String>,
) -> Result<(), ApplyError>
where
    T: Resource + DeserializeOwned + Clone + Debug,
{
    let params = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        // Gone, or another object under the name now.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(source) => Err(ApplyError::Delete {
            kind: kind.to_string(),
            name: name.to_string(),
            source,
        }),
    }
}

/// Creates `value` (of `kind`): `None` when an object of its name exists.
async fn create<T>(
    api: &Api<T>,
    kind: &str,
    name: &str,
    value: &Value,
) -> Result<Option<T>, ApplyError>
where
    T: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let object: T =
        serde_json::from_value(value.clone()).map_err(|source| ApplyError::Serialize {
            kind: kind.to_string(),
            name: name.to_string(),
            source,
        })?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    match api.create(&params, &object).await {
        Ok(created) => Ok(Some(created)),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
        Err(source) => Err(ApplyError::Write {
            kind: kind.to_string(),
            name: name.to_string(),
            source,
        }),
    }
}

/// An object as the operator applies it: its hash in the applied annotation.
#[derive(Clone)]
struct Applied {
    value: Value,
    hash: String,
}

fn applied_value<T: Serialize>(desired: &T) -> Result<Applied, serde_json::Error> {
    let mut value = serde_json::to_value(desired)?;
    let hash = crate::clairconfig::hash(&value);
    value["metadata"]["annotations"][APPLIED] = Value::String(hash.clone());
    Ok(Applied { value, hash })
}

/// Applies `desired` (of `kind`) unless `current` already holds it. A hand edit of a field the
/// operator owns makes `current` differ, so it is reverted (later, in a fight: `contest`,
/// and then the wait comes back); fields others own are left alone. Returns the object as it
/// now is (as written, or `current` when it held it; `None` when deferred).
async fn apply<T>(
    api: &Api<T>,
    kind: &str,
    desired: Applied,
    current: Option<&T>,
    contest: Option<(&super::contest::Contests, &super::contest::Key)>,
) -> Result<(Outcome, Option<std::time::Duration>, Option<T>), ApplyError>
where
    T: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    use super::contest::Verdict;
    let Applied { value, hash } = desired;
    let name = value["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // What the operator applied last is unchanged, yet the object differs: another writer.
    let mut drifted = false;
    if let Some(current) = current {
        let current_value =
            serde_json::to_value(current).map_err(|source| ApplyError::Serialize {
                kind: kind.to_string(),
                name: name.clone(),
                source,
            })?;
        let recorded = current.annotations().get(APPLIED);
        if recorded == Some(&hash) {
            if contains(&current_value, &value) {
                return Ok((Outcome::Unchanged, None, Some(current.clone())));
            }
            drifted = true;
            if let Some((contests, key)) = contest
                && let Verdict::Wait(wait) = contests.drifted(key, std::time::Instant::now())
            {
                return Ok((Outcome::Deferred, Some(wait), None));
            }
        }
    }
    let written = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&value),
        )
        .await
        .map_err(|source| ApplyError::Write {
            kind: kind.to_string(),
            name: name.clone(),
            source,
        })?;
    let outcome = match current {
        None => Outcome::Created,
        Some(current) if drifted => {
            if let Some((contests, key)) = contest {
                let writer = super::contest::last_writer(current);
                contests.reverted(key, &writer, std::time::Instant::now());
            }
            Outcome::Reverted
        }
        Some(_) => Outcome::Changed,
    };
    Ok((outcome, None, Some(written)))
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

#[cfg(test)]
mod tests {
    use super::{adoptable, contains};
    use serde_json::json;

    #[test]
    fn only_what_the_operator_made_and_nobody_controls_is_taken_over() {
        let secret = |value: serde_json::Value| -> k8s_openapi::api::core::v1::Secret {
            serde_json::from_value(value).unwrap()
        };
        let kept = secret(json!({"metadata": {"name": "clair-database",
            "labels": {"app.kubernetes.io/managed-by": "clair-operator"}}}));
        assert!(adoptable(&kept), "a kept Secret of a deleted Clair");
        let theirs = secret(json!({"metadata": {"name": "clair-database"}}));
        assert!(
            !adoptable(&theirs),
            "someone else's object of the same name"
        );
        let controlled = secret(json!({"metadata": {"name": "clair-database",
            "labels": {"app.kubernetes.io/managed-by": "clair-operator"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u", "controller": true}]}}));
        assert!(!adoptable(&controlled), "another owner's object");
    }

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
