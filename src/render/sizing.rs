//! Settings the operator renders from a service's CPU limit, where Clair's own defaults
//! read the node instead of the pod: the indexer's admission limit
//! (`index_report_request_concurrency`, Clair's default GOMAXPROCS × 4, and for a limit
//! under one CPU GOMAXPROCS stays at the node's core count) and each service's pool (`pool_max_conns`, pgxpool's
//! default `max(4, runtime.NumCPU())`, the node's cores whatever the limit). A 500m
//! indexer on a 64-core node would admit 256 requests and open 64 connections a pod. Only
//! where the pods have a CPU limit: without one, the node's cores are what they may use.
//! The figures come from the load study (docs/autoscaling.md). Pure.

use crate::api::ServiceKind;
use crate::api::common::PodOverrides;

/// Index requests one CPU of the indexer's limit serves at saturation (the load study:
/// a 500m pod's throughput stops growing at two requests in flight): KEDA's in-flight
/// target.
pub const SATURATING_REQUESTS_PER_CPU: u32 = 4;

/// The indexer admits this many times the requests it serves at saturation before it
/// answers 429. Above one, so that in-flight requests can rise past KEDA's target (a
/// refused request never counts as in flight: with the limit at the target, KEDA would add
/// pods only once clients were refused), and so that layer fetches waiting on a registry
/// rather than the CPU have room.
pub const ADMITTED_PER_SATURATING: u32 = 2;

/// The fewest index requests an indexer admits.
pub const MIN_ADMITTED: u32 = 4;

/// Bounds on what a tenant's CPU limit can make the operator render (a limit may be any
/// number): 256 admitted requests, 200 connections a pod.
const MAX_ADMITTED: u32 = 256;
const MAX_POOL: u32 = 200;

/// pgxpool's own floor.
const MIN_POOL: u32 = 4;

/// pgxpool's default pool when the pods have no CPU limit: `max(4, runtime.NumCPU())`,
/// the node's cores, which the operator cannot know; the connection budget assumes the floor.
pub const ASSUMED_POOL: u32 = MIN_POOL;

/// The CPU limit of pods with these settings, in millicores; `None` without one (a limit
/// of zero is none, as the kernel reads it).
pub fn cpu_limit_millis(pod: &PodOverrides) -> Option<u32> {
    millicores(&pod.resources.as_ref()?.limits.as_ref()?.get("cpu")?.0).filter(|m| *m > 0)
}

