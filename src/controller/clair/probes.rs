//! Database checks apart from the reconcile, so that one tenant's slow database holds back
//! only its own `Clair`s. A connection string pointing at an address that drops packets makes
//! a check last as long as its timeouts allow; awaited inside the reconcile, twenty such
//! Clairs held every reconcile worker for minutes and another namespace's Clair waited 226 s
//! to become Available instead of 2 s.
//!
//! A reconcile asks [`Probes::result`] for each service's check: a recent result is used
//! as it is; an older one is used while a new check runs in the background; with none yet,
//! the database counts as not checked (not ready). A finished check whose result differs
//! from the last wakes the `Clair`s that asked for it ([`Probes::woken`]); the same answer
//! again wakes nobody (they decided on it already). Checks run at most [`PER_NAMESPACE`] at
//! once per namespace (beside the operator-wide bound in `database::probe`, whose turn
//! starts each one's deadline).
//!
//! One check serves every `Clair` of a namespace whose service names the same string and
//! CAs: at 1,000 Clairs on one database, a check every [`FRESH`] seconds per role instead
//! of 3,000, each a connection with a SCRAM handshake (4,096 rounds of HMAC here) and a
//! PostgreSQL backend forked there. Before, while a fleet converged for twelve minutes,
//! those checks and the reconciles their ends woke were most of the operator's CPU and
//! took cores from the apiserver.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::Stream;
use kube::runtime::reflector::ObjectRef;
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};
use tokio::sync::{Semaphore, broadcast};
use tracing::Instrument;

use crate::api::{Clair, ServiceKind};
use crate::database::connstring::ConnSettings;
use crate::database::networks::Networks;
use crate::database::probe::{self, Failure, ProbeOptions, Probed};

/// A result younger than this is used without checking again.
pub const FRESH: Duration = Duration::from_secs(15);
/// Checks of one namespace's databases running at once.
pub const PER_NAMESPACE: usize = 2;
/// Results not asked for in this long are forgotten (a deleted Clair, a replaced string).
const FORGET_AFTER: Duration = Duration::from_secs(3600);
/// How often the forgetting is done (a walk of every check).
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Who asks: a service of a Clair, with the digest of what is checked (the string and the
/// CAs it trusts), so a changed string is checked afresh.
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

    /// The check it asks for, shared by every Clair of the namespace asking the same.
    fn check(&self) -> Check {
        Check {
            namespace: self.namespace.clone(),
            role: self.role,
            digest: self.digest,
        }
    }
}

/// What is checked: a string (and the CAs it trusts) for a role (the notifier's check also
/// counts its notifications), in a namespace (never shared across tenants).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Check {
    namespace: String,
    role: ServiceKind,
    digest: [u8; 32],
}

#[derive(Debug, Default)]
struct Entry {
    /// The last check's outcome and when it ended.
    last: Option<(Result<Probed, Failure>, Instant)>,
    running: bool,
    /// What the check started is to connect with, until it takes its turn: held here, not
    /// by the waiting task, so that a replaced string's copies go with its entry.
    input: Option<Input>,
    /// The Clairs that asked for it, and when they last did: woken when its result changes.
    askers: HashMap<String, Instant>,
}

#[derive(Debug)]
struct Input {
    settings: ConnSettings,
    options: ProbeOptions,
    trusted: Vec<CertificateDer<'static>>,
    networks: Networks,
}

/// A service of a Clair that asks for checks: namespace, Clair, role.
type Asker = (String, String, ServiceKind);

#[derive(Debug)]
struct Entries {
    checks: HashMap<Check, Entry>,
    /// The check each service last asked for: one at a time, so a string rewritten in a loop
    /// leaves one entry, not one per value.
    asked: HashMap<Asker, Check>,
    swept: Instant,
}

impl Entries {
    fn new(now: Instant) -> Self {
        Entries {
            checks: HashMap::new(),
            asked: HashMap::new(),
            swept: now,
        }
    }

