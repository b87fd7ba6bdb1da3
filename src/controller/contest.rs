//! Second writers. A field the operator applied and someone else changed is changed back
//! (drift), at once the first time. When it keeps happening (another controller, a script
//! setting an owned Deployment's image every second), each further revert waits longer
//! (exponential, with jitter, per object, up to five minutes), so a fight costs a few writes
//! a minute at most instead of one per change; the owner gets a `Contested` condition naming
//! the object and the other writer, and `applies_total{outcome="reverted"}` counts the
//! reverts. Once the other writer stops, the next revert holds and, five minutes later, the
//! fight is forgotten and the condition goes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::machine::conditions::{ConditionType, Reason};

/// How long after its last revert a fight is remembered; also the longest wait.
pub const MEMORY: Duration = Duration::from_secs(300);

/// Reverts of one object within [`MEMORY`] of each other that make a fight.
const FIGHT: u32 = 2;

/// One owned object: its owner's UID, kind and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub owner_uid: String,
    pub kind: String,
    pub name: String,
}

struct Fight {
    reverts: u32,
    last: Instant,
    /// No revert before this.
    next: Instant,
    /// Who changed it last.
    writer: String,
    delays: ExponentialBackoff,
}

/// What to do with an object that drifted.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Revert,
    Wait(Duration),
}

/// A fight, as the owner's condition tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contest {
    pub kind: String,
    pub name: String,
    pub reverts: u32,
    pub writer: String,
}

/// Every fight the operator is in, by object.
#[derive(Default)]
pub struct Contests {
    fights: Mutex<HashMap<Key, Fight>>,
}

impl std::fmt::Debug for Contests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self.fights.lock().map(|f| f.len()).unwrap_or_default();
        f.debug_struct("Contests").field("fights", &count).finish()
    }
}

/// Drops the fights with no revert for [`MEMORY`].
fn forget_old(fights: &mut HashMap<Key, Fight>, now: Instant) {
    fights.retain(|_, f| now.saturating_duration_since(f.last) < MEMORY || now < f.next);
}

fn delays() -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(1))
        .with_max_delay(MEMORY)
        .with_jitter()
        .without_max_times()
        .build()
}

impl Contests {
    /// `key` no longer holds what the operator applied: revert now, or wait.
    pub fn drifted(&self, key: &Key, now: Instant) -> Verdict {
        let Ok(mut fights) = self.fights.lock() else {
            return Verdict::Revert;
        };
        forget_old(&mut fights, now);
        match fights.get(key) {
            Some(fight) if now < fight.next => Verdict::Wait(fight.next - now),
            _ => Verdict::Revert,
        }
    }

    /// `key` was changed back from what `writer` made it.
    pub fn reverted(&self, key: &Key, writer: &str, now: Instant) {
        let Ok(mut fights) = self.fights.lock() else {
            return;
        };
        let fight = fights.entry(key.clone()).or_insert_with(|| Fight {
            reverts: 0,
            last: now,
            next: now,
            writer: String::new(),
            delays: delays(),
        });
        if now.saturating_duration_since(fight.last) >= MEMORY {
            (fight.reverts, fight.delays) = (0, delays());
        }
        fight.reverts += 1;
        fight.last = now;
        fight.writer = writer.to_string();
        // The first revert of a hand edit waits for nothing; each one after it, longer.
        // Jitter may add up to the delay again: held to MEMORY, so a fight is remembered
        // until its next revert is due.
        let wait = fight.delays.next().unwrap_or(MEMORY).min(MEMORY);
        fight.next = now + wait;
    }

    /// The fights of the objects `owner_uid` owns, for its condition.
    pub fn of(&self, owner_uid: &str, now: Instant) -> Vec<Contest> {
        let Ok(fights) = self.fights.lock() else {
            return Vec::new();
        };
        let mut contests: Vec<Contest> = fights
            .iter()
            .filter(|(key, fight)| {
                key.owner_uid == owner_uid
                    && fight.reverts >= FIGHT
                    && now.saturating_duration_since(fight.last) < MEMORY
            })
            .map(|(key, fight)| Contest {
                kind: key.kind.clone(),
                name: key.name.clone(),
                reverts: fight.reverts,
                writer: fight.writer.clone(),
            })
            .collect();
        contests.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
        contests
    }

