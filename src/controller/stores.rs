//! The controllers' caches of their own resources, shared: the `Clair` controller reads the
//! `Indexer`, `Matcher` and `Notifier` it owns from the caches of their controllers (which
//! hold them in full anyway) instead of a GET each per reconcile. A cache is registered
//! while its controller runs (a replica that stops leading takes its caches back).
//!
//! The cache and the Clair controller's own watch of its services are two streams, and
//! either may be ahead: the Clair takes the cached object only at the resourceVersion its
//! own watch last showed or a later one (`Observer::service`, `versions::at_least`), else it
//! reads it. (Without that check, a
//! Clair woken by its service's status write read the older cached status and then waited
//! a minute for its fallback: the scale benchmark at 100 Clairs converged in 1.83 times the
//! baseline.)

use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

use super::watch::Scope;

/// Whether a cache holds an object (namespace, name): `None` before it has listed.
type Holds = Box<dyn Fn(&str, &str) -> Option<bool> + Send + Sync>;

type Entry = (u64, TypeId, Scope, Box<dyn Any + Send + Sync>, Holds);

#[derive(Default)]
pub struct Stores {
    next: std::sync::atomic::AtomicU64,
    stores: Arc<Mutex<Vec<Entry>>>,
}

/// A cache registered until this drops.
pub struct Registered {
    id: u64,
    stores: Arc<Mutex<Vec<Entry>>>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut stores) = self.stores.lock() {
            stores.retain(|(id, ..)| *id != self.id);
        }
    }
}

impl Stores {
    /// Shares `store` (of kind `K`, in `scope`; `listed` once it holds its first list)
    /// until the guard drops.
    pub fn register<K>(
        &self,
        scope: &Scope,
        store: Store<K>,
        listed: super::decoded::Listed,
    ) -> Registered
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let reader = store.clone();
        let holds: Holds = Box::new(move |namespace: &str, name: &str| {
            if !listed.load(std::sync::atomic::Ordering::Acquire) {
                return None;
            }
            Some(
                reader
                    .get(&ObjectRef::new(name).within(namespace))
                    .is_some(),
            )
        });
        if let Ok(mut stores) = self.stores.lock() {
            stores.push((id, TypeId::of::<K>(), scope.clone(), Box::new(store), holds));
        }
        Registered {
            id,
            stores: self.stores.clone(),
        }
    }

    /// Object `name` of kind `K` in `namespace`, from a registered cache that has listed:
    /// `None` when none has it (not there, not yet seen, or no cache: read it live).
    pub fn get<K>(&self, namespace: &str, name: &str) -> Option<Arc<K>>
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let stores = self.stores.lock().ok()?;
        let reference = ObjectRef::<K>::new(name).within(namespace);
        stores
            .iter()
            .rev()
            .filter(|(_, type_id, scope, ..)| {
                *type_id == TypeId::of::<K>() && scope.holds(Some(namespace))
            })
            .filter_map(|(_, _, _, store, _)| store.downcast_ref::<Store<K>>())
            .find_map(|store| store.get(&reference))
    }

    /// Whether the registered caches of the kind of type `kind` over `namespace` have
    /// listed, one at least, and none holds object `name` there: then there is none (or one
    /// made in the last moments, which the watch has not brought yet, or one that does not
    /// decode). `false` when no cache can say. Only for what is observed: nothing is
    /// written on the strength of it.
    pub fn lacks(&self, kind: TypeId, namespace: &str, name: &str) -> bool {
        let Ok(stores) = self.stores.lock() else {
            return false;
        };
        let answers: Vec<Option<bool>> = stores
            .iter()
            .filter(|(_, type_id, scope, ..)| *type_id == kind && scope.holds(Some(namespace)))
            .map(|(.., holds)| holds(namespace, name))
            .collect();
        !answers.is_empty() && answers.iter().all(|held| *held == Some(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Indexer;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    fn indexer(namespace: &str, name: &str) -> Indexer {
        let mut indexer = Indexer::new(name, Default::default());
        indexer.metadata.namespace = Some(namespace.to_string());
        indexer
    }

    #[test]
    fn a_registered_cache_answers_until_its_controller_stops() {
        let stores = Stores::default();
        let (store, mut writer) = reflector::store::<Indexer>();
        writer.apply_watcher_event(&Event::Apply(indexer("a", "clair-indexer")));
        let registered = stores.register(&Scope::Namespace("a".into()), store, Default::default());
        assert!(stores.get::<Indexer>("a", "clair-indexer").is_some());
        // Another namespace's scope, another kind: not this cache.
        assert!(stores.get::<Indexer>("b", "clair-indexer").is_none());
        assert!(
            stores
                .get::<crate::api::Matcher>("a", "clair-indexer")
                .is_none()
        );
        drop(registered);
        assert!(stores.get::<Indexer>("a", "clair-indexer").is_none());
    }

    #[test]
    fn a_cache_tells_an_absence_only_once_it_has_listed() {
        let stores = Stores::default();
        let (store, mut writer) = reflector::store::<Indexer>();
        let listed = crate::controller::decoded::Listed::default();
        let _registered = stores.register(&Scope::Namespace("a".into()), store, listed.clone());
        let indexer_type = TypeId::of::<Indexer>();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(indexer("a", "clair-indexer")));
        writer.apply_watcher_event(&Event::InitDone);
        // Not listed yet: nothing is known to be absent.
        assert!(!stores.lacks(indexer_type, "a", "other-indexer"));
        listed.store(true, std::sync::atomic::Ordering::Release);
        assert!(!stores.lacks(indexer_type, "a", "clair-indexer"));
        assert!(stores.lacks(indexer_type, "a", "other-indexer"));
        // Another namespace than the cache's scope, another kind: no cache can say.
        assert!(!stores.lacks(indexer_type, "b", "other-indexer"));
        assert!(!stores.lacks(TypeId::of::<crate::api::Matcher>(), "a", "other-indexer"));
        // A second cache over the namespace that has not listed: no longer certain.
        let (late, _writer) = reflector::store::<Indexer>();
        let _late = stores.register(&Scope::Namespace("a".into()), late, Default::default());
        assert!(!stores.lacks(indexer_type, "a", "other-indexer"));
    }
}