    /// The entry `key` asks for, its Clair counted as an asker; the check it asked for
    /// before, if another, loses it, and goes when nobody else asks (a running check's
    /// end then finds no entry and is dropped).
    fn ask(&mut self, key: &Key, now: Instant) -> &mut Entry {
        let check = key.check();
        let asker = (key.namespace.clone(), key.clair.clone(), key.role);
        if let Some(previous) = self.asked.insert(asker, check.clone())
            && previous != check
            && let Some(old) = self.checks.get_mut(&previous)
        {
            old.askers.remove(&key.clair);
            if old.askers.is_empty() {
                self.checks.remove(&previous);
            }
        }
        let entry = self.checks.entry(check).or_default();
        entry.askers.insert(key.clair.clone(), now);
        entry
    }

    /// Forgets, at most once a [`SWEEP_EVERY`], the Clairs that have not asked in
    /// [`FORGET_AFTER`] and the checks nobody asks for any more.
    fn sweep(&mut self, now: Instant) {
        if now.duration_since(self.swept) < SWEEP_EVERY {
            return;
        }
        self.swept = now;
        self.checks.retain(|_, entry| {
            entry
                .askers
                .retain(|_, at| now.duration_since(*at) < FORGET_AFTER);
            entry.running || !entry.askers.is_empty()
        });
        let checks = &self.checks;
        self.asked.retain(|(_, clair, _), check| {
            checks
                .get(check)
                .is_some_and(|entry| entry.askers.contains_key(clair))
        });
    }
}

/// Ends a check of `entry` with `result`: the Clairs to wake, all that asked when the
/// result differs from the last (or is the first), none when it is the same again.
fn ended(entry: &mut Entry, result: Result<Probed, Failure>, now: Instant) -> Vec<String> {
    let changed = entry.last.as_ref().is_none_or(|(last, _)| *last != result);
    entry.last = Some((result, now));
    entry.running = false;
    if changed {
        entry.askers.keys().cloned().collect()
    } else {
        Vec::new()
    }
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
    entries: Mutex<Entries>,
    namespaces: Mutex<HashMap<String, Arc<Semaphore>>>,
    wake: broadcast::Sender<ObjectRef<Clair>>,
}

