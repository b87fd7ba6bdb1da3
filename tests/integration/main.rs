//! Integration tests against a real control plane: one test binary (to keep link time down)
//! with a module per area. `main` starts the control plane once, runs every test in its own
//! namespace, and stops the control plane whether the tests passed or not.

mod clair;
mod clairconfig;
mod crds;
mod faults;
mod forged;
mod hardening;
mod helm;
mod leaks;
mod metrics;
mod olm;
mod quay;
mod rbac;
mod render;
mod services;
mod webhook;

use clair_test_support as support;

use std::process::ExitCode;

use clair_test_support::runner::TestFn;
use clair_test_support::{TestEnv, tests};

fn main() -> ExitCode {
    // The tests mostly wait on the cluster: run more of them at once than there are cores.
    support::runner::main(
        "the test control plane",
        8,
        TestEnv::start,
        registry(),
        &[
            ("rbac::every_grant_is_used", rbac::every_grant_is_used),
            (
                "leaks::no_secret_value_appears_anywhere",
                leaks::no_secret_value_appears_anywhere,
            ),
        ],
    )
}

fn registry() -> Vec<(&'static str, TestFn)> {
    tests![
        clair::a_clair_with_an_external_database_owns_its_services_and_routing,
        clair::a_clair_on_cloudnative_pg_waits_where_it_is_not_served,
        clair::database_failures_are_told_apart_and_nothing_rolls,
        clair::a_managed_database_keeps_its_claims_when_the_clair_is_deleted,
        clair::the_rendered_configs_run_real_clair_services_and_updaters,
        clair::an_image_upgrade_runs_clairctl_admin_pre_and_post_around_the_roll,
        clair::a_resource_or_namespace_being_deleted_gets_nothing_applied,
        clair::someone_elses_indexer_of_a_clairs_name_is_not_taken_over,
        forged::a_webhook_that_trusts_the_apiserver_alone_answers_no_one_else,
        forged::a_webhook_open_to_anyone_answers_from_the_request_alone,
        forged::a_forged_flood_is_refused_before_any_access_review,
        forged::the_webhook_answers_the_apiserver_while_slow_clients_hold_connections,
        hardening::config_bombs_are_refused_and_the_operator_keeps_serving,
        hardening::no_malformed_connection_string_leaks_its_password,
        hardening::a_resource_may_not_name_a_secret_its_writer_cannot_read,
        hardening::images_outside_the_allow_list_are_refused,
        hardening::names_that_would_forge_metrics_are_refused,
        hardening::a_keda_address_cannot_carry_a_query,
        hardening::names_that_cannot_be_derived_are_refused_and_nothing_is_adopted,
        hardening::a_template_the_webhook_never_saw_is_not_rendered,
        hardening::a_managed_database_can_be_closed_to_all_but_its_clair,
        hardening::a_clairs_services_can_be_closed_to_all_but_whom_it_names,
        faults::a_lost_database_degrades_and_recovers_without_a_rollout,
        helm::the_chart_renders_what_kustomize_does_and_the_apiserver_takes_it,
        helm::the_charts_options_render_what_they_promise,
        olm::the_bundle_passes_operator_frameworks_validators,
        olm::the_bundles_deployment_and_roles_are_taken_by_the_apiserver,
        olm::the_operator_serves_olms_certificate_and_leaves_the_configurations_to_olm,
        metrics::metrics_match_the_cluster_and_pass_promtool,
        metrics::metrics_are_served_only_to_scrapers_the_apiserver_authorizes,
        metrics::alerts_hold_to_promtool_and_the_runbooks,
        render::render_makes_what_a_reconcile_applies,
        quay::a_clair_with_quay_delivers_to_it_and_tells_quay_its_side,
        quay::quay_without_one_base_url_is_refused_by_the_schema,
        quay::the_notifiers_undelivered_notifications_are_counted_from_its_receipts,
        clairconfig::the_validator_agrees_with_clair_on_the_corpus,
        clairconfig::check_config_reports_fields_and_exits_by_verdict,
        crds::crds_are_established,
        crds::deployments_become_available_on_kwok_nodes,
        crds::valid_resources_are_accepted,
        crds::invalid_resources_are_rejected_with_the_field_named,
        crds::kubectl_explain_shows_descriptions,
        crds::kubectl_scale_changes_spec_replicas,
        crds::printer_columns_show_phase_and_readiness,
        services::services_reach_available_with_their_pods_ready,
        services::a_config_change_rolls_and_an_invalid_one_does_not,
        services::scaling_by_kubectl_and_by_the_autoscaler_pass_through_scaling,
        services::failing_pods_degrade_and_recovery_restores_available,
        services::drift_is_reverted_and_deletion_removes_everything,
        services::a_second_writer_is_fought_with_a_growing_wait_and_loses,
        services::twenty_available_resources_make_no_writes_when_idle,
        services::reconciles_judge_the_deployment_from_the_watch,
        services::a_service_monitor_appears_once_the_cluster_serves_them,
        services::tracing_renders_the_trace_section_once_its_headers_secret_is_good,
        webhook::invalid_labelled_configs_are_refused_and_valid_ones_warn,
        webhook::a_rotated_certificate_keeps_the_webhook_answering,
        webhook::a_settled_webhook_watches_rather_than_polls,
        webhook::templating_resolves_references_the_author_may_read,
        webhook::resources_get_warnings_for_what_the_schema_cannot_check,
        webhook::a_mounted_certificate_is_served_and_reloaded,
    ]
}
