//! What a reconcile's observe step read moments ago and found absent (a service's
//! Deployment, a generated Secret), so that its applier, creating that object in the same
//! reconcile, does not read it again first. A mark counts for [`FRESH`] at most and once:
//! the applier's own read before its first apply exists so that someone else's object of
//! the name is never taken over, and a read 2 s old says that as well as one a millisecond
//! old would (any read before a write leaves such a window).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a read's "absent" stands for the applier's.
pub const FRESH: Duration = Duration::from_secs(2);

type Key = (String, String, String);

/// Objects read and found absent, by kind, namespace and name.
#[derive(Default)]
pub struct Absent {
    marks: Mutex<HashMap<Key, Instant>>,
}

impl Absent {
    /// Object `name` of `kind` was just read and does not exist.
    pub fn read(&self, kind: &str, namespace: &str, name: &str) {
        let Ok(mut marks) = self.marks.lock() else {
            return;
        };
        // Marks no applier took are forgotten: at most those of the last FRESH are held.
        marks.retain(|_, at| at.elapsed() < FRESH);
        marks.insert(key(kind, namespace, name), Instant::now());
    }

    /// Whether object `name` was read absent within [`FRESH`]; the mark is used up.
    pub fn take(&self, kind: &str, namespace: &str, name: &str) -> bool {
        self.marks
            .lock()
            .ok()
            .and_then(|mut marks| marks.remove(&key(kind, namespace, name)))
            .is_some_and(|at| at.elapsed() < FRESH)
    }

    /// Marks held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.marks.lock().map(|m| m.len()).unwrap_or(0)
    }
}

fn key(kind: &str, namespace: &str, name: &str) -> Key {
    (kind.to_string(), namespace.to_string(), name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_mark_is_taken_once_and_only_for_its_object() {
        let absent = Absent::default();
        absent.read("Deployment", "ns", "a");
        assert!(!absent.take("Deployment", "ns", "b"));
        assert!(!absent.take("Secret", "ns", "a"));
        assert!(!absent.take("Deployment", "other", "a"));
        assert!(absent.take("Deployment", "ns", "a"));
        assert!(!absent.take("Deployment", "ns", "a"), "a mark is used once");
    }

    #[test]
    fn an_old_mark_counts_for_nothing_and_is_forgotten() {
        let absent = Absent::default();
        let old = Instant::now().checked_sub(FRESH).expect("the clock runs");
        absent
            .marks
            .lock()
            .unwrap()
            .insert(key("Secret", "ns", "old"), old);
        absent.read("Secret", "ns", "new");
        assert_eq!(absent.len(), 1, "the old mark went with the next one");
        absent
            .marks
            .lock()
            .unwrap()
            .insert(key("Secret", "ns", "old"), old);
        assert!(!absent.take("Secret", "ns", "old"));
    }
}
