//! Which of two versions of one object is the newer, and the version of each resource this
//! process last wrote or read.
//!
//! A resourceVersion was opaque to clients, equality its only comparison; since Kubernetes
//! v1.35 (KEP-5504, "Comparable Resource Version", stable) versions of objects of one
//! resource compare as integers, and every apiserver backed by etcd has always issued them
//! so (the etcd revision of the write). A version that is not such an integer (an
//! aggregated API's, say) compares by equality only, as before.

use std::time::{Duration, Instant};

use kube::Resource;

use super::packed::Packed;

/// Whether `version` is a KEP-5504 integer: positive, decimal, without leading zeros.
pub fn is_integer(version: &str) -> bool {
    !version.is_empty() && !version.starts_with('0') && version.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `version` is `than` or later, for two versions of objects of one resource
/// (KEP-5504's comparison: positive decimal integers without leading zeros; anything else
/// is only equal to itself).
pub fn at_least(version: &str, than: &str) -> bool {
    if is_integer(version) && is_integer(than) {
        (version.len(), version) >= (than.len(), than)
    } else {
        version == than
    }
}

/// The resourceVersion each resource had when this process last wrote its status or read
/// it, by UID: a cached object at that version is as new as any the process knows of (its
/// own status write included), so it needs no fresh read. One not known is read fresh,
/// so forgetting is always safe: the record is emptied past [`Versions::MAX`] entries
/// (resources deleted leave theirs behind).
#[derive(Default)]
pub struct Versions {
    /// Packed: a UUID and an integer, no allocation of their own; with when it was recorded.
    by_uid: std::sync::Mutex<std::collections::HashMap<Packed, (Packed, Instant)>>,
}

impl Versions {
    const MAX: usize = 50_000;
    /// How long a cache older than a recorded version is taken to be catching up. Past it
    /// the older version is believed (an etcd restored from a backup issues smaller
    /// versions for good): waiting for an event that never comes would stall the resource.
    const CATCH_UP: Duration = Duration::from_secs(30);

    /// Whether `object` is the version last written or read, or a later one.
    pub fn current(&self, object: &impl Resource) -> bool {
        self.compare(object, |version, (last, _)| version.at_least(last))
    }

    /// Whether `object` is older than the version last written or read here: a cache that
    /// has not yet caught up with this process's own write. The write's watch event is on
    /// its way (every event of a watched kind reconciles), so a reconcile can wait for it
    /// rather than decide from the older version. An object whose version is not known, or
    /// was recorded longer than [`Versions::CATCH_UP`] ago, is not behind.
    pub fn behind(&self, object: &impl Resource) -> bool {
        self.behind_at(object, Instant::now())
    }

    fn behind_at(&self, object: &impl Resource, now: Instant) -> bool {
        self.compare(object, |version, (last, when)| {
            version.older_than(last) && now.saturating_duration_since(*when) < Self::CATCH_UP
        })
    }

    /// `test` of `object`'s version and what was recorded of its UID; false when either is
    /// missing.
    fn compare(
        &self,
        object: &impl Resource,
        test: impl Fn(&Packed, &(Packed, Instant)) -> bool,
    ) -> bool {
        let meta = object.meta();
        let (Some(uid), Some(version)) = (&meta.uid, &meta.resource_version) else {
            return false;
        };
        let version = Packed::of(version);
        self.by_uid.lock().is_ok_and(|known| {
            known
                .get(&Packed::of(uid))
                .is_some_and(|recorded| test(&version, recorded))
        })
    }

    /// Records `object`'s version, as just written or read.
    pub fn seen(&self, object: &impl Resource) {
        let meta = object.meta();
        let (Some(uid), Some(version)) = (&meta.uid, &meta.resource_version) else {
            return;
        };
        let (uid, version) = (Packed::of(uid), Packed::of(version));
        if let Ok(mut known) = self.by_uid.lock() {
            if known.len() >= Self::MAX && !known.contains_key(&uid) {
                known.clear();
            }
            known.insert(uid, (version, Instant::now()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_integers_and_anything_else_by_equality() {
        assert!(at_least("10", "9"));
        assert!(at_least("10", "10"));
        assert!(!at_least("9", "10"));
        assert!(at_least("123456789012345678901", "99"));
        // Not KEP-5504 integers: equal or not.
        assert!(!at_least("010", "9"));
        assert!(!at_least("b", "a"));
        assert!(at_least("a", "a"));
        assert!(!at_least("", "1"));
    }

    fn at(uid: &str, version: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        k8s_openapi::api::core::v1::ConfigMap {
            metadata: kube::api::ObjectMeta {
                uid: Some(uid.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_cache_older_than_the_last_write_is_behind_and_an_unknown_one_is_not() {
        const UID: &str = "6f1c1d6e-0000-4000-8000-000000000001";
        let versions = Versions::default();
        assert!(!versions.behind(&at(UID, "5")), "never written: not behind");
        assert!(
            !versions.current(&at(UID, "5")),
            "never written: not current either"
        );
        versions.seen(&at(UID, "7"));
        assert!(versions.behind(&at(UID, "5")));
        assert!(!versions.current(&at(UID, "5")));
        assert!(!versions.behind(&at(UID, "7")) && versions.current(&at(UID, "7")));
        assert!(!versions.behind(&at(UID, "9")) && versions.current(&at(UID, "9")));
        // Another object, and versions that do not compare: never behind.
        assert!(!versions.behind(&at("6f1c1d6e-0000-4000-8000-000000000002", "1")));
        versions.seen(&at(UID, "b"));
        assert!(!versions.behind(&at(UID, "a")));
        // A cache that stays older past the catch-up time is believed (an etcd restored
        // from a backup), not waited for forever.
        versions.seen(&at(UID, "7"));
        let later = Instant::now() + Versions::CATCH_UP + Duration::from_secs(1);
        assert!(!versions.behind_at(&at(UID, "5"), later));
    }
}
