//! The operator's own resources, watched raw and decoded one at a time. A typed watch
//! decodes a whole list at once, so a single object the code cannot read (stored under an
//! older schema, or a free-form part such as `pod.volumes` holding something that is not a
//! volume) fails every list and every relist: no resource of that kind, in any namespace,
//! would be reconciled again. Here such an object is left out of the controller's cache (so
//! nothing reconciles it against a spec that is no longer its) and said once per
//! generation: a Warning Event `SpecUnreadable` naming the field, a log line, and the
//! `unreadable_resources` gauge. What the operator made for it stays as it is until the
//! object can be read again; every other object is reconciled as usual.
//!
//! The cache holds each object without what no reconcile reads of it (`slim`): its field
//! managers' records, labels and annotations.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector::store::Writer};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::warn;

use super::Context;
use super::watch::Scope;

/// An object that could not be decoded, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
    /// The field (`spec.pod.volumes[0].secret`) and what is wrong with it.
    pub error: String,
}

/// `object` as `K`, or what stops it, naming the field.
pub fn decode<K: Resource<DynamicType = ()> + DeserializeOwned>(
    object: &DynamicObject,
) -> Result<K, Unreadable> {
    let value = serde_json::to_value(object).unwrap_or_default();
    crate::api::decode::named(&K::kind(&()), value).map_err(|error| Unreadable {
        namespace: object.namespace().unwrap_or_default(),
        name: object.name_any(),
        uid: object.uid().unwrap_or_default(),
        generation: object.metadata.generation.unwrap_or_default(),
        error,
    })
}

/// The objects of kind `K` currently unreadable, with the generation already said, so an
/// idle operator says nothing again (a relist sees the same generation). One entry per
/// object, gone with it: a tenant editing one object many times grows nothing.
struct Ledger {
    unreadable: BTreeMap<(String, String), (String, i64)>,
    /// During a relist, the unreadable objects listed so far.
    listing: Option<BTreeSet<(String, String)>>,
    /// `unreadable_resources{kind}`: each scope's ledger adds its own, and takes it back
    /// when dropped (a replica that stopped leading).
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.gauge.dec_by(self.unreadable.len() as i64);
    }
}

/// Set once the cache holds the watch's first list (the reflector has written it), so an
/// object the cache lacks is one the cluster lacks (or one very new). Read without
/// touching the store's own readiness future, whose single waker the controller uses.
pub type Listed = Arc<std::sync::atomic::AtomicBool>;

/// The watch of kind `K` in `scope` for [`kube::runtime::Controller::for_stream`], the
/// cache it fills (readable objects only), and whether that has listed.
pub fn watch<K>(
    context: Arc<Context>,
    scope: &Scope,
) -> (
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    Store<K>,
    Listed,
)
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match scope {
        Scope::Cluster => Api::all_with(context.client.clone(), &resource),
        Scope::Namespace(namespace) => {
            Api::namespaced_with(context.client.clone(), namespace, &resource)
        }
    };
    let writer: Writer<K> = Writer::default();
    let reader = writer.as_reader();
    let cache = reader.clone();
    let gauge = context
        .metrics
        .unreadable
        .get_or_create(&crate::metrics::KindLabels {
            kind: K::kind(&()).to_string(),
        })
        .clone();
    let ledger = Arc::new(Mutex::new(Ledger {
        unreadable: BTreeMap::new(),
        listing: None,
        gauge,
    }));
    let events = watcher::watcher(api, watcher::Config::default())
        .modify(slim)
        .filter_map(move |event| {
            let decoded = match event {
                Err(e) => Some(Err(e)),
                Ok(event) => translate(event, &cache, |outcome| {
                    note::<K>(&context, &ledger, outcome)
                })
                .map(Ok),
            };
            std::future::ready(decoded)
        });
    let listed = Listed::default();
    let set = listed.clone();
    let stream = reflector::reflector(writer, events)
        .inspect_ok(move |event| {
            if matches!(event, Event::InitDone) {
                set.store(true, std::sync::atomic::Ordering::Release);
            }
        })
        .applied_objects();
    (stream, reader, listed)
}

