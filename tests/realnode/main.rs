//! The real-node tier: the same control plane as the integration tests with one real node
//! (containerd, runc, kubelet, kube-proxy, CoreDNS) instead of kwok's fake ones, so every pod
//! the operator renders truly starts, passes its real probes and talks to the others. The
//! operator itself runs in the cluster from an image of the binary cargo built for the tests,
//! installed with `kubectl apply --server-side -k deploy/base` as the README says; PostgreSQL
//! listens where pods reach it.

use clair_test_support as support;

mod autoscaling;
mod cloudnative_pg;
mod fixtures;
mod forged;
mod managed;
mod private_ca;
mod quay;
mod rotation;
mod routing;
mod scan;
mod study;
mod traces;
mod upgrade;

use std::process::ExitCode;

use clair_test_support::runner::TestFn;
use clair_test_support::{TestEnv, tests};
use clair_testenv::{RealNodeImages, clair_binaries};

fn main() -> ExitCode {
    // `--load-study [FOLDER]`: the load study (`scripts/bench load`), not the tests.
    if let Some(request) = study::requested() {
        return study::run(&request);
    }
    // Each test runs real containers on two cores: a few at a time.
    support::runner::main("the real-node test cluster", 2, start, registry(), &[])
}

/// The control plane with a real node holding Clair's image at the pinned version, and the
/// same binaries tagged as an older version for the upgrade test (the module proxy serves
/// no older Clair here).
pub(crate) fn start() -> anyhow::Result<TestEnv> {
    let pinned = clair_binaries()?;
    TestEnv::start_real_node(RealNodeImages {
        clair: vec![
            (pinned.clone(), "4.9.0".to_string()),
            (pinned, "4.8.0".to_string()),
        ],
        operator: Some(operator_binary()),
    })
}

/// The operator's binary cargo built for these tests (its debug build: the tests check what
/// the operator does, not its speed or size; `tools/images/build.sh` strips it for the image).
fn operator_binary() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_clair-operator"))
}

fn registry() -> Vec<(&'static str, TestFn)> {
    tests![
        scan::a_clair_on_a_real_node_finds_a_known_vulnerability,
        autoscaling::a_cpu_autoscaler_scales_the_indexer_on_what_metrics_server_reads,
        autoscaling::keda_scales_the_indexer_on_its_in_flight_requests_and_back_in,
        autoscaling::switching_engines_leaves_exactly_one_autoscaler,
        cloudnative_pg::a_clair_on_cloudnative_pg_fails_over_and_serves_what_it_indexed,
        forged::forged_reviews_from_a_pod_and_the_host_get_nothing,
        managed::a_managed_database_initialises_and_keeps_its_data_across_a_pod_restart,
        private_ca::a_database_behind_a_private_ca_is_trusted_through_the_ca_bundle,
        rotation::a_rotated_ca_is_trusted_until_every_replica_serves_the_new_one,
        rotation::replicas_are_asked_which_ca_they_serve,
        routing::the_ingress_stand_in_keeps_each_ingresss_timeout,
        routing::the_operators_http_route_reaches_each_service_through_a_gateway,
        traces::a_clairs_spans_and_the_operators_reach_the_collector,
        upgrade::an_upgrade_runs_clairctl_admin_in_real_jobs_and_the_scan_still_answers,
    ]
}