impl Default for Probes {
    fn default() -> Self {
        Self {
            entries: Mutex::new(Entries::new(Instant::now())),
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
    /// fresh; its end wakes the Clair if the result changed.
    pub fn result(
        self: &Arc<Self>,
        key: Key,
        settings: &ConnSettings,
        options: ProbeOptions,
        trusted: &[CertificateDer<'static>],
        networks: &Networks,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Outcome {
        let now = Instant::now();
        let (last, start) = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries.sweep(now);
            let entry = entries.ask(&key, now);
            let (last, start) = decide(entry, now);
            if start {
                entry.running = true;
                entry.input = Some(Input {
                    settings: settings.clone(),
                    options,
                    trusted: trusted.to_vec(),
                    networks: networks.clone(),
                });
            }
            (last, start)
        };
        if start {
            self.spawn(key.check(), metrics);
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

    fn spawn(self: &Arc<Self>, key: Check, metrics: Arc<crate::metrics::Metrics>) {
        let probes = self.clone();
        let turns = self.namespace_turns(&key.namespace);
        tokio::spawn(async move {
            let result = {
                let _turn = turns.acquire().await;
                // Replaced (a new string) or forgotten while it waited: not worth a check.
                let input = probes
                    .entries
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .checks
                    .get_mut(&key)
                    .and_then(|entry| entry.input.take());
                let Some(Input {
                    settings,
                    options,
                    trusted,
                    networks,
                }) = input
                else {
                    return;
                };
                let start = Instant::now();
                let checked = probe::probe_settings(&settings, options, &trusted, &networks)
                    .instrument(tracing::info_span!(
                        "database_check",
                        namespace = %key.namespace,
                        role = %key.role
                    ))
                    .await;
                let verdict = match &checked {
                    Ok(_) => "ok",
                    Err(failure) => super::database::failure_reason(failure.kind).as_str(),
                };
                metrics.database_probed(verdict, start.elapsed());
                checked
            };
            let woken = {
                let mut entries = probes.entries.lock().unwrap_or_else(|e| e.into_inner());
                match entries.checks.get_mut(&key) {
                    Some(entry) => ended(entry, result, Instant::now()),
                    None => Vec::new(),
                }
            };
            for clair in woken {
                // Nobody listening (the controllers stopped) is fine.
                let _ = probes
                    .wake
                    .send(ObjectRef::new(&clair).within(&key.namespace));
            }
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
    use crate::database::probe::FailureKind;

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
    fn one_check_serves_a_namespace_asking_the_same() {
        let a = Key::new("ns", "clair", ServiceKind::Indexer, "host=a", &[]);
        let changed = Key::new("ns", "clair", ServiceKind::Indexer, "host=b", &[]);
        assert_ne!(
            a.check(),
            changed.check(),
            "a changed string is another check"
        );
        let other_clair = Key::new("ns", "other", ServiceKind::Indexer, "host=a", &[]);
        assert_eq!(
            a.check(),
            other_clair.check(),
            "the same string is one check"
        );
        let other_role = Key::new("ns", "clair", ServiceKind::Notifier, "host=a", &[]);
        assert_ne!(
            a.check(),
            other_role.check(),
            "the notifier's counts its notifications"
        );
        let other_tenant = Key::new("other-ns", "clair", ServiceKind::Indexer, "host=a", &[]);
        assert_ne!(
            a.check(),
            other_tenant.check(),
            "never shared across namespaces"
        );
    }

    #[test]
    fn an_end_wakes_the_askers_only_when_the_result_changed() {
        let now = Instant::now();
        let mut entry = Entry {
            running: true,
            askers: HashMap::from([("a".to_string(), now), ("b".to_string(), now)]),
            ..Default::default()
        };
        let mut woken = ended(&mut entry, ok(), now);
        woken.sort();
        assert_eq!(woken, ["a", "b"], "the first result wakes everyone waiting");
        assert!(!entry.running);
        assert!(
            ended(&mut entry, ok(), now).is_empty(),
            "the same again: nobody"
        );
        let lost = Err(Failure {
            kind: FailureKind::Unreachable,
            message: "gone".to_string(),
        });
        assert_eq!(ended(&mut entry, lost, now).len(), 2, "a change: everyone");
    }

    #[test]
    fn a_string_rewritten_a_hundred_times_leaves_one_check() {
        let now = Instant::now();
        let mut entries = Entries::new(now);
        let other = Key::new("ns", "other", ServiceKind::Indexer, "host=shared", &[]);
        entries.ask(&other, now);
        let big = "x".repeat(64 * 1024);
        for i in 0..100 {
            let key = Key::new(
                "ns",
                "clair",
                ServiceKind::Indexer,
                &format!("host={i} {big}"),
                &[],
            );
            let entry = entries.ask(&key, now);
            entry.running = true;
            entry.input = Some(Input {
                settings: crate::database::connstring::parse(&format!("host=h{i} user=u")).unwrap(),
                options: ProbeOptions::default(),
                trusted: Vec::new(),
                networks: Networks::default(),
            });
        }
        assert_eq!(
            entries.checks.len(),
            2,
            "the last string's check, and the other Clair's"
        );
        assert_eq!(entries.asked.len(), 2);
        // The shared string's check is kept while someone else still asks for it.
        let shared = Key::new("ns", "clair", ServiceKind::Indexer, "host=shared", &[]);
        entries.ask(&shared, now);
        entries.ask(
            &Key::new("ns", "clair", ServiceKind::Indexer, "host=new", &[]),
            now,
        );
        assert_eq!(entries.checks.len(), 2);
        assert!(entries.checks.contains_key(&other.check()));
    }

    #[test]
    fn clairs_silent_for_an_hour_and_their_checks_are_forgotten() {
        let start = Instant::now();
        let mut entries = Entries::new(start);
        let key = Key::new("ns", "clair", ServiceKind::Indexer, "host=a", &[]);
        entries
            .checks
            .entry(key.check())
            .or_default()
            .askers
            .insert("clair".into(), start);
        entries.sweep(start + SWEEP_EVERY / 2);
        assert_eq!(entries.checks.len(), 1, "not swept more than once a minute");
        entries.sweep(start + SWEEP_EVERY);
        assert_eq!(entries.checks.len(), 1, "asked a minute ago");
        entries.sweep(start + FORGET_AFTER + SWEEP_EVERY);
        assert!(entries.checks.is_empty());
    }
}