    /// When the fights of `owner_uid` end if nothing changes: its next reconcile then
    /// drops the condition.
    pub fn settles_in(&self, owner_uid: &str, now: Instant) -> Option<Duration> {
        let mut fights = self.fights.lock().ok()?;
        forget_old(&mut fights, now);
        fights
            .iter()
            .filter(|(key, _)| key.owner_uid == owner_uid)
            .map(|(_, f)| (f.last + MEMORY).saturating_duration_since(now))
            .min()
    }
}

/// The `Contested` condition for `contests` (none when there is no fight), keeping its
/// transition time from `previous`.
pub fn condition(contests: &[Contest], previous: &[Condition], now: &Time) -> Option<Condition> {
    let first = contests.first()?;
    let others = match contests.len() {
        1 => String::new(),
        n => format!(" (and {} other objects)", n - 1),
    };
    // Nothing in it changes between reverts: a status write per reconcile would otherwise
    // make the operator write while idle.
    let message = format!(
        "{} {} was changed back {} times, last from what {:?} wrote{others}: another writer \
         sets a field the operator owns; each revert waits longer (up to {} min). Stop the \
         other writer, or change the field through this resource. See {}",
        first.kind,
        first.name,
        first.reverts,
        first.writer,
        MEMORY.as_secs() / 60,
        Reason::FieldContested.runbook_link(),
    );
    let type_ = ConditionType::Contested.as_str().to_string();
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Some(Condition {
        type_,
        status: "True".to_string(),
        reason: Reason::FieldContested.as_str().to_string(),
        message,
        last_transition_time: since,
        observed_generation: None,
    })
}

/// The manager that last wrote a spec (or a ConfigMap's or Secret's data) field of `object`
/// other than the operator: the other writer (controllers writing status, or a revision
/// annotation, are not).
pub fn last_writer(object: &impl kube::Resource) -> String {
    object
        .meta()
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() != Some(crate::api::labels::FIELD_MANAGER))
        .filter(|m| m.subresource.as_deref().unwrap_or_default().is_empty())
        .filter(|m| {
            m.fields_v1.as_ref().is_some_and(|f| {
                ["f:spec", "f:data", "f:binaryData"]
                    .iter()
                    .any(|k| f.0.get(k).is_some())
            })
        })
        .max_by_key(|m| m.time.as_ref().map(|t| t.0))
        .and_then(|m| m.manager.clone())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            owner_uid: "u".into(),
            kind: "Deployment".into(),
            name: "idx".into(),
        }
    }

    #[test]
    fn a_hand_edit_is_reverted_at_once_and_is_no_fight() {
        let contests = Contests::default();
        let now = Instant::now();
        assert_eq!(contests.drifted(&key(), now), Verdict::Revert);
        contests.reverted(&key(), "kubectl-edit", now);
        assert!(contests.of("u", now).is_empty());
    }

    /// A writer changing it back every second: the reverts spread out, and a fight shows.
    #[test]
    fn a_fight_is_bounded_by_a_growing_wait() {
        let contests = Contests::default();
        let start = Instant::now();
        let mut reverts = 0;
        for second in 0..120 {
            let now = start + Duration::from_secs(second);
            if contests.drifted(&key(), now) == Verdict::Revert {
                contests.reverted(&key(), "fighter", now);
                reverts += 1;
            }
        }
        // 1, 2, 4, 8, 16, 32, 64 s apart at most (jitter only adds): at most 8 in 2 min.
        assert!((3..=8).contains(&reverts), "{reverts} reverts in 120 s");
        let fights = contests.of("u", start + Duration::from_secs(120));
        assert_eq!(fights.len(), 1);
        assert_eq!(fights[0].writer, "fighter");
        assert!(contests.of("other", start).is_empty());
        // Forgotten once nothing needed changing back for the memory, and no reconcile is
        // asked for at once because of it.
        let later = start + Duration::from_secs(120) + MEMORY;
        assert!(contests.of("u", later).is_empty());
        assert_eq!(contests.settles_in("u", later), None);
        assert_eq!(contests.drifted(&key(), later), Verdict::Revert);
    }

    #[test]
    fn the_condition_names_the_object_and_the_writer() {
        let contest = Contest {
            kind: "Deployment".into(),
            name: "idx".into(),
            reverts: 4,
            writer: "fighter".into(),
        };
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let said = condition(&[contest], &[], &now).unwrap();
        assert_eq!(said.type_, "Contested");
        assert!(
            said.message
                .starts_with("Deployment idx was changed back 4 times")
        );
        assert!(said.message.contains("\"fighter\""));
        assert!(condition(&[], &[], &now).is_none());
    }
}
