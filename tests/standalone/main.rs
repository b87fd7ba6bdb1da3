//! The standalone tier: the same control plane as the integration tests with no operator in
//! it, so each test runs `clair-operator run` as processes of its own (scoped to namespaces,
//! as a given ServiceAccount, measured) without a cluster-wide operator doing the work for it.
//! One test at a time: two operators watching the same objects would share the work.

use clair_test_support as support;

mod fairness;
mod hostile_database;
mod leader;
mod load;
mod memory;
mod namespaces;
mod operator;
mod outage;
mod platform;
mod restart;
mod scope;
mod unreadable;
mod watches;

use std::process::ExitCode;

use clair_test_support::runner::TestFn;
use clair_test_support::{TestEnv, tests};

fn main() -> ExitCode {
    support::runner::main(
        "the standalone test control plane",
        1,
        TestEnv::start_without_operator,
        registry(),
        &[],
    )
}

fn registry() -> Vec<(&'static str, TestFn)> {
    tests![
        scope::an_operator_scoped_to_a_namespace_acts_there_only_with_its_roles,
        watches::unrelated_secrets_cost_their_metadata_only,
        unreadable::unreadable_objects_are_named_and_stop_nothing_else,
        load::kwok_nodes_stay_ready_while_the_machine_is_saturated,
        leader::a_killed_leader_hands_over_and_nothing_is_done_twice,
        restart::a_killed_operator_restarted_finishes_and_duplicates_nothing,
        // The tenant attacks, after the tests that count requests and writes cluster-wide
        // (each removes its namespaces when it ends, but hostile Clairs go slowly).
        memory::what_tenants_make_the_operator_hold_is_bounded_in_total,
        fairness::a_tenant_whose_databases_never_answer_slows_no_one_else,
        hostile_database::a_database_that_declares_gigabytes_is_cut_off_and_slows_no_one,
        hostile_database::a_string_rewritten_a_hundred_times_leaves_memory_flat,
        platform::the_platforms_lists_hold_for_keda_and_database_checks,
        namespaces::tens_of_namespaces_keep_the_lease_renewed_and_every_clair_is_served,
        // Last: it stops and starts the control plane's parts.
        outage::an_apiserver_restart_and_an_etcd_outage_are_ridden_out,
    ]
}
