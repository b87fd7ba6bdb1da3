//! A capacity shared fairly among peers: the server's turns to decide a review, and the
//! bytes of request bodies it holds at once. A caller waits for what it asks; whatever is
//! given back goes to the waiting caller whose peer holds the least, so a peer that sends
//! many requests (or large ones) cannot keep another's waiting behind them; and one peer
//! holds at most its cap, so slow senders of one peer cannot hold all of it meanwhile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::limits::Peer;

/// Units of one capacity, counted per peer.
#[derive(Debug)]
pub struct Shares {
    capacity: usize,
    /// What one peer may hold at once.
    per_peer: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    free: usize,
    held: HashMap<Peer, usize>,
    waiting: Vec<Waiter>,
    arrivals: u64,
}

#[derive(Debug)]
struct Waiter {
    arrival: u64,
    peer: Peer,
    units: usize,
    grant: oneshot::Sender<Share>,
}

/// Units held by one caller; given back when dropped.
#[derive(Debug)]
pub struct Share {
    shares: Arc<Shares>,
    peer: Peer,
    units: usize,
}

impl Shares {
    pub fn new(capacity: usize) -> Arc<Self> {
        Self::capped(capacity, capacity)
    }

    /// `capacity` units of which one peer holds at most `per_peer`.
    pub fn capped(capacity: usize, per_peer: usize) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            per_peer: per_peer.clamp(1, capacity.max(1)),
            state: Mutex::new(State {
                free: capacity,
                held: HashMap::new(),
                waiting: Vec::new(),
                arrivals: 0,
            }),
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// `units` for `peer` (at most a peer's cap), once they are free, its peer would hold
    /// no more than its cap, and no waiting peer holds less. A caller that stops waiting
    /// (its future dropped) gives up its place.
    pub async fn take(self: &Arc<Self>, peer: Peer, units: usize) -> Share {
        let units = units.clamp(1, self.per_peer);
        let (grant, granted) = oneshot::channel();
        let waiting = {
            let mut state = self.lock();
            let arrival = state.arrivals;
            state.arrivals += 1;
            state.waiting.push(Waiter {
                arrival,
                peer,
                units,
                grant,
            });
            self.grant(&mut state);
            Waiting {
                shares: self.clone(),
                arrival: Some(arrival),
            }
        };
        // The sender is dropped only once the receiver is, so this always receives.
        let share = granted
            .await
            .unwrap_or_else(|_| unreachable!("a waiter is granted or gone"));
        waiting.defuse();
        share
    }

