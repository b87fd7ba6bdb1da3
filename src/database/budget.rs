//! Whether the services' connection pools fit the database engines: the sum over the
//! services sharing an engine of pool size × maximum replicas, against the engine's
//! `max_connections`. An autoscaler that scales past it is a frequent cause of outages:
//! new pods fail to connect exactly when load is highest. Pure.

use std::collections::BTreeMap;

use crate::api::ServiceKind;

/// Connections PostgreSQL keeps back for superusers (`superuser_reserved_connections`'s
/// default); ordinary roles cannot use them.
pub const RESERVED: u32 = 3;

/// One service's most connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demand {
    pub service: ServiceKind,
    /// The engine it connects to (`host:port`, or the managed engine's name).
    pub engine: String,
    /// Connections per pod.
    pub pool: u32,
    /// Whether `pool` is assumed: neither the string nor the operator sets `pool_max_conns`
    /// (pgxpool's default follows the node's cores).
    pub pool_assumed: bool,
    /// Most pods: the autoscaler's maximum, else the replica count.
    pub max_replicas: u32,
}

/// The verdict over every engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Budget {
    /// Every engine has room; the tightest is described.
    Fits { message: String },
    /// At least one engine would run out; the message names it and the services.
    Exceeds { message: String },
    /// An engine's `max_connections` is not known (not reachable yet).
    Unknown { message: String },
}

/// Checks `demands` against each engine's `max_connections` (`limits`, by engine).
pub fn check(demands: &[Demand], limits: &BTreeMap<String, Option<u32>>) -> Budget {
    let mut by_engine: BTreeMap<&str, Vec<&Demand>> = BTreeMap::new();
    for demand in demands {
        by_engine.entry(&demand.engine).or_default().push(demand);
    }
    let mut fits = Vec::new();
    let mut exceeds = Vec::new();
    let mut unknown = Vec::new();
    for (engine, demands) in by_engine {
        // Saturating: a tenant's `pool_max_conns` may be any number.
        let used: u32 = demands
            .iter()
            .map(|d| d.pool.saturating_mul(d.max_replicas))
            .fold(0, u32::saturating_add);
        let parts: Vec<String> = demands
            .iter()
            .map(|d| {
                format!(
                    "{} {}×{}{}",
                    d.service,
                    d.pool,
                    d.max_replicas,
                    if d.pool_assumed {
                        " (default pool)"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        match limits.get(engine).copied().flatten() {
            None => unknown.push(format!("{engine}: max_connections not known yet")),
            Some(max) => {
                let usable = max.saturating_sub(RESERVED);
                let line = format!(
                    "{engine}: {used} of {usable} usable connections ({})",
                    parts.join(" + ")
                );
                if used > usable {
                    exceeds.push(line);
                } else {
                    fits.push(line);
                }
            }
        }
    }
    if !exceeds.is_empty() {
        Budget::Exceeds {
            message: format!(
                "{}: lower autoscaling.maxReplicas or pool_max_conns, or raise max_connections",
                exceeds.join("; ")
            ),
        }
    } else if !unknown.is_empty() {
        Budget::Unknown {
            message: unknown.join("; "),
        }
    } else {
        Budget::Fits {
            message: fits.join("; "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(service: ServiceKind, engine: &str, pool: u32, max: u32) -> Demand {
        Demand {
            service,
            engine: engine.into(),
            pool,
            pool_assumed: false,
            max_replicas: max,
        }
    }

    #[test]
    fn shared_engine_sums_the_services() {
        let demands = [
            demand(ServiceKind::Indexer, "db", 10, 10),
            demand(ServiceKind::Matcher, "db", 10, 5),
            demand(ServiceKind::Notifier, "db", 4, 1),
        ];
        let limits = BTreeMap::from([("db".to_string(), Some(200))]);
        assert!(matches!(check(&demands, &limits), Budget::Fits { .. }));
        let limits = BTreeMap::from([("db".to_string(), Some(150))]);
        match check(&demands, &limits) {
            Budget::Exceeds { message } => {
                assert!(message.contains("154 of 147"), "{message}");
                assert!(message.contains("indexer 10×10"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn engines_are_checked_apart() {
        let demands = [
            demand(ServiceKind::Indexer, "a", 50, 3),
            demand(ServiceKind::Matcher, "b", 50, 3),
        ];
        let limits = BTreeMap::from([("a".to_string(), Some(200)), ("b".to_string(), Some(100))]);
        match check(&demands, &limits) {
            Budget::Exceeds { message } => {
                assert!(message.starts_with("b:"), "{message}");
                assert!(!message.contains("a:"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let limits = BTreeMap::from([("a".to_string(), Some(200)), ("b".to_string(), None)]);
        assert!(matches!(check(&demands, &limits), Budget::Unknown { .. }));
    }
}
