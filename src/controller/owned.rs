//! What the operator knows of the objects it owns, from the metadata watches it runs anyway
//! (they trigger the owners' reconciles): per object a few strings (UID, resourceVersion,
//! generation, the applied-hash annotation, its controller's UID) and what the operator last
//! saw it hold. The applier decides "unchanged" and what to prune from here and reads an
//! object live only where this cannot answer: never seen, changed since (another
//! resourceVersion, or for a kind with a generation another generation), or a watch not yet
//! listed.
//!
//! Why a changed spec is still seen: every write gives an object a new resourceVersion, and
//! the watch brings it; an object the operator verified at one resourceVersion and finds at
//! another is read live and compared in full (`apply::contains`), so a hand edit is reverted
//! as before. Kinds with a `metadata.generation` (Deployments, StatefulSets, the operator's
//! own kinds...) also change resourceVersion with every status update of their controller:
//! for them an unchanged generation is enough (the apiserver raises it on any change of the
//! spec), so a rollout's status updates cost no read. The price: an edit of such an object's
//! labels or annotations alone is not noticed until its spec changes or the operator
//! restarts (the labels the watches select on are: without them the object leaves the
//! watch, and the next reconcile reads it).
//!
//! A service controller watches its Deployments in full and keeps of each what its phase is
//! decided from ([`DeploymentState`], about 200 bytes more), so a reconcile reads its
//! Deployment only where the watch cannot answer (not listed yet, or just written and its
//! event not here yet).
//!
//! Memory: one entry per owned object, its strings packed ([`Packed`]: no allocation of its
//! own) and its `namespace/name` one string shared with the index by controller, about 250
//! bytes; kept per controller, watched kind and scope, so one watch's relist replaces its
//! own entries only.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Resource;
use kube::api::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};

use super::packed::Packed;
use super::service::workload::DeploymentState;
use crate::api::labels;

/// An object a watch brings: its metadata, and for a Deployment watched in full, its state.
pub trait Watched: Resource {
    fn deployment_state(&self) -> Option<DeploymentState> {
        None
    }
}

impl<K: Resource> Watched for PartialObjectMeta<K> where PartialObjectMeta<K>: Resource {}

impl Watched for Deployment {
    fn deployment_state(&self) -> Option<DeploymentState> {
        Some(DeploymentState::of(self))
    }
}

/// One owned object as its watch last showed it: its strings packed ([`Packed`]), no
/// allocation of its own (a Deployment's state aside).
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    uid: Packed,
    resource_version: Packed,
    generation: Option<i64>,
    /// Its applied-hash annotation (`apply::APPLIED`).
    applied: Option<Packed>,
    /// The UID its controller owner reference names.
    controller: Option<Packed>,
    /// What the operator last saw it hold: the hash it applied, at this resourceVersion
    /// (and generation). Kept across watch events of the same UID.
    verified: Option<Verified>,
    /// A Deployment watched in full: what its phase is decided from, as of this
    /// resourceVersion (`None`: not watched in full, or written here since the watch showed it).
    /// Boxed: most entries are not Deployments, and inline it would double every entry.
    deployment: Option<Box<DeploymentState>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Verified {
    hash: Packed,
    resource_version: Packed,
    generation: Option<i64>,
}

/// An owned object as the applier needs it: what to write with a precondition (its UID)
/// and whether what it holds was applied with another hash.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub uid: String,
    applied: Option<Packed>,
}

impl Seen {
    /// Whether it holds what the operator applied with a hash other than `hash`.
    pub fn applied_other_than(&self, hash: &str) -> bool {
        self.applied
            .as_ref()
            .is_some_and(|applied| !applied.is(hash))
    }
}

impl Entry {
    fn of(meta: &kube::api::ObjectMeta) -> Self {
        let packed = |text: Option<&String>| Packed::of(text.map_or("", String::as_str));
        Entry {
            uid: packed(meta.uid.as_ref()),
            resource_version: packed(meta.resource_version.as_ref()),
            generation: meta.generation,
            applied: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(super::apply::APPLIED))
                .map(|hash| Packed::of(hash)),
            controller: meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .map(|o| Packed::of(&o.uid)),
            verified: None,
            deployment: None,
        }
    }

    /// Whether the object still holds what the operator applied with `hash`.
    fn holds(&self, hash: &str) -> bool {
        let Some(verified) = &self.verified else {
            return false;
        };
        let same_version = verified.resource_version == self.resource_version
            || (verified.generation.is_some() && verified.generation == self.generation);
        verified.hash.is(hash) && self.applied.as_ref() == Some(&verified.hash) && same_version
    }
}

