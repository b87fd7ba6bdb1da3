//! The ConfigMaps and Secrets the resources reference (drop-ins, connection strings, the
//! generated config, the pre-shared key), kept as last read, so a reconcile reads one only
//! when it changed since. The metadata watches of ConfigMaps and Secrets that trigger the
//! reconciles tell when: an event of a kept object at another resourceVersion (or its
//! deletion, or a relist) drops it, before the reconcile it triggers reads. A read that was
//! under way while such an event passed is not kept (its answer may predate the change).
//! The operator's own write of one is kept as the apiserver returned it when a reconcile
//! reads it (a config snapshot, written once and mounted, is not kept), unless an event of
//! it passed while the write was under way; a delete drops it. Of an object's metadata only
//! what names it is kept.
//!
//! Bounded: at most [`MAX_BYTES`] of data and metadata (the field managers' records, which
//! the apiserver sends with every object, are not kept); past it the least recently used go. Only what
//! a resource names is ever kept (no unrelated Secret is read), and it is what the operator
//! renders into its own config Secrets in any case.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Resource;
use kube::api::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};

/// The data kept, in bytes (keys and values, and each object's metadata as JSON).
pub const MAX_BYTES: usize = 8 << 20;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    /// The kind of `kind` (`Secret`, `ConfigMap`), if one of these.
    pub fn of(kind: &str) -> Option<Kind> {
        match kind {
            "ConfigMap" => Some(Kind::ConfigMap),
            "Secret" => Some(Kind::Secret),
            _ => None,
        }
    }
}

type Key = (Kind, String, String);

#[derive(Clone)]
enum Object {
    ConfigMap(ConfigMap),
    Secret(Secret),
}

struct Kept {
    resource_version: String,
    object: Object,
    bytes: usize,
    used: Instant,
}

#[derive(Default)]
struct State {
    kept: HashMap<Key, Kept>,
    bytes: usize,
    /// Reads under way, by key: `true` once an event of the key passed meanwhile.
    reading: HashMap<Key, (u32, bool)>,
    /// The keys a reconcile has read, or the operator writes to be read: only the operator's
    /// writes of these are kept (a config snapshot, written once and never read back, is
    /// not). Emptied past [`MAX_WANTED`] (forgetting costs a read, never a stale answer).
    wanted: HashSet<Key>,
}

/// At most this many keys are remembered as read.
const MAX_WANTED: usize = 50_000;

#[derive(Default)]
pub struct Contents {
    state: Mutex<State>,
}

/// A read (or the operator's own write) under way, from [`Contents::reading`] to what it
/// found; one given up (an error) ends when dropped.
pub struct Reading<'a> {
    contents: &'a Contents,
    key: Key,
    open: bool,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        if self.open {
            self.contents.finish(&self.key);
        }
    }
}

impl Contents {
    /// The ConfigMap `name` as last read, while unchanged.
    pub fn config_map(&self, namespace: &str, name: &str) -> Option<ConfigMap> {
        match self.get(Kind::ConfigMap, namespace, name)? {
            Object::ConfigMap(object) => Some(object),
            Object::Secret(_) => None,
        }
    }