/// Millicores of a CPU quantity (`500m`, `2`, `1.5`, `250000u`, `1k`), rounded up; `None`
/// if it does not parse or exceeds four million cores.
pub fn millicores(quantity: &str) -> Option<u32> {
    let (number, cores_per_unit) = [("n", 1e-9), ("u", 1e-6), ("m", 1e-3), ("k", 1e3)]
        .iter()
        .find_map(|(suffix, scale)| quantity.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((quantity, 1.0));
    number
        .parse::<f64>()
        .ok()
        .map(|n| n * cores_per_unit)
        .filter(|c| c.is_finite() && *c >= 0.0 && *c < 4_000_000.0)
        .map(|c| (c * 1000.0 - 1e-6).ceil().max(0.0) as u32)
}

/// The requests one pod holds at saturation: what KEDA's in-flight target defaults to.
pub fn saturating_requests(cpu_millis: u32) -> u32 {
    (cpu_millis.saturating_mul(SATURATING_REQUESTS_PER_CPU))
        .div_ceil(1000)
        .clamp(1, MAX_ADMITTED / ADMITTED_PER_SATURATING)
}

/// `index_report_request_concurrency` for an indexer limited to `cpu_millis`: twice what
/// it serves at saturation, at least [`MIN_ADMITTED`] (Clair's own, GOMAXPROCS × 4, counts
/// the node's cores for a limit under one CPU).
pub fn admitted_index_requests(cpu_millis: u32) -> u32 {
    (saturating_requests(cpu_millis) * ADMITTED_PER_SATURATING).clamp(MIN_ADMITTED, MAX_ADMITTED)
}

/// `pool_max_conns` of a service's pods limited to `cpu_millis`: for the indexer, one
/// connection per admitted request and the one its lock manager holds (a floor: the study
/// found every connection of its pool of four in use at any load); for the others,
/// pgxpool's rule on the limit's whole CPUs rather than the node's. Without a limit,
/// nothing is rendered (pgxpool's default stays; see [`ASSUMED_POOL`]).
pub fn pool(service: ServiceKind, cpu_millis: Option<u32>) -> Option<u32> {
    let millis = cpu_millis?;
    let pool = match service {
        ServiceKind::Indexer => admitted_index_requests(millis) + 1,
        ServiceKind::Matcher | ServiceKind::Notifier => millis.div_ceil(1000).max(MIN_POOL),
    };
    Some(pool.min(MAX_POOL))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn cpu_quantities() {
        assert_eq!(millicores("500m"), Some(500));
        assert_eq!(millicores("2"), Some(2000));
        assert_eq!(millicores("1.5"), Some(1500));
        assert_eq!(millicores("0.25"), Some(250));
        assert_eq!(millicores("250000u"), Some(250));
        assert_eq!(millicores("500000000n"), Some(500));
        assert_eq!(millicores("1k"), Some(1_000_000));
        assert_eq!(millicores("0"), Some(0));
        assert_eq!(millicores("lots"), None);
        assert_eq!(millicores("-1"), None);
        assert_eq!(millicores("1e12"), None);
    }

    #[test]
    fn the_indexer_admits_twice_what_it_serves_at_saturation() {
        assert_eq!(saturating_requests(500), 2);
        assert_eq!(admitted_index_requests(500), 4);
        assert_eq!(saturating_requests(1000), 4);
        assert_eq!(admitted_index_requests(1000), 8);
        assert_eq!(admitted_index_requests(2000), 16);
        assert_eq!(saturating_requests(100), 1);
        assert_eq!(admitted_index_requests(100), 4);
        // The admission limit always leaves in-flight requests room above the target.
        for millis in [100, 500, 1000, 1500, 4000, 64_000] {
            assert!(
                admitted_index_requests(millis) > saturating_requests(millis),
                "{millis}"
            );
        }
        assert_eq!(pool(ServiceKind::Indexer, Some(500)), Some(5));
        assert_eq!(pool(ServiceKind::Indexer, Some(2000)), Some(17));
    }

    #[test]
    fn pools_follow_the_limit_not_the_node_and_are_bounded() {
        assert_eq!(pool(ServiceKind::Matcher, Some(500)), Some(4));
        assert_eq!(pool(ServiceKind::Matcher, Some(8000)), Some(8));
        assert_eq!(pool(ServiceKind::Notifier, None), None);
        // A tenant's limit may be any number.
        assert_eq!(admitted_index_requests(u32::MAX), MAX_ADMITTED);
        assert_eq!(pool(ServiceKind::Indexer, Some(u32::MAX)), Some(MAX_POOL));
        assert_eq!(pool(ServiceKind::Matcher, Some(u32::MAX)), Some(MAX_POOL));
    }

    /// Pod settings with a CPU limit of `cpu` and nothing else, for the builders' tests.
    pub(crate) fn cpu_limited(cpu: &str) -> PodOverrides {
        use k8s_openapi::api::core::v1::ResourceRequirements;
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        PodOverrides {
            resources: Some(ResourceRequirements {
                limits: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_zero_limit_is_no_limit() {
        let pod = cpu_limited;
        assert_eq!(cpu_limit_millis(&pod("0")), None);
        assert_eq!(cpu_limit_millis(&pod("750m")), Some(750));
        assert_eq!(cpu_limit_millis(&PodOverrides::default()), None);
    }
}
