//! Which of two versions of one object is the newer, and the version of each resource this
//! process last wrote or read.
//!
//! A resourceVersion was opaque to clients, equality its only comparison; since Kubernetes
//! v1.35 (KEP-5504, "Comparable Resource Version", stable) versions of objects of one
//! resource compare as integers, and every apiserver backed by etcd has always issued them
//! so (the etcd revision of the write). A version that is not such an integer (an
//! aggregated API's, say) compares by equality only, as before.

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
    /// Packed: a UUID and an integer, no allocation of their own.
    by_uid: std::sync::Mutex<std::collections::HashMap<Packed, Packed>>,
}

impl Versions {
    const MAX: usize = 50_000;

    /// Whether `object` is the version last written or read, or a later one.
    pub fn current(&self, object: &impl Resource) -> bool {
        let meta = object.meta();
        let (Some(uid), Some(version)) = (&meta.uid, &meta.resource_version) else {
            return false;
        };
        let version = Packed::of(version);
        self.by_uid.lock().is_ok_and(|known| {
            known
                .get(&Packed::of(uid))
                .is_some_and(|last| version.at_least(last))
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
            known.insert(uid, version);
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
}
