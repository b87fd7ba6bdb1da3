//! Database checks apart from the reconcile, so that one tenant's slow database holds back
//! only its own `Clair`s. A connection string pointing at an address that drops packets makes
//! a check last as long as its timeouts allow; awaited inside the reconcile, twenty such
//! Clairs held every reconcile worker for minutes and another namespace's Clair waited 226 s
//! to become Available instead of 2 s.
//!
//! A reconcile asks [`Probes::result`] for each service's check: a recent result is used
//! as it is; an older one is used while a new check runs in the background; with none yet,
//! the database counts as not checked (not ready). A finished check wakes the `Clair` it was
//! for ([`Probes::woken`]). Checks run at most [`PER_NAMESPACE`] at once per namespace
//! (beside the operator-wide bound in `database::probe`), each within [`PROBE_DEADLINE`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::Stream;
use kube::runtime::reflector::ObjectRef;
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};
use tokio::sync::{Semaphore, broadcast};

use crate::api::{Clair, ServiceKind};
use crate::database::connstring::ConnSettings;
use crate::database::probe::{self, Failure, FailureKind, ProbeOptions, Probed};

/// A result younger than this is used without checking again.
pub const FRESH: Duration = Duration::from_secs(15);
/// Checks of one namespace's databases running at once.
pub const PER_NAMESPACE: usize = 2;
/// The longest one check may take, however many hosts its string lists.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(30);
/// Results not asked for in this long are forgotten (a deleted Clair, a replaced string).
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// Whose check: a service of a Clair, with the digest of what is checked (the string and
/// the CAs it trusts), so a changed string is checked afresh.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Key {
    pub namespace: String,
    pub clair: String,
    pub role: ServiceKind,
    digest: [u8; 32],
}

impl Key {
    pub fn new(
        namespace: &str,
        clair: &str,
        role: ServiceKind,
        string: &str,
        trusted: &[CertificateDer<'static>],
    ) -> Self {
        let mut hash = Sha256::new();
        hash.update(string.as_bytes());
        for ca in trusted {
            hash.update(ca.as_ref());
        }
        Key {
            namespace: namespace.to_string(),
            clair: clair.to_string(),
            role,
            digest: hash.finalize().into(),
        }
    }

    fn same_service(&self, other: &Key) -> bool {
        self.namespace == other.namespace && self.clair == other.clair && self.role == other.role
    }
}

#[derive(Debug, Default)]
struct Entry {
    /// The last check's outcome and when it ended.
    last: Option<(Result<Probed, Failure>, Instant)>,
    running: bool,
    asked: Option<Instant>,
}

/// What a reconcile gets for one service's check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The last check's result (a new one may be running).
    Checked(Result<Probed, Failure>),
    /// No check has ended yet; one is running.
    Pending,
}

/// What to do about a key, decided from its entry: pure, for tests.
fn decide(entry: &Entry, now: Instant) -> (Option<Result<Probed, Failure>>, bool) {
    let fresh = entry
        .last
        .as_ref()
        .is_some_and(|(_, at)| now.duration_since(*at) < FRESH);
    let start = !fresh && !entry.running;
    (entry.last.as_ref().map(|(r, _)| r.clone()), start)
}

pub struct Probes {
    entries: Mutex<HashMap<Key, Entry>>,
    namespaces: Mutex<HashMap<String, Arc<Semaphore>>>,
    wake: broadcast::Sender<ObjectRef<Clair>>,
}

impl Default for Probes {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            namespaces: Mutex::new(HashMap::new()),
            wake: broadcast::channel(1024).0,
        }
    }
}

impl std::fmt::Debug for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probes").finish_non_exhaustive()
    }
}