/// What the cache need not hold: the field managers' records and kubectl's copy of the last
/// applied object (each about as large as the spec itself), and the labels and annotations.
/// What the controllers take from the cache (spec, status, names, UID, generation, owners,
/// finalizers) never includes them: the labels the watches select on are matched by the
/// apiserver, and what a Clair knows of its services' labels and applied-hash annotation
/// comes from its metadata watches of them (`owned`), not from here. A service's five
/// labels and its applied hash were 1.3 KiB of each cached copy, about 4 MiB at 1,000
/// Clairs (docs/performance.md). A reconcile that comes to need one must keep it here.
fn slim(object: &mut DynamicObject) {
    let metadata = &mut object.metadata;
    metadata.managed_fields = None;
    metadata.labels = None;
    metadata.annotations = None;
}

/// Decodes one watch event; an unreadable object drops out of it. A deleted object that no
/// longer decodes is deleted from the cache by the last version that did.
fn translate<K>(
    event: Event<DynamicObject>,
    cache: &Store<K>,
    mut noted: impl FnMut(Outcome<'_>),
) -> Option<Event<K>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone,
{
    let mut read = |object: &DynamicObject| match decode::<K>(object) {
        Ok(decoded) => {
            noted(Outcome::Read(object));
            Some(decoded)
        }
        Err(unreadable) => {
            noted(Outcome::Unreadable(unreadable));
            None
        }
    };
    match event {
        Event::Init => {
            noted(Outcome::Listing);
            Some(Event::Init)
        }
        Event::InitDone => {
            noted(Outcome::Listed);
            Some(Event::InitDone)
        }
        Event::InitApply(object) => read(&object).map(Event::InitApply),
        // A cached object changed into something unreadable leaves the cache (by its last
        // readable version), so nothing reconciles it against a spec that is no longer its.
        Event::Apply(object) => match read(&object) {
            Some(decoded) => Some(Event::Apply(decoded)),
            None => cached(cache, &object).map(Event::Delete),
        },
        Event::Delete(object) => {
            noted(Outcome::Deleted(&object));
            decode::<K>(&object)
                .ok()
                .or_else(|| cached(cache, &object))
                .map(Event::Delete)
        }
    }
}

fn cached<K: Resource<DynamicType = ()> + Clone>(
    cache: &Store<K>,
    object: &DynamicObject,
) -> Option<K> {
    let reference =
        ObjectRef::<K>::new(&object.name_any()).within(&object.namespace().unwrap_or_default());
    cache.get(&reference).map(|k| (*k).clone())
}

enum Outcome<'a> {
    Read(&'a DynamicObject),
    Unreadable(Unreadable),
    Deleted(&'a DynamicObject),
    Listing,
    Listed,
}

fn key(object: &DynamicObject) -> (String, String) {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// Keeps the ledger and the gauge; says a new unreadable generation once.
fn note<K: Resource<DynamicType = ()>>(
    context: &Arc<Context>,
    ledger: &Mutex<Ledger>,
    outcome: Outcome<'_>,
) {
    let kind = K::kind(&()).to_string();
    let Ok(mut ledger) = ledger.lock() else {
        return;
    };
    let mut new = None;
    match outcome {
        Outcome::Read(object) | Outcome::Deleted(object) => {
            if ledger.unreadable.remove(&key(object)).is_some() {
                ledger.gauge.dec();
            }
        }
        Outcome::Unreadable(unreadable) => {
            let at = (unreadable.namespace.clone(), unreadable.name.clone());
            if let Some(seen) = ledger.listing.as_mut() {
                seen.insert(at.clone());
            }
            let said = (unreadable.uid.clone(), unreadable.generation);
            match ledger.unreadable.insert(at, said.clone()) {
                None => {
                    ledger.gauge.inc();
                    new = Some(unreadable);
                }
                Some(before) if before != said => new = Some(unreadable),
                Some(_) => {}
            }
        }
        // A relist: what was unreadable and is not listed again was deleted meanwhile.
        Outcome::Listing => ledger.listing = Some(BTreeSet::new()),
        Outcome::Listed => {
            let seen = ledger.listing.take().unwrap_or_default();
            let before = ledger.unreadable.len();
            ledger.unreadable.retain(|at, _| seen.contains(at));
            let gone = before - ledger.unreadable.len();
            ledger.gauge.dec_by(gone as i64);
        }
    }
    drop(ledger);
    if let Some(unreadable) = new {
        warn!(
            %kind,
            namespace = %unreadable.namespace,
            name = %unreadable.name,
            generation = unreadable.generation,
            error = %unreadable.error,
            "cannot read a resource: it is not reconciled until fixed"
        );
        tokio::spawn(say(
            context.clone(),
            K::api_version(&()).to_string(),
            kind,
            unreadable,
        ));
    }
}

/// The Warning Event on the object.
async fn say(context: Arc<Context>, api_version: String, kind: String, unreadable: Unreadable) {
    use kube::runtime::events::{Event, EventType};
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(api_version),
        kind: Some(kind),
        namespace: Some(unreadable.namespace.clone()),
        name: Some(unreadable.name.clone()),
        uid: Some(unreadable.uid.clone()),
        ..Default::default()
    };
    let note = format!(
        "generation {} cannot be read: {}. Fix the field (`kubectl edit`); until then nothing \
         is done for this resource and what the operator made for it is left as it is",
        unreadable.generation, unreadable.error
    );
    let event = Event {
        type_: EventType::Warning,
        reason: crate::machine::conditions::Reason::SpecUnreadable
            .as_str()
            .to_string(),
        // Events longer than 1 KiB are refused; a decoding error is short, but bounded here.
        note: Some(note.chars().take(1000).collect()),
        action: "Decode".to_string(),
        secondary: None,
    };
    if let Err(e) = context.events.publish(&event, &reference).await {
        warn!(name = %unreadable.name, error = %e, "cannot record the SpecUnreadable Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Indexer;
    use serde_json::json;

    fn object(spec: serde_json::Value, generation: i64) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "clair.projectquay.io/v1alpha1",
            "kind": "Indexer",
            "metadata": {"name": "i", "namespace": "n", "uid": "u", "generation": generation},
            "spec": spec,
        }))
        .unwrap()
    }

    fn good() -> serde_json::Value {
        json!({"config": {"root": {"configMap": {"name": "c", "key": "k"}}}})
    }

    fn bad() -> serde_json::Value {
        let mut spec = good();
        spec["pod"] = json!({"volumes": [{"name": "v", "secret": "not-an-object"}]});
        spec
    }

    #[test]
    fn the_cache_keeps_no_field_managers_labels_nor_annotations() {
        let mut full = object(good(), 1);
        full.metadata.managed_fields = Some(vec![Default::default()]);
        let map = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        full.metadata.annotations = map(&[
            ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
            ("team", "a"),
        ]);
        full.metadata.labels = map(&[(crate::api::labels::INSTANCE, "clair")]);
        full.metadata.finalizers = Some(vec!["clair.projectquay.io/cleanup".into()]);
        slim(&mut full);
        assert_eq!(full.metadata.managed_fields, None);
        assert_eq!(full.metadata.annotations, None);
        assert_eq!(full.metadata.labels, None);
        // What the controllers read stays.
        assert_eq!(full.metadata.generation, Some(1));
        assert_eq!(full.metadata.finalizers.as_ref().map(Vec::len), Some(1));
        assert_eq!(full.data["spec"], good());
        assert!(decode::<Indexer>(&full).is_ok());
    }

    #[test]
    fn the_error_names_the_field() {
        let error = decode::<Indexer>(&object(bad(), 3)).unwrap_err();
        assert!(
            error
                .error
                .starts_with("spec.pod.volumes[0].secret: invalid type"),
            "{}",
            error.error
        );
        assert_eq!(error.generation, 3);
        assert!(decode::<Indexer>(&object(good(), 1)).is_ok());
    }

    #[test]
    fn an_unreadable_object_leaves_the_cache_and_comes_back_once_readable() {
        let (reader, mut writer) = reflector::store::<Indexer>();
        let mut outcomes = Vec::new();
        let mut run = |event, reader: &Store<Indexer>| {
            let translated = translate(event, reader, |o| {
                outcomes.push(matches!(o, Outcome::Unreadable(_)));
            });
            if let Some(event) = &translated {
                writer.apply_watcher_event(event);
            }
            translated
        };
        assert!(matches!(
            run(Event::Apply(object(good(), 1)), &reader),
            Some(Event::Apply(_))
        ));
        // Changed into something unreadable: deleted from the cache by generation 1.
        let Some(Event::Delete(gone)) = run(Event::Apply(object(bad(), 2)), &reader) else {
            panic!("an unreadable object stayed in the cache");
        };
        assert_eq!(gone.metadata.generation, Some(1));
        assert!(reader.is_empty());
        // Not cached: a relist and its deletion pass nothing on.
        assert!(run(Event::InitApply(object(bad(), 2)), &reader).is_none());
        assert!(run(Event::Delete(object(bad(), 2)), &reader).is_none());
        assert!(matches!(
            run(Event::Apply(object(good(), 3)), &reader),
            Some(Event::Apply(_))
        ));
        assert_eq!(outcomes, [false, true, true, false, false]);
    }
}
