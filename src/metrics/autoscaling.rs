//! What an SRE tunes an autoscaler with, per service resource: the replicas it wants
//! against its bounds, its metrics against their targets, how often it scales each way,
//! how often it turns back soon after scaling (flapping), how long it sits at a bound, and
//! how long new pods take to become ready after a scale-up. Fed by the service controller
//! each time it reads the autoscaler; pure bookkeeping over the times it is given.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A turn the other way within this long of the last change counts as a reversal.
pub const REVERSAL_WINDOW: Duration = Duration::from_secs(600);

/// The resource an autoscaler scales.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// One reading of the autoscaler and the pods it scales.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub min: i32,
    pub max: i32,
    /// What the autoscaler last asked for.
    pub desired: i32,
    /// Pods passing readiness.
    pub ready: i32,
    /// Each metric by name (`cpu`, `memory`, or the metric's own name): current and target.
    pub metrics: BTreeMap<String, (Option<f64>, Option<f64>)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Up,
    Down,
}

/// The running tally of one autoscaler.
#[derive(Clone, Debug)]
pub struct Tally {
    pub last: Reading,
    pub scale_ups: u64,
    pub scale_downs: u64,
    pub reversals: u64,
    last_change: Option<(Direction, Instant)>,
    pinned_max: Duration,
    pinned_min: Duration,
    read_at: Instant,
    /// A scale-up not yet ready: its target and when it was asked for.
    rising: Option<(i32, Instant)>,
    /// How long the last scale-up took until its pods were ready.
    pub last_scale_up_ready: Option<Duration>,
}

impl Tally {
    fn new(reading: Reading, at: Instant) -> Self {
        Self {
            last: reading,
            scale_ups: 0,
            scale_downs: 0,
            reversals: 0,
            last_change: None,
            pinned_max: Duration::ZERO,
            pinned_min: Duration::ZERO,
            read_at: at,
            rising: None,
            last_scale_up_ready: None,
        }
    }

    /// Takes a new reading at `at`.
    fn read(&mut self, reading: Reading, at: Instant) {
        let elapsed = at.saturating_duration_since(self.read_at);
        // The time since the last reading is counted by where the autoscaler stood then.
        if self.last.desired >= self.last.max {
            self.pinned_max += elapsed;
        }
        if self.last.desired <= self.last.min {
            self.pinned_min += elapsed;
        }
        let direction = match reading.desired.cmp(&self.last.desired) {
            std::cmp::Ordering::Greater => Some(Direction::Up),
            std::cmp::Ordering::Less => Some(Direction::Down),
            std::cmp::Ordering::Equal => None,
        };
        if let Some(direction) = direction {
            match direction {
                Direction::Up => {
                    self.scale_ups += 1;
                    self.rising = Some((reading.desired, at));
                }
                Direction::Down => {
                    self.scale_downs += 1;
                    self.rising = None;
                }
            }
            if let Some((previous, when)) = self.last_change
                && previous != direction
                && at.saturating_duration_since(when) <= REVERSAL_WINDOW
            {
                self.reversals += 1;
            }
            self.last_change = Some((direction, at));
        }
        if let Some((target, since)) = self.rising
            && reading.ready >= target
        {
            self.last_scale_up_ready = Some(at.saturating_duration_since(since));
            self.rising = None;
        }
        self.last = reading;
        self.read_at = at;
    }

    /// Time spent at maxReplicas and at minReplicas, up to `now`.
    pub fn pinned(&self, now: Instant) -> (Duration, Duration) {
        let open = now.saturating_duration_since(self.read_at);
        let at_max = self.last.desired >= self.last.max;
        let at_min = self.last.desired <= self.last.min;
        (
            self.pinned_max + if at_max { open } else { Duration::ZERO },
            self.pinned_min + if at_min { open } else { Duration::ZERO },
        )
    }
}

/// Every autoscaler's tally.
#[derive(Debug, Default)]
pub struct Tallies {
    tallies: std::sync::Mutex<BTreeMap<Key, Tally>>,
}

impl Tallies {
    /// Records a reading of `key`'s autoscaler taken at `at`.
    pub fn read(&self, key: Key, reading: Reading, at: Instant) {
        if let Ok(mut tallies) = self.tallies.lock() {
            match tallies.get_mut(&key) {
                Some(tally) => tally.read(reading, at),
                None => {
                    tallies.insert(key, Tally::new(reading, at));
                }
            }
        }
    }

    /// `key` has no autoscaler any more (or is gone): its series go.
    pub fn forget(&self, key: &Key) {
        if let Ok(mut tallies) = self.tallies.lock() {
            tallies.remove(key);
        }
    }

    /// The tallies of the resources `exists` still knows (the others are dropped).
    pub fn current(&self, exists: impl Fn(&Key) -> bool) -> Vec<(Key, Tally)> {
        let Ok(mut tallies) = self.tallies.lock() else {
            return Vec::new();
        };
        tallies.retain(|key, _| exists(key));
        tallies
            .iter()
            .map(|(k, t)| (k.clone(), t.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(desired: i32, ready: i32) -> Reading {
        Reading {
            min: 2,
            max: 6,
            desired,
            ready,
            metrics: BTreeMap::new(),
        }
    }

    #[test]
    fn scaling_each_way_reversals_pinning_and_time_to_ready() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut tally = Tally::new(reading(2, 2), at(0));
        // At minReplicas for 60 s, then up to 4: a scale-up, not ready yet.
        tally.read(reading(4, 2), at(60));
        assert_eq!((tally.scale_ups, tally.scale_downs), (1, 0));
        assert_eq!(
            tally.pinned(at(60)),
            (Duration::ZERO, Duration::from_secs(60))
        );
        // Its pods ready 30 s later.
        tally.read(reading(4, 4), at(90));
        assert_eq!(tally.last_scale_up_ready, Some(Duration::from_secs(30)));
        // Back down within the window: a reversal.
        tally.read(reading(3, 4), at(120));
        assert_eq!((tally.scale_downs, tally.reversals), (1, 1));
        // Up to maxReplicas long after: a scale-up but no reversal; pinned at max since.
        tally.read(reading(6, 3), at(120 + 601));
        assert_eq!((tally.scale_ups, tally.reversals), (2, 1));
        assert_eq!(
            tally.pinned(at(120 + 601 + 100)).0,
            Duration::from_secs(100)
        );
        // A scale-down cancels the pending scale-up's timing.
        tally.read(reading(5, 3), at(900));
        tally.read(reading(5, 5), at(910));
        assert_eq!(tally.last_scale_up_ready, Some(Duration::from_secs(30)));
    }

    #[test]
    fn gone_resources_are_dropped() {
        let tallies = Tallies::default();
        let key = |name: &str| Key {
            kind: "Indexer".into(),
            namespace: "a".into(),
            name: name.into(),
        };
        tallies.read(key("kept"), reading(2, 2), Instant::now());
        tallies.read(key("gone"), reading(2, 2), Instant::now());
        let current = tallies.current(|k| k.name == "kept");
        assert_eq!(current.len(), 1);
        assert_eq!(tallies.current(|_| true).len(), 1);
    }
}