/// Which watch filled a map: the owner's kind (each controller watches for its own), the
/// watched kind, and the namespace of a namespaced scope.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct MapKey {
    owner_kind: String,
    kind: String,
    scope: Option<String>,
}

#[derive(Default)]
struct Map {
    /// The watch has listed once: an object missing here does not exist (or is very new).
    listed: bool,
    objects: Objects,
    /// During a relist, what it listed so far (swapped in when it ends).
    listing: Option<Objects>,
}

/// An object's `namespace/name` (neither holds a `/`), shared by its entry and the index.
type Name = std::sync::Arc<str>;

fn name_of(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// One watch's entries by namespace and name, and the names each controller UID controls:
/// an owner's objects are found without walking every entry (at 1,000 Clairs in one
/// namespace a walk was 3,000 entries a kind, at every reconcile).
#[derive(Default)]
struct Objects {
    /// Boxed: a table is up to half empty after each growth, and with entries inline (up to
    /// 192 bytes) every empty bucket was as large as an entry.
    entries: HashMap<Name, Box<Entry>>,
    by_controller: HashMap<Packed, Vec<Name>>,
}

impl Objects {
    fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.get(name).map(|entry| &**entry)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut Entry> {
        self.entries.get_mut(name).map(|entry| &mut **entry)
    }

    fn insert(&mut self, name: &str, entry: Entry) {
        let name: Name = match self.entries.get_key_value(name) {
            Some((shared, _)) => shared.clone(),
            None => name.into(),
        };
        if let Some(controller) = &entry.controller {
            let names = self.by_controller.entry(controller.clone()).or_default();
            if !names.contains(&name) {
                names.push(name.clone());
            }
        }
        if let Some(old) = self.entries.insert(name.clone(), Box::new(entry)) {
            self.unindex(&name, &old);
        }
    }

    fn remove(&mut self, name: &str) {
        if let Some((name, old)) = self.entries.remove_entry(name) {
            self.unindex(&name, &old);
        }
    }

    /// Drops `name` from the index of `old`'s controller, unless the entry now there has
    /// the same controller.
    fn unindex(&mut self, name: &Name, old: &Entry) {
        let Some(controller) = &old.controller else {
            return;
        };
        if self.entries.get(name).and_then(|e| e.controller.as_ref()) == Some(controller) {
            return;
        }
        if let Some(names) = self.by_controller.get_mut(controller) {
            names.retain(|n| n != name);
            if names.is_empty() {
                self.by_controller.remove(controller);
            }
        }
    }

    /// The entries controlled by `controller` in `namespace`, by name (without the namespace).
    fn controlled<'a>(
        &'a self,
        namespace: &'a str,
        controller: &str,
    ) -> impl Iterator<Item = (&'a str, &'a Entry)> + 'a {
        self.by_controller
            .get(&Packed::of(controller))
            .into_iter()
            .flatten()
            .filter_map(move |full| {
                let name = full.strip_prefix(namespace)?.strip_prefix('/')?;
                Some((name, &**self.entries.get(full)?))
            })
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Every controller's owned objects, by watch.
#[derive(Default)]
pub struct OwnedObjects {
    maps: Mutex<HashMap<MapKey, Map>>,
}

impl OwnedObjects {
    /// `stream` (the watch of `kind` in `scope`, metadata only), recording on the way what it
    /// shows of the objects an `owner_kind` controls and the operator manages.
    pub fn tap<O, S>(
        self: &std::sync::Arc<Self>,
        owner_kind: &str,
        kind: &str,
        scope: Option<&str>,
        stream: S,
    ) -> impl Stream<Item = S::Item> + Send + 'static + use<O, S>
    where
        O: Watched + Clone + Send + 'static,
        S: Stream<Item = Result<Event<O>, watcher::Error>> + Send + 'static,
    {
        let key = MapKey {
            owner_kind: owner_kind.to_string(),
            kind: kind.to_string(),
            scope: scope.map(str::to_string),
        };
        let owned = self.clone();
        let owner_kind = owner_kind.to_string();
        stream.map(move |event| {
            if let Ok(event) = &event {
                owned.record(&key, &owner_kind, event);
            }
            event
        })
    }

    fn record<O: Watched>(&self, key: &MapKey, owner_kind: &str, event: &Event<O>) {
        let ours = |meta: &kube::api::ObjectMeta| {
            let managed = meta
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::MANAGED_BY))
                .is_some_and(|v| v == labels::OPERATOR);
            let controlled = meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.kind == owner_kind);
            managed && controlled
        };
        let name_in = |meta: &kube::api::ObjectMeta| {
            name_of(
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            )
        };
        let Ok(mut maps) = self.maps.lock() else {
            return;
        };
        let map = maps.entry(key.clone()).or_default();
        match event {
            Event::Apply(object) | Event::InitApply(object) => {
                let meta = object.meta();
                let name = name_in(meta);
                let mut entry = Entry::of(meta);
                entry.deployment = object.deployment_state().map(Box::new);
                // What was verified of this same object holds until it changes.
                entry.verified = map
                    .objects
                    .get(&name)
                    .filter(|p| p.uid == entry.uid)
                    .and_then(|p| p.verified.clone());
                let objects = match (event, map.listing.as_mut()) {
                    (Event::InitApply(_), Some(listing)) => listing,
                    _ => &mut map.objects,
                };
                if !ours(meta) {
                    objects.remove(&name);
                    return;
                }
                objects.insert(&name, entry);
            }
            Event::Delete(object) => {
                map.objects.remove(&name_in(object.meta()));
            }
            Event::Init => map.listing = Some(Objects::default()),
            Event::InitDone => {
                if let Some(listed) = map.listing.take() {
                    map.objects = listed;
                }
                map.listed = true;
            }
        }
    }

    fn with_map<T>(
        &self,
        owner_kind: &str,
        kind: &str,
        namespace: &str,
        f: impl FnOnce(&mut Map) -> T,
    ) -> Option<T> {
        let mut maps = self.maps.lock().ok()?;
        let scoped = MapKey {
            owner_kind: owner_kind.to_string(),
            kind: kind.to_string(),
            scope: Some(namespace.to_string()),
        };
        let key = if maps.contains_key(&scoped) {
            scoped
        } else {
            MapKey {
                scope: None,
                ..scoped
            }
        };
        maps.get_mut(&key).filter(|m| m.listed).map(f)
    }

    /// The objects of `kind` in `namespace` controlled by `owner_uid`, by name: `None` when
    /// no watch of that kind for `owner_kind` has listed yet (read them live).
    pub fn controlled(
        &self,
        owner_kind: &str,
        kind: &str,
        namespace: &str,
        owner_uid: &str,
    ) -> Option<BTreeMap<String, Seen>> {
        self.with_map(owner_kind, kind, namespace, |map| {
            map.objects
                .controlled(namespace, owner_uid)
                .map(|(name, e)| {
                    let seen = Seen {
                        uid: e.uid.to_string(),
                        applied: e.applied.clone(),
                    };
                    (name.to_string(), seen)
                })
                .collect()
        })
    }

    /// Whether a watch of `kind` for `owner_kind` over `namespace` has listed: an object
    /// it does not show was not there (or is very new).
    pub fn listed(&self, owner_kind: &str, kind: &str, namespace: &str) -> bool {
        self.with_map(owner_kind, kind, namespace, |_| ()).is_some()
    }

    /// Whether object `name` still holds what the operator applied with `hash`, as far as
    /// the watch tells: no read needed.
    pub fn holds(
        &self,
        owner_kind: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        hash: &str,
    ) -> bool {
        self.with_map(owner_kind, kind, namespace, |map| {
            map.objects
                .get(&name_of(namespace, name))
                .is_some_and(|e| e.holds(hash))
        })
        .unwrap_or(false)
    }

    /// Records that object `meta` (as just written, or read and found unchanged) holds what
    /// the operator applied with `hash`. The entry is made if the watch has not brought it
    /// yet: the next reconcile need not read back the operator's own write.
    pub fn verified(&self, owner_kind: &str, kind: &str, meta: &kube::api::ObjectMeta, hash: &str) {
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        let name = name_of(namespace, meta.name.as_deref().unwrap_or_default());
        self.with_map(owner_kind, kind, namespace, |map| {
            let mut entry = Entry::of(meta);
            let verified = Verified {
                hash: Packed::of(hash),
                resource_version: entry.resource_version.clone(),
                generation: entry.generation,
            };
            let seen = map.objects.get_mut(&name).filter(|p| p.uid == entry.uid);
            match seen {
                // The watch already brought this version or a later one (a status update
                // of the same spec, say): kept, with what was verified.
                Some(seen) if seen.resource_version.at_least(&entry.resource_version) => {
                    seen.verified = Some(verified);
                }
                // A write's own state is not here until its event is.
                _ => {
                    entry.verified = Some(verified);
                    map.objects.insert(&name, entry);
                }
            }
        });
    }

    /// Deployment `name`, controlled by an `owner_kind`, as its watch last showed it, when
    /// that is the spec the operator last wrote or verified (the same generation). `None`
    /// when the watch cannot say: read it. Not listed yet; not in the watch (gone, or a
    /// selector label removed by hand: only a read tells); written here since its last
    /// event; or its spec changed by someone else (a fight over the pod template must be
    /// judged from the template itself, not from the operator's hash of what it applied).
    pub fn deployment(
        &self,
        owner_kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<DeploymentState> {
        let kind = Deployment::kind(&());
        self.with_map(owner_kind, &kind, namespace, |map| {
            let entry = map.objects.get(&name_of(namespace, name))?;
            let spec_verified = entry
                .verified
                .as_ref()
                .is_some_and(|v| v.generation.is_some() && v.generation == entry.generation);
            if spec_verified {
                entry.deployment.as_deref().cloned()
            } else {
                None
            }
        })
        .flatten()
    }

    /// The resourceVersion the watch last showed of object `name`.
    pub fn resource_version(
        &self,
        owner_kind: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<String> {
        self.with_map(owner_kind, kind, namespace, |map| {
            map.objects
                .get(&name_of(namespace, name))
                .map(|e| e.resource_version.to_string())
        })
        .flatten()
    }

    /// Forgets what was verified of object `name` (a write refused as stale, a delete).
    pub fn forget(&self, owner_kind: &str, kind: &str, namespace: &str, name: &str) {
        self.with_map(owner_kind, kind, namespace, |map| {
            map.objects.remove(&name_of(namespace, name));
        });
    }

    /// Entries held, over every watch.
    pub fn entries(&self) -> usize {
        self.maps
            .lock()
            .map(|maps| maps.values().map(|m| m.objects.len()).sum())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    const OWNER: &str = "owner-uid";

    fn meta(rv: &str, generation: Option<i64>, applied: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some("ns".into()),
            name: Some("clair-indexer".into()),
            uid: Some("object-uid".into()),
            resource_version: Some(rv.into()),
            generation,
            labels: Some([(labels::MANAGED_BY.to_string(), labels::OPERATOR.to_string())].into()),
            annotations: Some(
                [(
                    super::super::apply::APPLIED.to_string(),
                    applied.to_string(),
                )]
                .into(),
            ),
            owner_references: Some(vec![OwnerReference {
                kind: "Indexer".into(),
                uid: OWNER.into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    fn event(meta: ObjectMeta) -> Event<PartialObjectMeta<Deployment>> {
        Event::Apply(PartialObjectMeta {
            types: None,
            metadata: meta,
            _phantom: Default::default(),
        })
    }

    fn listed() -> (OwnedObjects, MapKey) {
        let owned = OwnedObjects::default();
        let key = MapKey {
            owner_kind: "Indexer".into(),
            kind: "Deployment".into(),
            scope: None,
        };
        owned.record::<Deployment>(&key, "Indexer", &Event::Init);
        owned.record::<Deployment>(&key, "Indexer", &Event::InitDone);
        (owned, key)
    }

    #[test]
    fn nothing_is_known_before_the_watch_listed() {
        let owned = OwnedObjects::default();
        assert_eq!(owned.controlled("Indexer", "Deployment", "ns", OWNER), None);
        assert!(!owned.holds("Indexer", "Deployment", "ns", "clair-indexer", "h1"));
    }

    #[test]
    fn a_write_of_its_own_needs_no_read_back_and_a_status_update_keeps_it() {
        let (owned, key) = listed();
        owned.verified("Indexer", "Deployment", &meta("10", Some(1), "h1"), "h1");
        assert!(owned.holds("Indexer", "Deployment", "ns", "clair-indexer", "h1"));
        // A new desired object (another hash) is applied.
        assert!(!owned.holds("Indexer", "Deployment", "ns", "clair-indexer", "h2"));
        // The watch brings the write, then a status update of the Deployment controller.
        owned.record(&key, "Indexer", &event(meta("10", Some(1), "h1")));
        owned.record(&key, "Indexer", &event(meta("11", Some(1), "h1")));
        assert!(owned.holds("Indexer", "Deployment", "ns", "clair-indexer", "h1"));
        let controlled = owned
            .controlled("Indexer", "Deployment", "ns", OWNER)
            .unwrap();
        assert_eq!(controlled.keys().collect::<Vec<_>>(), ["clair-indexer"]);
    }

    #[test]
    fn a_changed_spec_is_read_again() {
        let (owned, key) = listed();
        owned.verified("Indexer", "Deployment", &meta("10", Some(1), "h1"), "h1");
        // A hand edit of the spec: the generation rises, the annotation stays.
        owned.record(&key, "Indexer", &event(meta("12", Some(2), "h1")));
        assert!(!owned.holds("Indexer", "Deployment", "ns", "clair-indexer", "h1"));
        // A kind without a generation (a Secret): any new resourceVersion is a change.
        owned.verified("Indexer", "Deployment", &meta("20", None, "h1"), "h1");
        owned.record(&key, "Indexer", &event(meta("21", None, "h1")));
        assert!(!owned.holds("Indexer", "Deployment", "ns", "clair-indexer", "h1"));
    }

    #[test]
    fn a_relist_replaces_what_it_lists_and_a_delete_forgets() {
        let (owned, key) = listed();
        owned.record(&key, "Indexer", &event(meta("10", Some(1), "h1")));
        owned.record::<Deployment>(&key, "Indexer", &Event::Init);
        owned.record::<Deployment>(&key, "Indexer", &Event::InitDone);
        assert_eq!(
            owned
                .controlled("Indexer", "Deployment", "ns", OWNER)
                .unwrap()
                .len(),
            0
        );
        owned.verified("Indexer", "Deployment", &meta("10", Some(1), "h1"), "h1");
        owned.record(
            &key,
            "Indexer",
            &Event::Delete(PartialObjectMeta::<Deployment> {
                types: None,
                metadata: meta("10", Some(1), "h1"),
                _phantom: Default::default(),
            }),
        );
        assert!(!owned.holds("Indexer", "Deployment", "ns", "clair-indexer", "h1"));
    }

    #[test]
    fn only_what_the_operator_manages_for_this_owner_kind_is_kept() {
        let (owned, key) = listed();
        let mut foreign = meta("10", Some(1), "h1");
        foreign.labels = None;
        owned.record(&key, "Indexer", &event(foreign));
        let mut other_owner = meta("10", Some(1), "h1");
        other_owner.owner_references.as_mut().unwrap()[0].kind = "Clair".into();
        owned.record(&key, "Indexer", &event(other_owner));
        assert_eq!(owned.entries(), 0);
    }

    fn full(meta: ObjectMeta, ready: i32) -> Event<Deployment> {
        Event::Apply(Deployment {
            metadata: meta,
            status: Some(k8s_openapi::api::apps::v1::DeploymentStatus {
                ready_replicas: Some(ready),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn ready(owned: &OwnedObjects) -> Option<Option<i32>> {
        owned
            .deployment("Indexer", "ns", "clair-indexer")
            .map(|d| d.ready_replicas)
    }

    #[test]
    fn a_deployment_is_judged_from_its_watch_only_at_the_spec_the_operator_verified() {
        let (owned, key) = listed();
        // Not in the watch: only a read tells whether it is gone or out of the watch.
        assert_eq!(ready(&owned), None);
        // Seen, but never verified (a restart): read once.
        owned.record(&key, "Indexer", &full(meta("10", Some(1), "h1"), 0));
        assert_eq!(ready(&owned), None);
        // Verified at that version: the state the watch brought answers.
        owned.verified("Indexer", "Deployment", &meta("10", Some(1), "h1"), "h1");
        assert_eq!(ready(&owned), Some(Some(0)));
        // The deployment controller's status update: a new state, the same spec.
        owned.record(&key, "Indexer", &full(meta("11", Some(1), "h1"), 1));
        assert_eq!(ready(&owned), Some(Some(1)));
        // The operator's own write: its state is not here until its event is.
        owned.verified("Indexer", "Deployment", &meta("12", Some(2), "h2"), "h2");
        assert_eq!(ready(&owned), None);
        owned.record(&key, "Indexer", &full(meta("12", Some(2), "h2"), 1));
        assert_eq!(ready(&owned), Some(Some(1)));
        // Someone else's spec change (a new generation): the template must be read.
        owned.record(&key, "Indexer", &full(meta("13", Some(3), "h2"), 1));
        assert_eq!(ready(&owned), None);
    }

    #[test]
    fn a_verification_does_not_take_back_a_later_version_the_watch_brought() {
        let (owned, key) = listed();
        // The watch brings the write and a status update before the writer records it.
        owned.record(&key, "Indexer", &full(meta("10", Some(1), "h1"), 0));
        owned.record(&key, "Indexer", &full(meta("11", Some(1), "h1"), 1));
        owned.verified("Indexer", "Deployment", &meta("10", Some(1), "h1"), "h1");
        assert_eq!(
            owned.resource_version("Indexer", "Deployment", "ns", "clair-indexer"),
            Some("11".to_string())
        );
        assert!(owned.holds("Indexer", "Deployment", "ns", "clair-indexer", "h1"));
        assert_eq!(ready(&owned), Some(Some(1)));
    }

    #[test]
    fn an_owners_objects_are_indexed_by_its_uid_through_changes_and_removals() {
        let entry = |controller: &str| Entry {
            controller: Some(Packed::of(controller)),
            ..Entry::of(&ObjectMeta::default())
        };
        let names = |objects: &Objects, ns: &str, owner: &str| -> Vec<String> {
            let mut names: Vec<String> = objects
                .controlled(ns, owner)
                .map(|(n, _)| n.to_string())
                .collect();
            names.sort();
            names
        };
        let mut objects = Objects::default();
        objects.insert("ns/a", entry("one"));
        objects.insert("ns/b", entry("one"));
        objects.insert("ns/c", entry("two"));
        objects.insert("nsx/d", entry("one"));
        assert_eq!(names(&objects, "ns", "one"), ["a", "b"]);
        assert!(names(&objects, "other", "one").is_empty());
        // Another controller now: it moves.
        objects.insert("ns/b", entry("two"));
        assert_eq!(names(&objects, "ns", "one"), ["a"]);
        assert_eq!(names(&objects, "ns", "two"), ["b", "c"]);
        // The same controller again: still indexed, once.
        objects.insert("ns/a", entry("one"));
        assert_eq!(names(&objects, "ns", "one"), ["a"]);
        objects.remove("ns/a");
        objects.remove("nsx/d");
        assert!(names(&objects, "ns", "one").is_empty());
        assert!(
            !objects.by_controller.contains_key(&Packed::of("one")),
            "nothing left behind"
        );
        assert_eq!(objects.len(), 2);
    }

    #[test]
    fn an_entry_allocates_nothing_of_its_own() {
        let (owned, key) = listed();
        let uid = "6f1c2b9e-8d4a-4c3b-9a7e-1f2e3d4c5b6a";
        let mut meta = meta("10", Some(1), "0123456789abcdef");
        meta.uid = Some(uid.into());
        meta.owner_references.as_mut().unwrap()[0].uid = uid.into();
        owned.record(&key, "Indexer", &event(meta.clone()));
        owned.verified("Indexer", "Deployment", &meta, "0123456789abcdef");
        let maps = owned.maps.lock().unwrap();
        let entry = maps[&key].objects.get("ns/clair-indexer").unwrap();
        for packed in [&entry.uid, &entry.resource_version]
            .into_iter()
            .chain(&entry.applied)
            .chain(&entry.controller)
        {
            assert!(!matches!(packed, Packed::Text(_)), "{packed:?}");
        }
        assert!(std::mem::size_of::<Entry>() <= 192);
    }
}