    /// The Secret `name` as last read, while unchanged.
    pub fn secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        match self.get(Kind::Secret, namespace, name)? {
            Object::Secret(object) => Some(object),
            Object::ConfigMap(_) => None,
        }
    }

    fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Object> {
        let mut state = self.state.lock().ok()?;
        let kept = state
            .kept
            .get_mut(&(kind, namespace.to_string(), name.to_string()))?;
        kept.used = Instant::now();
        Some(kept.object.clone())
    }

    /// Says a read of `name` starts (before it is sent).
    pub fn reading(&self, kind: Kind, namespace: &str, name: &str) -> Reading<'_> {
        self.start(kind, namespace, name, true)
    }

    /// Says the operator's own write of `name` starts (before it is sent). What it returns
    /// is kept ([`Contents::wrote`]) if `keep` (an object the operator writes again and
    /// its reconciles read, a generated config) or if a reconcile has read `name`.
    pub fn writing(&self, kind: Kind, namespace: &str, name: &str, keep: bool) -> Reading<'_> {
        self.start(kind, namespace, name, keep)
    }

    fn start(&self, kind: Kind, namespace: &str, name: &str, wanted: bool) -> Reading<'_> {
        let key = (kind, namespace.to_string(), name.to_string());
        if let Ok(mut state) = self.state.lock() {
            state.reading.entry(key.clone()).or_insert((0, false)).0 += 1;
            if wanted {
                if state.wanted.len() >= MAX_WANTED {
                    state.wanted.clear();
                }
                state.wanted.insert(key.clone());
            }
        }
        Reading {
            contents: self,
            key,
            open: true,
        }
    }

    /// Ends a read of `key`: whether an event of it passed meanwhile.
    fn finish(&self, key: &Key) -> bool {
        let Ok(mut state) = self.state.lock() else {
            return true;
        };
        finish(&mut state, key)
    }

    /// Keeps what the operator's own write of a ConfigMap or Secret returned (the reading
    /// started before the write was sent), so the next reconcile need not read it back; one
    /// no reconcile reads is not kept.
    pub fn wrote<T: serde::Serialize>(&self, reading: Reading<'_>, written: &T) {
        let wanted = self
            .state
            .lock()
            .is_ok_and(|state| state.wanted.contains(&reading.key));
        if !wanted {
            let (kind, namespace, name) = reading.key.clone();
            drop(reading);
            self.forget(kind, &namespace, &name);
            return;
        }
        let value = serde_json::to_value(written).ok();
        match reading.key.0 {
            Kind::ConfigMap => {
                let object = value.and_then(|v| serde_json::from_value::<ConfigMap>(v).ok());
                self.read_config_map(reading, object.as_ref());
            }
            Kind::Secret => {
                let object = value.and_then(|v| serde_json::from_value::<Secret>(v).ok());
                self.read_secret(reading, object.as_ref());
            }
        }
    }

    /// Keeps what a read found (nothing is kept of an object that does not exist, nor when
    /// it changed while the read was under way).
    pub fn read_config_map(&self, reading: Reading<'_>, object: Option<&ConfigMap>) {
        let kept = object.map(|o| {
            let mut o = o.clone();
            let metadata = slimmed(&mut o.metadata);
            let bytes = metadata
                + o.data
                    .iter()
                    .flatten()
                    .map(|(k, v)| k.len() + v.len())
                    .sum::<usize>()
                + o.binary_data
                    .iter()
                    .flatten()
                    .map(|(k, v)| k.len() + v.0.len())
                    .sum::<usize>();
            (
                o.metadata.resource_version.clone(),
                Object::ConfigMap(o),
                bytes,
            )
        });
        self.read(reading, kept);
    }

    pub fn read_secret(&self, reading: Reading<'_>, object: Option<&Secret>) {
        let kept = object.map(|o| {
            let mut o = o.clone();
            let metadata = slimmed(&mut o.metadata);
            let bytes = metadata
                + o.data
                    .iter()
                    .flatten()
                    .map(|(k, v)| k.len() + v.0.len())
                    .sum::<usize>()
                + o.string_data
                    .iter()
                    .flatten()
                    .map(|(k, v)| k.len() + v.len())
                    .sum::<usize>();
            (
                o.metadata.resource_version.clone(),
                Object::Secret(o),
                bytes,
            )
        });
        self.read(reading, kept);
    }

    fn read(&self, mut reading: Reading<'_>, kept: Option<(Option<String>, Object, usize)>) {
        reading.open = false;
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let key = reading.key.clone();
        let changed = finish(&mut state, &key);
        let Some((Some(resource_version), object, bytes)) = kept else {
            return;
        };
        if changed || bytes > MAX_BYTES {
            return;
        }
        remove(&mut state, &key);
        while state.bytes + bytes > MAX_BYTES {
            let Some(oldest) = state
                .kept
                .iter()
                .min_by_key(|(_, k)| k.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            remove(&mut state, &oldest);
        }
        state.bytes += bytes;
        state.kept.insert(
            key,
            Kept {
                resource_version,
                object,
                bytes,
                used: Instant::now(),
            },
        );
    }

    /// Drops `name` (the operator just wrote it).
    pub fn forget(&self, kind: Kind, namespace: &str, name: &str) {
        if let Ok(mut state) = self.state.lock() {
            let key = (kind, namespace.to_string(), name.to_string());
            remove(&mut state, &key);
            if let Some((_, changed)) = state.reading.get_mut(&key) {
                *changed = true;
            }
        }
    }

    /// `stream`, a metadata watch, dropping on the way what its events say changed when it
    /// watches ConfigMaps or Secrets (`kind`; `None`: another kind, passed through).
    pub fn tap<K, S>(
        self: &std::sync::Arc<Self>,
        kind: Option<Kind>,
        stream: S,
    ) -> impl Stream<Item = S::Item> + Send + 'static + use<K, S>
    where
        K: Resource + Clone + Send + 'static,
        S: Stream<Item = Result<Event<PartialObjectMeta<K>>, watcher::Error>> + Send + 'static,
    {
        let contents = self.clone();
        stream.map(move |event| {
            if let (Ok(event), Some(kind)) = (&event, kind) {
                contents.heard(kind, event);
            }
            event
        })
    }

    fn heard<K: Resource>(&self, kind: Kind, event: &Event<PartialObjectMeta<K>>) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let changed = |state: &mut State, meta: &kube::api::ObjectMeta, deleted: bool| {
            let key = (
                kind,
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default(),
            );
            if let Some((_, changed)) = state.reading.get_mut(&key) {
                *changed = true;
            }
            let stale = state.kept.get(&key).is_some_and(|k| {
                deleted || meta.resource_version.as_ref() != Some(&k.resource_version)
            });
            if stale {
                remove(state, &key);
            }
        };
        match event {
            Event::Apply(object) | Event::InitApply(object) => {
                changed(&mut state, &object.metadata, false)
            }
            Event::Delete(object) => changed(&mut state, &object.metadata, true),
            // A relist: deletions while the watch was down are not told one by one.
            Event::Init => {
                let keys: Vec<Key> = state.kept.keys().filter(|k| k.0 == kind).cloned().collect();
                for key in keys {
                    remove(&mut state, &key);
                }
                for ((k, ..), (_, changed)) in state.reading.iter_mut() {
                    if *k == kind {
                        *changed = true;
                    }
                }
            }
            Event::InitDone => {}
        }
    }

    /// Bytes kept now.
    pub fn bytes(&self) -> usize {
        self.state.lock().map(|s| s.bytes).unwrap_or(0)
    }
}