impl Probes {
    /// The check of `key`'s database, starting one in the background when the last is not
    /// fresh; its end wakes the Clair.
    pub fn result(
        self: &Arc<Self>,
        key: Key,
        settings: &ConnSettings,
        options: ProbeOptions,
        trusted: &[CertificateDer<'static>],
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Outcome {
        let now = Instant::now();
        let (last, start) = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            // A replaced string's results, and those nobody asked for in an hour, go.
            entries.retain(|k, e| {
                (k == &key || !k.same_service(&key))
                    && e.asked
                        .is_none_or(|at| now.duration_since(at) < FORGET_AFTER)
            });
            let entry = entries.entry(key.clone()).or_default();
            entry.asked = Some(now);
            let (last, start) = decide(entry, now);
            entry.running |= start;
            (last, start)
        };
        if start {
            self.spawn(key, settings.clone(), options, trusted.to_vec(), metrics);
        }
        match last {
            Some(result) => Outcome::Checked(result),
            None => Outcome::Pending,
        }
    }

    fn namespace_turns(&self, namespace: &str) -> Arc<Semaphore> {
        let mut namespaces = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
        // Namespaces no check holds or waits for are forgotten, so the map stays small (a
        // task spawned but not yet waiting holds a clone: it counts).
        namespaces.retain(|_, turns| Arc::strong_count(turns) > 1);
        namespaces
            .entry(namespace.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(PER_NAMESPACE)))
            .clone()
    }

    fn spawn(
        self: &Arc<Self>,
        key: Key,
        settings: ConnSettings,
        options: ProbeOptions,
        trusted: Vec<CertificateDer<'static>>,
        metrics: Arc<crate::metrics::Metrics>,
    ) {
        let probes = self.clone();
        let turns = self.namespace_turns(&key.namespace);
        tokio::spawn(async move {
            let result = {
                let _turn = turns.acquire().await;
                // Replaced (a new string) or forgotten while it waited: not worth a check.
                let wanted = probes
                    .entries
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains_key(&key);
                if !wanted {
                    return;
                }
                let start = Instant::now();
                let checked = tokio::time::timeout(
                    PROBE_DEADLINE,
                    probe::probe_settings(&settings, options, &trusted),
                )
                .await
                .unwrap_or_else(|_| {
                    Err(Failure {
                        kind: FailureKind::Unreachable,
                        message: format!(
                            "no answer within {} s (every host of the string, every attempt)",
                            PROBE_DEADLINE.as_secs()
                        ),
                    })
                });
                let verdict = match &checked {
                    Ok(_) => "ok",
                    Err(failure) => super::database::failure_reason(failure.kind).as_str(),
                };
                metrics.database_probed(verdict, start.elapsed());
                checked
            };
            {
                let mut entries = probes.entries.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(entry) = entries.get_mut(&key) {
                    entry.last = Some((result, Instant::now()));
                    entry.running = false;
                }
            }
            // Nobody listening (the controllers stopped) is fine.
            let _ = probes
                .wake
                .send(ObjectRef::new(&key.clair).within(&key.namespace));
        });
    }

    /// The Clairs whose check ended, for the controller to reconcile again. A lagging
    /// receiver drops what it missed: the Clair's own requeue picks it up.
    pub fn woken(&self) -> impl Stream<Item = ObjectRef<Clair>> + Send + 'static {
        futures::stream::unfold(self.wake.subscribe(), |mut receiver| async move {
            loop {
                match receiver.recv().await {
                    Ok(clair) => return Some((clair, receiver)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> Result<Probed, Failure> {
        Ok(Probed {
            max_connections: Some(100),
            undelivered: None,
        })
    }

    #[test]
    fn fresh_results_are_used_old_ones_while_checking_again() {
        let now = Instant::now();
        let never = Entry::default();
        assert_eq!(decide(&never, now), (None, true), "a first check starts");
        let running = Entry {
            running: true,
            ..Default::default()
        };
        assert_eq!(decide(&running, now), (None, false), "one check at a time");
        let fresh = Entry {
            last: Some((ok(), now)),
            ..Default::default()
        };
        assert_eq!(decide(&fresh, now + FRESH / 2), (Some(ok()), false));
        assert_eq!(
            decide(&fresh, now + FRESH * 2),
            (Some(ok()), true),
            "an old result is used while a new check runs"
        );
    }

    #[test]
    fn a_changed_string_is_another_check() {
        let a = Key::new("ns", "clair", ServiceKind::Indexer, "host=a", &[]);
        let b = Key::new("ns", "clair", ServiceKind::Indexer, "host=b", &[]);
        assert_ne!(a, b);
        assert!(a.same_service(&b));
        let other = Key::new("ns", "clair", ServiceKind::Matcher, "host=a", &[]);
        assert!(!a.same_service(&other));
    }
}
