//! Liveness and readiness, as the probes ask for them: a task registers while it runs (and
//! is counted dead once its guard drops, by returning or by panicking), a cache or server
//! reports when it is ready.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What the operator runs and whether each part is up.
#[derive(Debug, Default)]
pub struct Health {
    parts: Mutex<BTreeMap<String, Part>>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Part {
    alive: bool,
    ready: bool,
    /// The parts started and stopped together (the controllers of a leader).
    group: &'static str,
}

/// Held by a running task: dropping it (the task ended or panicked) marks the part dead.
#[derive(Debug)]
pub struct Alive {
    health: Arc<Health>,
    name: String,
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.health.update(&self.name, |p| {
            p.alive = false;
            p.ready = false;
        });
    }
}

impl Alive {
    /// The part is ready (its caches synced, its server listening).
    pub fn ready(&self) {
        self.readiness().set();
    }

    /// A handle another task can report the readiness with.
    pub fn readiness(&self) -> Readiness {
        Readiness {
            health: self.health.clone(),
            name: self.name.clone(),
        }
    }
}

/// Reports a part ready, from wherever that becomes known.
#[derive(Clone, Debug)]
pub struct Readiness {
    health: Arc<Health>,
    name: String,
}

impl Readiness {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Marks the part ready, if it is still registered (a forgotten part stays forgotten).
    pub fn set(&self) {
        if let Ok(mut parts) = self.health.parts.lock()
            && let Some(part) = parts.get_mut(&self.name)
        {
            part.ready = true;
        }
    }
}

impl Health {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Registers `name` as running, not yet ready, for as long as the guard lives.
    pub fn alive(self: &Arc<Self>, name: impl Into<String>) -> Alive {
        let name = name.into();
        self.update(&name, |p| {
            p.alive = true;
            p.ready = false;
        });
        Alive {
            health: self.clone(),
            name,
        }
    }

    /// As [`Health::alive`], for a part of `group`.
    pub fn alive_in(self: &Arc<Self>, group: &'static str, name: impl Into<String>) -> Alive {
        let alive = self.alive(name);
        self.update(&alive.name, |p| p.group = group);
        alive
    }

    /// Forgets the parts of `group`, stopped on purpose (a replica that stopped leading):
    /// they no longer count as dead.
    pub fn forget(&self, group: &'static str) {
        if let Ok(mut parts) = self.parts.lock() {
            parts.retain(|_, p| p.group != group);
        }
    }

    fn update(&self, name: &str, change: impl FnOnce(&mut Part)) {
        if let Ok(mut parts) = self.parts.lock() {
            change(parts.entry(name.to_string()).or_default());
        }
    }

    fn failing(&self, up: impl Fn(&Part) -> bool, empty_ok: bool) -> Result<(), Vec<String>> {
        let parts = self
            .parts
            .lock()
            .map_err(|_| vec!["health state".to_string()])?;
        if parts.is_empty() && !empty_ok {
            return Err(vec!["nothing started yet".to_string()]);
        }
        let failing: Vec<String> = parts
            .iter()
            .filter(|(_, part)| !up(part))
            .map(|(name, _)| name.clone())
            .collect();
        if failing.is_empty() {
            Ok(())
        } else {
            Err(failing)
        }
    }

    /// Every registered part still runs (nothing registered yet is still starting, alive);
    /// otherwise the dead ones.
    pub fn live(&self) -> Result<(), Vec<String>> {
        self.failing(|p| p.alive, true)
    }

    /// Something runs, and every registered part runs and is ready; otherwise those that
    /// are not.
    pub fn ready(&self) -> Result<(), Vec<String>> {
        self.failing(|p| p.alive && p.ready, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_group_is_not_dead() {
        let health = Health::new();
        let webhook = health.alive("webhook");
        webhook.ready();
        drop(health.alive_in("controllers", "Clair controller"));
        assert!(health.live().is_err(), "a dropped part is dead");
        let late = health.alive_in("controllers", "Indexer controller");
        let readiness = late.readiness();
        drop(late);
        health.forget("controllers");
        // A cache that syncs after its controller was stopped does not bring it back.
        readiness.set();
        assert!(health.live().is_ok() && health.ready().is_ok());
    }

    #[test]
    fn a_dropped_task_fails_liveness_and_an_unready_one_readiness() {
        let health = Health::new();
        assert!(health.live().is_ok(), "starting is alive");
        assert!(health.ready().is_err(), "nothing started is not ready");
        let controllers = health.alive("controllers");
        let webhook = health.alive("webhook");
        assert!(health.live().is_ok());
        assert_eq!(
            health.ready(),
            Err(vec!["controllers".to_string(), "webhook".to_string()])
        );
        controllers.ready();
        webhook.ready();
        assert!(health.ready().is_ok());
        drop(webhook);
        assert_eq!(health.live(), Err(vec!["webhook".to_string()]));
        assert_eq!(health.ready(), Err(vec!["webhook".to_string()]));
    }
}