/// `metadata` without what no reconcile reads (the field managers' records, which the
/// apiserver sends with every object and which outweighed the data of a small Secret; the
/// labels, annotations and owners), and about what the rest takes in memory: its size as JSON.
fn slimmed(metadata: &mut kube::api::ObjectMeta) -> usize {
    // Reconciles read a kept object's data; of its metadata only what names it.
    *metadata = kube::api::ObjectMeta {
        name: metadata.name.take(),
        namespace: metadata.namespace.take(),
        uid: metadata.uid.take(),
        resource_version: metadata.resource_version.take(),
        ..Default::default()
    };
    serde_json::to_vec(metadata).map_or(0, |json| json.len())
}

/// Ends one read of `key`: whether an event of it passed while it was under way.
fn finish(state: &mut State, key: &Key) -> bool {
    match state.reading.get_mut(key) {
        Some((count, changed)) => {
            let was = *changed;
            *count -= 1;
            if *count == 0 {
                state.reading.remove(key);
            }
            was
        }
        None => true,
    }
}

fn remove(state: &mut State, key: &Key) {
    if let Some(kept) = state.kept.remove(key) {
        state.bytes -= kept.bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn config_map(rv: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("dropin".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            data: Some([("config.yaml".to_string(), value.to_string())].into()),
            ..Default::default()
        }
    }

    fn event(rv: &str) -> Event<PartialObjectMeta<ConfigMap>> {
        Event::Apply(PartialObjectMeta {
            types: None,
            metadata: config_map(rv, "").metadata,
            _phantom: Default::default(),
        })
    }

    fn kept(contents: &Contents) -> Option<String> {
        contents
            .config_map("ns", "dropin")
            .and_then(|c| c.data?.get("config.yaml").cloned())
    }

    #[test]
    fn the_field_managers_records_are_not_kept_and_the_metadata_counts() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let contents = Contents::default();
        let mut secret = Secret {
            metadata: config_map("5", "").metadata,
            data: Some([("psk".to_string(), k8s_openapi::ByteString(vec![1; 32]))].into()),
            ..Default::default()
        };
        secret.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("clair-operator".into()),
            fields_v1: Some(FieldsV1(serde_json::json!({"f:data": {"f:psk": {}}}))),
            ..Default::default()
        }]);
        let reading = contents.reading(Kind::Secret, "ns", "dropin");
        contents.read_secret(reading, Some(&secret));
        let kept = contents.secret("ns", "dropin").expect("kept");
        assert_eq!(kept.metadata.managed_fields, None);
        assert_eq!(kept.data, secret.data);
        assert!(
            contents.bytes() > "psk".len() + 32,
            "the metadata counts too: {}",
            contents.bytes()
        );
    }

    #[test]
    fn kept_until_its_watch_says_it_changed() {
        let contents = Contents::default();
        let reading = contents.reading(Kind::ConfigMap, "ns", "dropin");
        contents.read_config_map(reading, Some(&config_map("5", "a")));
        assert_eq!(kept(&contents).as_deref(), Some("a"));
        // Its own event (the same version) keeps it; another version drops it.
        contents.heard(Kind::ConfigMap, &event("5"));
        assert_eq!(kept(&contents).as_deref(), Some("a"));
        contents.heard(Kind::ConfigMap, &event("6"));
        assert_eq!(kept(&contents), None);
        assert_eq!(contents.bytes(), 0);
    }

    #[test]
    fn a_read_that_a_change_overtook_is_not_kept() {
        let contents = Contents::default();
        let reading = contents.reading(Kind::ConfigMap, "ns", "dropin");
        contents.heard(Kind::ConfigMap, &event("6"));
        contents.read_config_map(reading, Some(&config_map("5", "a")));
        assert_eq!(kept(&contents), None);
        // Nor one the operator's own write overtook.
        let reading = contents.reading(Kind::ConfigMap, "ns", "dropin");
        contents.forget(Kind::ConfigMap, "ns", "dropin");
        contents.read_config_map(reading, Some(&config_map("7", "b")));
        assert_eq!(kept(&contents), None);
    }

    #[test]
    fn a_read_given_up_leaves_nothing_behind_and_the_next_is_kept() {
        let contents = Contents::default();
        drop(contents.reading(Kind::ConfigMap, "ns", "dropin"));
        contents.heard(Kind::ConfigMap, &event("4"));
        let reading = contents.reading(Kind::ConfigMap, "ns", "dropin");
        contents.read_config_map(reading, Some(&config_map("5", "a")));
        assert_eq!(kept(&contents).as_deref(), Some("a"));
    }

    #[test]
    fn the_operators_own_write_is_kept_unless_an_event_overtook_it() {
        let contents = Contents::default();
        let reading = contents.writing(Kind::ConfigMap, "ns", "dropin", false);
        contents.wrote(reading, &config_map("4", "a"));
        assert_eq!(kept(&contents), None, "a snapshot nobody reads is not kept");
        assert_eq!(contents.bytes(), 0);
        let reading = contents.reading(Kind::ConfigMap, "ns", "dropin");
        contents.read_config_map(reading, None);
        let reading = contents.writing(Kind::ConfigMap, "ns", "dropin", false);
        contents.wrote(reading, &config_map("5", "a"));
        assert_eq!(kept(&contents).as_deref(), Some("a"), "one read is");
        let reading = contents.writing(Kind::ConfigMap, "ns", "other", true);
        contents.wrote(reading, &config_map("5", "a"));
        assert!(
            contents.config_map("ns", "other").is_some(),
            "so is one applied again"
        );
        assert_eq!(kept(&contents).as_deref(), Some("a"));
        contents.heard(Kind::ConfigMap, &event("5"));
        assert_eq!(
            kept(&contents).as_deref(),
            Some("a"),
            "its own event keeps it"
        );
        let reading = contents.writing(Kind::ConfigMap, "ns", "dropin", true);
        contents.heard(Kind::ConfigMap, &event("7"));
        contents.wrote(reading, &config_map("6", "b"));
        assert_eq!(
            kept(&contents),
            None,
            "a write an event overtook is read next time"
        );
    }

    #[test]
    fn a_relist_or_a_delete_drops_it_and_the_size_is_bounded() {
        let contents = Contents::default();
        let reading = contents.reading(Kind::ConfigMap, "ns", "dropin");
        contents.read_config_map(reading, Some(&config_map("5", "a")));
        contents.heard::<ConfigMap>(Kind::ConfigMap, &Event::Init);
        assert_eq!(kept(&contents), None);
        let reading = contents.reading(Kind::ConfigMap, "ns", "dropin");
        contents.read_config_map(reading, Some(&config_map("5", "a")));
        contents.heard(
            Kind::ConfigMap,
            &Event::Delete(PartialObjectMeta::<ConfigMap> {
                types: None,
                metadata: config_map("5", "").metadata,
                _phantom: Default::default(),
            }),
        );
        assert_eq!(kept(&contents), None);
        // Larger than the whole budget: not kept.
        let reading = contents.reading(Kind::ConfigMap, "ns", "dropin");
        contents.read_config_map(reading, Some(&config_map("8", &"x".repeat(MAX_BYTES + 1))));
        assert_eq!(kept(&contents), None);
        assert_eq!(contents.bytes(), 0);
    }
}