    /// Units held now by `peer` (for tests).
    pub fn held(&self, peer: Peer) -> usize {
        self.lock().held.get(&peer).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives free units to waiters, the one whose peer holds least first (the earliest among
    /// equals), passing over those whose peer is at its cap; stops at the first that does
    /// not fit, so a large request is not passed over for ever.
    fn grant(self: &Arc<Self>, state: &mut State) {
        loop {
            state.waiting.retain(|w| !w.grant.is_closed());
            let held = &state.held;
            let holds = |peer: &Peer| held.get(peer).copied().unwrap_or(0);
            let Some(next) = (0..state.waiting.len())
                .filter(|&i| {
                    let waiter = &state.waiting[i];
                    holds(&waiter.peer) + waiter.units <= self.per_peer
                })
                .min_by_key(|&i| (holds(&state.waiting[i].peer), state.waiting[i].arrival))
            else {
                return;
            };
            if state.waiting[next].units > state.free {
                return;
            }
            let waiter = state.waiting.swap_remove(next);
            state.free -= waiter.units;
            *state.held.entry(waiter.peer).or_default() += waiter.units;
            let share = Share {
                shares: self.clone(),
                peer: waiter.peer,
                units: waiter.units,
            };
            if let Err(mut share) = waiter.grant.send(share) {
                // Its caller stopped waiting since the check above: the units go back here,
                // under the lock already held.
                give_back(state, share.peer, share.units);
                share.units = 0;
            }
        }
    }
}

fn give_back(state: &mut State, peer: Peer, units: usize) {
    state.free += units;
    if let Some(held) = state.held.get_mut(&peer) {
        *held -= units;
        if *held == 0 {
            state.held.remove(&peer);
        }
    }
}

/// A caller's place in the queue: if it stops waiting, the callers behind it may fit.
struct Waiting {
    shares: Arc<Shares>,
    arrival: Option<u64>,
}

impl Waiting {
    fn defuse(mut self) {
        self.arrival = None;
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(arrival) = self.arrival else {
            return;
        };
        let mut state = self.shares.lock();
        state.waiting.retain(|w| w.arrival != arrival);
        self.shares.grant(&mut state);
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if self.units == 0 {
            return;
        }
        let shares = self.shares.clone();
        let mut state = shares.lock();
        give_back(&mut state, self.peer, self.units);
        shares.grant(&mut state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn peer(last: u8) -> Peer {
        Peer(std::net::IpAddr::from([10, 0, 0, last]))
    }

    /// Whether `future` is ready at once (after the tasks it woke have run).
    async fn ready<T>(future: &mut (impl Future<Output = T> + Unpin)) -> Option<T> {
        tokio::time::timeout(Duration::from_millis(10), future)
            .await
            .ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_freed_turn_goes_to_the_peer_holding_least() {
        let turns = Shares::new(2);
        let attacker = peer(9);
        let apiserver = peer(1);
        let first = turns.take(attacker, 1).await;
        let _second = turns.take(attacker, 1).await;
        // The attacker queues more before the apiserver asks.
        let mut queued: Vec<_> = (0..5).map(|_| Box::pin(turns.take(attacker, 1))).collect();
        let mut apiserver_turn = Box::pin(turns.take(apiserver, 1));
        for waiting in &mut queued {
            assert!(ready(waiting).await.is_none(), "no turn is free");
        }
        assert!(ready(&mut apiserver_turn).await.is_none());
        drop(first);
        let turn = ready(&mut apiserver_turn)
            .await
            .expect("the freed turn goes to the apiserver, ahead of the attacker's queue");
        assert_eq!(turns.held(apiserver), 1);
        assert_eq!(turns.held(attacker), 1);
        drop(turn);
        // Then the attacker's, in the order they came.
        let next = ready(&mut queued[0]).await.expect("the attacker's first");
        assert!(ready(&mut queued[1]).await.is_none());
        drop(next);
    }

    #[tokio::test(start_paused = true)]
    async fn one_peer_holds_at_most_its_cap_and_another_gets_the_rest() {
        let bytes = Shares::capped(100, 50);
        let slow = peer(9);
        let first = bytes.take(slow, 30).await;
        // More of the same peer waits, though 70 are free: 30 + 30 is over its 50.
        let mut second = Box::pin(bytes.take(slow, 30));
        assert!(ready(&mut second).await.is_none());
        // Another peer is not kept behind it.
        let other = ready(&mut Box::pin(bytes.take(peer(1), 50)))
            .await
            .expect("the other peer's 50 fit beside the slow peer's 30");
        assert_eq!(bytes.held(peer(1)), 50);
        drop(other);
        assert!(ready(&mut second).await.is_none(), "still over its cap");
        drop(first);
        let _second = ready(&mut second).await.expect("within its cap again");
        // One ask over the cap is the cap.
        assert_eq!(bytes.held(slow), 30);
        let _most = ready(&mut Box::pin(bytes.take(peer(2), 1000)))
            .await
            .expect("a peer's cap");
        assert_eq!(bytes.held(peer(2)), 50);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_gives_up_loses_its_place_and_no_units() {
        let bytes = Shares::new(100);
        let held = bytes.take(peer(1), 60).await;
        let mut large = Box::pin(bytes.take(peer(2), 80));
        assert!(ready(&mut large).await.is_none(), "40 free of the 80 asked");
        // A small request behind the large one waits too: the large one is not passed over.
        let mut small = Box::pin(bytes.take(peer(3), 10));
        assert!(ready(&mut small).await.is_none());
        drop(large);
        let small = ready(&mut small)
            .await
            .expect("once the large one gave up, the small one fits");
        drop(held);
        drop(small);
        assert_eq!(bytes.lock().free, 100, "every unit given back");
        // More than the capacity is asked as the whole of it, never for ever.
        let all = bytes.take(peer(4), 1000).await;
        assert_eq!(bytes.held(peer(4)), 100);
        drop(all);
    }
}
