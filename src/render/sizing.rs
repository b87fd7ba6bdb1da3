//! Settings the operator renders from a service's CPU limit, where Clair's own defaults
//! read the node instead of the pod: the indexer's admission limit
//! (`index_report_request_concurrency`, Clair's default GOMAXPROCS × 4, and GOMAXPROCS
//! ignores a limit under one CPU) and each service's pool (`pool_max_conns`, pgxpool's
//! default `max(4, runtime.NumCPU())`, the node's cores whatever the limit). A 500m
//! indexer on a 64-core node would admit 256 requests and open 64 connections a pod. Only
//! where the pods have a CPU limit: without one, the node's cores are what they may use.
//! The figures come from the load study (docs/autoscaling.md). Pure.

use crate::api::ServiceKind;
use crate::api::common::PodOverrides;

/// Index requests one CPU of the indexer's limit serves at saturation (the load study:
/// a 500m pod's throughput stops growing at two requests in flight).
pub const SATURATING_REQUESTS_PER_CPU: u32 = 4;

/// The fewest index requests an indexer admits: room for layer fetches that wait on a
/// registry rather than on the CPU.
pub const MIN_ADMITTED: u32 = 4;

/// pgxpool's own floor.
const MIN_POOL: u32 = 4;

/// pgxpool's default pool when the pods have no CPU limit: `max(4, runtime.NumCPU())`,
/// the node's cores, which the operator cannot know; the connection budget assumes the floor.
pub const ASSUMED_POOL: u32 = MIN_POOL;

/// The CPU limit of pods with these settings, in millicores.
pub fn cpu_limit_millis(pod: &PodOverrides) -> Option<u32> {
    millicores(&pod.resources.as_ref()?.limits.as_ref()?.get("cpu")?.0)
}

/// Millicores of a CPU quantity (`500m`, `2`, `1.5`); `None` if it does not parse.
pub fn millicores(quantity: &str) -> Option<u32> {
    match quantity.strip_suffix('m') {
        Some(milli) => milli.parse::<u32>().ok(),
        None => quantity
            .parse::<f64>()
            .ok()
            .filter(|c| c.is_finite() && *c >= 0.0 && *c < 4_000_000.0)
            .map(|c| (c * 1000.0).ceil() as u32),
    }
}

/// The requests one pod holds at saturation: what KEDA's in-flight target defaults to.
pub fn saturating_requests(cpu_millis: u32) -> u32 {
    (cpu_millis.saturating_mul(SATURATING_REQUESTS_PER_CPU))
        .div_ceil(1000)
        .max(1)
}

/// `index_report_request_concurrency` for an indexer limited to `cpu_millis`: Clair's own
/// factor (four a CPU) on the limit rather than the node, and at least [`MIN_ADMITTED`].
pub fn admitted_index_requests(cpu_millis: u32) -> u32 {
    saturating_requests(cpu_millis).max(MIN_ADMITTED)
}

/// `pool_max_conns` of a service's pods limited to `cpu_millis`: for the indexer, one
/// connection per admitted request and the one its lock manager holds; for the others,
/// pgxpool's rule on the limit's whole CPUs rather than the node's. Without a limit,
/// nothing is rendered (pgxpool's default stays; see [`ASSUMED_POOL`]).
pub fn pool(service: ServiceKind, cpu_millis: Option<u32>) -> Option<u32> {
    let millis = cpu_millis?;
    Some(match service {
        ServiceKind::Indexer => admitted_index_requests(millis) + 1,
        ServiceKind::Matcher | ServiceKind::Notifier => millis.div_ceil(1000).max(MIN_POOL),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_quantities() {
        assert_eq!(millicores("500m"), Some(500));
        assert_eq!(millicores("2"), Some(2000));
        assert_eq!(millicores("1.5"), Some(1500));
        assert_eq!(millicores("0.25"), Some(250));
        assert_eq!(millicores("lots"), None);
        assert_eq!(millicores("-1"), None);
        assert_eq!(millicores("1e12"), None);
    }

    #[test]
    fn the_indexer_admits_four_requests_a_cpu_and_never_fewer_than_four() {
        assert_eq!(saturating_requests(500), 2);
        assert_eq!(admitted_index_requests(500), 4);
        assert_eq!(admitted_index_requests(2000), 8);
        assert_eq!(admitted_index_requests(4000), 16);
        assert_eq!(saturating_requests(100), 1);
        assert_eq!(pool(ServiceKind::Indexer, Some(2000)), Some(9));
        assert_eq!(pool(ServiceKind::Indexer, Some(500)), Some(5));
    }

    #[test]
    fn pools_follow_the_limit_not_the_node() {
        assert_eq!(pool(ServiceKind::Matcher, Some(500)), Some(4));
        assert_eq!(pool(ServiceKind::Matcher, Some(8000)), Some(8));
        assert_eq!(pool(ServiceKind::Notifier, None), None);
        // A tenant's limit may be any number: no overflow.
        assert!(pool(ServiceKind::Indexer, Some(u32::MAX)).is_some_and(|p| p > 4_000_000));
    }
}
