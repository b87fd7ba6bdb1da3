//! The machines checked exhaustively (every phase against every class of observation) and by
//! property tests over random sequences of observations.

use std::collections::HashSet;
use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

use super::clair::{
    self, ChildObservation, ClairClass, ClairSnapshot, RoutingObservation, UpgradeObservation,
};
use super::observation::{ConfigObservation, DatabaseObservation};
use super::service::{self, Replicas, Rollout, ServiceClass, ServiceSnapshot, Workload};
use super::table::{ObservationClass, next, transitions};
use super::{ApplyPlan, Decision, Reason};
use crate::api::Phase;
use crate::api::ServiceKind;
use crate::database::budget::Budget;
use strum::VariantArray;

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(1_800_000_000 + second).expect("valid timestamp"))
}

fn valid() -> ConfigObservation {
    ConfigObservation::Valid {
        hash: "c0ffee".into(),
    }
}

fn present(rollout: Rollout, spec: i32, current: i32, ready: i32) -> Workload {
    Workload::Present {
        rollout,
        replicas: Replicas {
            spec,
            autoscaler: None,
            current,
            ready,
            min_available: 1,
            previous_ready: current,
        },
    }
}

fn service_snapshot(
    config: ConfigObservation,
    database: DatabaseObservation,
    workload: Workload,
) -> ServiceSnapshot {
    ServiceSnapshot {
        generation: 3,
        kind: ServiceKind::Indexer,
        config,
        database,
        workload,
    }
}

/// A snapshot of each class of the service machine.
fn service_example(class: ServiceClass) -> ServiceSnapshot {
    let reachable = DatabaseObservation::Reachable;
    match class {
        ServiceClass::ConfigMissing => service_snapshot(
            ConfigObservation::Missing {
                what: "ConfigMap clair-config".into(),
            },
            reachable,
            Workload::Absent,
        ),
        ServiceClass::ConfigInvalid => service_snapshot(
            ConfigObservation::Invalid {
                message: "matcher.indexer_addr: required".into(),
            },
            reachable,
            present(Rollout::Complete, 2, 2, 2),
        ),
        ServiceClass::DatabaseUnreachable => service_snapshot(
            valid(),
            DatabaseObservation::Unreachable {
                reason: Reason::DatabaseUnreachable,
                message: "connection refused".into(),
            },
            Workload::Absent,
        ),
        ServiceClass::WorkloadAbsent => service_snapshot(valid(), reachable, Workload::Absent),
        ServiceClass::RolloutFailed => service_snapshot(
            valid(),
            reachable,
            present(
                Rollout::DeadlineExceeded {
                    message: "ReplicaSet has timed out progressing".into(),
                },
                2,
                2,
                0,
            ),
        ),
        ServiceClass::RolloutProgressing => {
            service_snapshot(valid(), reachable, present(Rollout::Progressing, 2, 3, 1))
        }
        ServiceClass::BelowMinimum => {
            service_snapshot(valid(), reachable, present(Rollout::Complete, 2, 2, 0))
        }
        ServiceClass::ShortOfMinimum => service_snapshot(
            valid(),
            reachable,
            Workload::Present {
                rollout: Rollout::Complete,
                replicas: Replicas {
                    spec: 3,
                    autoscaler: None,
                    current: 3,
                    ready: 0,
                    min_available: 2,
                    previous_ready: 0,
                },
            },
        ),
        ServiceClass::ReplicasMoving => {
            service_snapshot(valid(), reachable, present(Rollout::Complete, 4, 2, 2))
        }
        ServiceClass::Settled => {
            service_snapshot(valid(), reachable, present(Rollout::Complete, 2, 2, 2))
        }
    }
}

fn child(phase: Phase) -> ChildObservation {
    ChildObservation::Present {
        name: format!("clair-{}", phase.as_str().to_lowercase()),
        phase: Some(phase),
    }
}

/// A snapshot of each class of the Clair machine.
fn clair_example(class: ClairClass) -> ClairSnapshot {
    let available = || {
        [
            child(Phase::Available),
            child(Phase::Available),
            ChildObservation::Disabled,
        ]
    };
    let snapshot = |config, database, children| ClairSnapshot {
        generation: 7,
        config,
        database,
        children,
        connections: Budget::Fits {
            message: "db: 12 of 197".into(),
        },
        routing: RoutingObservation::Disabled,
        upgrade: UpgradeObservation::None,
        updaters: crate::machine::updaters::UpdatersObservation::InMatcher,
        deliveries: crate::machine::notifications::DeliveriesObservation::Off,
    };
    let reachable = DatabaseObservation::Reachable;
    let upgrading = |upgrade: UpgradeObservation, children| ClairSnapshot {
        upgrade,
        ..snapshot(valid(), DatabaseObservation::Reachable, children)
    };
    let (from, to, job) = (
        "v4.8.0".to_string(),
        "v4.9.0".to_string(),
        "clair-pre".to_string(),
    );
    match class {
        ClairClass::UpgradeFailed => {
            upgrading(UpgradeObservation::Failed { from, to, job }, available())
        }
        ClairClass::UpgradePreparing => {
            upgrading(UpgradeObservation::Preparing { from, to, job }, available())
        }
        ClairClass::UpgradeRolling => upgrading(
            UpgradeObservation::Rolling { from, to },
            [
                child(Phase::Deploying),
                child(Phase::Available),
                ChildObservation::Disabled,
            ],
        ),
        ClairClass::UpgradeFinishing => {
            upgrading(UpgradeObservation::Finishing { from, to, job }, available())
        }
        ClairClass::ConfigMissing => snapshot(
            ConfigObservation::Missing {
                what: "Secret extra-config".into(),
            },
            reachable,
            available(),
        ),
        ClairClass::ConfigInvalid => snapshot(
            ConfigObservation::Invalid {
                message: "notifier.webhook.target: not a URL".into(),
            },
            reachable,
            available(),
        ),
        ClairClass::DatabaseUnreachable => snapshot(
            valid(),
            DatabaseObservation::Unreachable {
                reason: Reason::DatabaseAuthFailed,
                message: "matcher: password authentication failed".into(),
            },
            available(),
        ),
        ClairClass::ServicesAbsent => snapshot(
            valid(),
            reachable,
            [
                ChildObservation::Absent,
                child(Phase::Available),
                child(Phase::Available),
            ],
        ),
        ClairClass::ServiceDegraded => snapshot(
            valid(),
            reachable,
            [
                child(Phase::Available),
                child(Phase::Degraded),
                child(Phase::Deploying),
            ],
        ),
        ClairClass::ServicesDeploying => snapshot(
            valid(),
            reachable,
            [
                child(Phase::Deploying),
                child(Phase::Available),
                child(Phase::Scaling),
            ],
        ),
        ClairClass::ServicesScaling => snapshot(
            valid(),
            reachable,
            [
                child(Phase::Available),
                child(Phase::Scaling),
                ChildObservation::Disabled,
            ],
        ),
        ClairClass::AllAvailable => snapshot(valid(), reachable, available()),
    }
}

fn table_is_complete<C: ObservationClass + std::hash::Hash>() {
    let rows: Vec<C> = C::TABLE.iter().map(|(c, _)| *c).collect();
    let unique: HashSet<C> = rows.iter().copied().collect();
    assert_eq!(rows.len(), unique.len(), "a class has two rows");
    assert_eq!(
        unique,
        C::VARIANTS.iter().copied().collect(),
        "every class has exactly one row"
    );
    assert_eq!(
        transitions::<C>().len(),
        C::PHASES.len() * C::VARIANTS.len()
    );
    for (class, targets) in C::TABLE {
        assert_eq!(
            targets.len(),
            C::PHASES.len(),
            "{class:?}: one target per phase"
        );
        assert!(
            targets.iter().all(|t| C::PHASES.contains(t)),
            "{class:?} leads out of the family's phases"
        );
    }
}

#[test]
fn every_class_has_one_row_in_each_table() {
    table_is_complete::<ServiceClass>();
    table_is_complete::<ClairClass>();
}

#[test]
fn a_repeated_observation_changes_the_phase_at_most_once() {
    fn check<C: ObservationClass>() {
        for (from, class, to) in transitions::<C>() {
            assert_eq!(
                next(to, class),
                to,
                "{from} on {class:?} goes to {to}, which does not hold"
            );
        }
    }
    check::<ServiceClass>();
    check::<ClairClass>();
}

/// Every (phase, class) pair through the whole decision: classification, machine, plan and
/// conditions.
#[test]
fn every_phase_and_class_of_a_service_decides_as_the_table_says() {
    for class in ServiceClass::VARIANTS {
        let snapshot = service_example(*class);
        assert_eq!(service::classify(&snapshot), *class, "example of {class:?}");
        for from in ServiceClass::PHASES.iter().copied() {
            let decision = service::decide(Some(from), &[], &snapshot, &at(0));
            let to = next(from, *class);
            assert_eq!(decision.phase, to, "{from} on {class:?}");
            assert_eq!(decision.transition, (from != to).then_some((from, to)));
            assert_eq!(decision.event.is_some(), from != to);
            assert_consistent(&decision, &snapshot.config, &snapshot.database);
            let keeps = matches!(
                class,
                ServiceClass::ConfigMissing
                    | ServiceClass::ConfigInvalid
                    | ServiceClass::DatabaseUnreachable
            );
            let expected = match (keeps, to) {
                (false, _) => ApplyPlan::Everything,
                (true, Phase::Degraded) => ApplyPlan::KeepWorkload,
                (true, _) => ApplyPlan::Nothing,
            };
            assert_eq!(decision.apply, expected, "{from} on {class:?}");
        }
    }
}

#[test]
fn every_phase_and_class_of_a_clair_decides_as_the_table_says() {
    for class in ClairClass::VARIANTS {
        let snapshot = clair_example(*class);
        assert_eq!(clair::classify(&snapshot), *class, "example of {class:?}");
        for from in ClairClass::PHASES.iter().copied() {
            let decision = clair::decide(Some(from), &[], &snapshot, &at(0));
            assert_eq!(decision.phase, next(from, *class), "{from} on {class:?}");
            assert_consistent(&decision, &snapshot.config, &snapshot.database);
            assert_eq!(
                decision.conditions.len(),
                13,
                "six conditions, one per service, ConnectionsFit, RoutingReady, Upgrading and \
                 UpdatersReady"
            );
        }
    }
}

#[test]
fn a_clair_names_the_service_that_holds_it_back() {
    let decision = clair::decide(
        Some(Phase::Available),
        &[],
        &clair_example(ClairClass::ServiceDegraded),
        &at(0),
    );
    let ready = condition(&decision, "Ready");
    assert_eq!(ready.status, "False");
    assert!(
        ready.message.contains("matcher clair-degraded is Degraded"),
        "{}",
        ready.message
    );
    assert_eq!(condition(&decision, "IndexerReady").status, "True");
    assert_eq!(
        condition(&decision, "MatcherReady").reason,
        "ServiceDegraded"
    );
    assert_eq!(condition(&decision, "NotifierReady").status, "False");
    let event = decision.event.expect("a transition emits an event");
    assert!(event.warning);
    assert_eq!(event.reason, Reason::ServiceDegraded);
    assert!(
        event.note.starts_with("Available → Degraded: "),
        "{}",
        event.note
    );
}

#[test]
fn an_invalid_config_on_a_running_service_keeps_it_running_and_says_why() {
    let snapshot = service_example(ServiceClass::ConfigInvalid);
    let decision = service::decide(Some(Phase::Available), &[], &snapshot, &at(0));
    assert_eq!(decision.phase, Phase::Degraded);
    assert_eq!(decision.apply, ApplyPlan::KeepWorkload);
    let config = condition(&decision, "ConfigValid");
    assert_eq!(
        (config.status.as_str(), config.reason.as_str()),
        ("False", "ConfigInvalid")
    );
    assert!(
        config.message.contains("matcher.indexer_addr: required"),
        "{}",
        config.message
    );
    assert!(
        config
            .message
            .contains("docs/runbooks/Pending.md#configinvalid"),
        "{}",
        config.message
    );
    // The same problem before anything ran holds the service in Pending and applies nothing.
    let fresh = service::decide(None, &[], &snapshot, &at(0));
    assert_eq!(
        (fresh.phase, fresh.apply),
        (Phase::Pending, ApplyPlan::Nothing)
    );
}

fn condition<'a>(decision: &'a Decision, type_: &str) -> &'a Condition {
    decision
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

fn status(decision: &Decision, type_: &str) -> String {
    condition(decision, type_).status.clone()
}

/// What must hold of every decision, whatever led to it.
fn assert_consistent(
    decision: &Decision,
    config: &ConfigObservation,
    database: &DatabaseObservation,
) {
    let phase = decision.phase;
    // A resource that is not ready says why and points at the runbook of the phase it is
    // in, without repeating the phase's name.
    let ready = decision
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition");
    if ready.status == "False" && phase != Phase::Degraded {
        assert!(
            ready
                .message
                .contains(&format!("docs/runbooks/{phase}.md#")),
            "{phase}: Ready links another phase's runbook: {}",
            ready.message
        );
        assert!(
            !ready.message.contains(&format!("is {phase}: ")),
            "{phase}: Ready repeats the phase before saying why: {}",
            ready.message
        );
    }
    if phase == Phase::Available {
        assert!(
            matches!(config, ConfigObservation::Valid { .. }),
            "Available with config {config:?}"
        );
        assert!(
            !matches!(database, DatabaseObservation::Unreachable { .. }),
            "Available with database {database:?}"
        );
        assert_eq!(status(decision, "ConfigValid"), "True");
    }
    // Serving: steady, scaling, or upgrading (the old version serves until each pod rolls).
    assert_eq!(
        status(decision, "Ready") == "True",
        matches!(phase, Phase::Available | Phase::Scaling | Phase::Upgrading),
        "Ready in {phase}"
    );
    assert_eq!(
        status(decision, "Degraded") == "True",
        phase == Phase::Degraded,
        "Degraded in {phase}"
    );
    // A rollout may be under way while a config or database problem holds the phase, but
    // never while the resource claims to be settled.
    if status(decision, "Progressing") == "True" {
        assert!(
            !matches!(
                phase,
                Phase::Available | Phase::Scaling | Phase::DatabaseReady
            ),
            "Progressing in {phase}"
        );
    }
    assert_eq!(
        status(decision, "Scaling") == "True",
        phase == Phase::Scaling,
        "Scaling in {phase}"
    );
    let types: HashSet<&str> = decision
        .conditions
        .iter()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(
        types.len(),
        decision.conditions.len(),
        "a condition type appears twice"
    );
    for c in &decision.conditions {
        assert!(
            Reason::VARIANTS.iter().any(|r| r.as_str() == c.reason),
            "unknown reason {}",
            c.reason
        );
        assert!(
            c.reason
                .chars()
                .next()
                .is_some_and(|ch| ch.is_ascii_uppercase())
                && c.reason.chars().all(|ch| ch.is_ascii_alphanumeric()),
            "reason {} is not CamelCase",
            c.reason
        );
        assert!(
            c.message.contains("docs/runbooks/"),
            "{} message names no runbook: {}",
            c.type_,
            c.message
        );
        assert!(
            c.observed_generation.is_some(),
            "{} lacks observedGeneration",
            c.type_
        );
        assert!(["True", "False", "Unknown"].contains(&c.status.as_str()));
    }
}

fn config_strategy() -> impl Strategy<Value = ConfigObservation> {
    prop_oneof![
        Just(ConfigObservation::Missing {
            what: "ConfigMap c".into()
        }),
        Just(ConfigObservation::Invalid {
            message: "log_level: unknown".into()
        }),
        "[a-f0-9]{2}".prop_map(|hash| ConfigObservation::Valid { hash }),
    ]
}

fn database_strategy() -> impl Strategy<Value = DatabaseObservation> {
    prop_oneof![
        Just(DatabaseObservation::Reachable),
        Just(DatabaseObservation::Unreachable {
            reason: Reason::DatabaseUnreachable,
            message: "timeout".into()
        }),
        Just(DatabaseObservation::NotChecked {
            message: "no credentials to try".into()
        }),
    ]
}

fn workload_strategy() -> impl Strategy<Value = Workload> {
    let rollout = prop_oneof![
        Just(Rollout::Progressing),
        Just(Rollout::Complete),
        Just(Rollout::DeadlineExceeded {
            message: "stalled".into()
        }),
    ];
    let replicas = (
        0..5i32,
        proptest::option::of(0..6i32),
        0..6i32,
        0..6i32,
        0..3i32,
        0..6i32,
    )
        .prop_map(
            |(spec, autoscaler, current, ready, min_available, previous_ready)| Replicas {
                spec,
                autoscaler,
                current,
                ready: ready.min(current),
                min_available,
                previous_ready,
            },
        );
    prop_oneof![
        1 => Just(Workload::Absent),
        4 => (rollout, replicas).prop_map(|(rollout, replicas)| Workload::Present { rollout, replicas }),
    ]
}

fn service_snapshot_strategy() -> impl Strategy<Value = ServiceSnapshot> {
    (
        1..4i64,
        config_strategy(),
        database_strategy(),
        workload_strategy(),
    )
        .prop_map(|(generation, config, database, workload)| ServiceSnapshot {
            generation,
            kind: ServiceKind::Matcher,
            config,
            database,
            workload,
        })
}

fn clair_snapshot_strategy() -> impl Strategy<Value = ClairSnapshot> {
    let child = prop_oneof![
        Just(ChildObservation::Disabled),
        Just(ChildObservation::Absent),
        (proptest::option::of(proptest::sample::select(ServiceClass::PHASES.to_vec()))).prop_map(
            |phase| {
                ChildObservation::Present {
                    name: "child".into(),
                    phase,
                }
            }
        ),
    ];
    let upgrade = prop_oneof![
        Just(UpgradeObservation::None),
        Just(UpgradeObservation::Preparing {
            from: "v4.8.0".into(),
            to: "v4.9.0".into(),
            job: "pre".into()
        }),
        Just(UpgradeObservation::Rolling {
            from: "v4.8.0".into(),
            to: "v4.9.0".into()
        }),
        Just(UpgradeObservation::Finishing {
            from: "v4.8.0".into(),
            to: "v4.9.0".into(),
            job: "post".into()
        }),
        Just(UpgradeObservation::Failed {
            from: "v4.8.0".into(),
            to: "v4.9.0".into(),
            job: "pre".into()
        }),
    ];
    (
        1..4i64,
        config_strategy(),
        database_strategy(),
        [child.clone(), child.clone(), child],
        upgrade,
    )
        .prop_map(
            |(generation, config, database, children, upgrade)| ClairSnapshot {
                generation,
                config,
                database,
                children,
                connections: Budget::Unknown {
                    message: "db: not known yet".into(),
                },
                routing: RoutingObservation::Unsupported {
                    message: "no Route API".into(),
                },
                upgrade,
                updaters: crate::machine::updaters::UpdatersObservation::InMatcher,
                deliveries: crate::machine::notifications::DeliveriesObservation::Off,
            },
        )
}

/// `lastTransitionTime` moves exactly when a condition's status changes.
fn assert_transition_times(previous: &[Condition], decision: &Decision, now: &Time) {
    for c in &decision.conditions {
        match previous.iter().find(|p| p.type_ == c.type_) {
            Some(p) if p.status == c.status => assert_eq!(
                c.last_transition_time, p.last_transition_time,
                "{} kept its status but its time moved",
                c.type_
            ),
            _ => assert_eq!(
                &c.last_transition_time, now,
                "{} changed status but kept its time",
                c.type_
            ),
        }
    }
}

proptest! {
    #[test]
    fn random_service_histories_keep_every_invariant(snapshots in proptest::collection::vec(service_snapshot_strategy(), 1..25)) {
        let (mut phase, mut conditions) = (None, Vec::new());
        for (i, snapshot) in snapshots.iter().enumerate() {
            let now = at(i as i64 + 1);
            let decision = service::decide(phase, &conditions, snapshot, &now);
            // Level-based: a fresh process with the same status and snapshot decides the same.
            prop_assert_eq!(&service::decide(phase, &conditions, snapshot, &now), &decision);
            prop_assert!(Phase::VARIANTS.contains(&decision.phase));
            assert_consistent(&decision, &snapshot.config, &snapshot.database);
            assert_transition_times(&conditions, &decision, &now);
            for c in &decision.conditions {
                prop_assert_eq!(c.observed_generation, Some(snapshot.generation));
            }
            phase = Some(decision.phase);
            conditions = decision.conditions;
        }
    }

    #[test]
    fn random_clair_histories_keep_every_invariant(snapshots in proptest::collection::vec(clair_snapshot_strategy(), 1..25)) {
        let (mut phase, mut conditions) = (None, Vec::new());
        for (i, snapshot) in snapshots.iter().enumerate() {
            let now = at(i as i64 + 1);
            let decision = clair::decide(phase, &conditions, snapshot, &now);
            prop_assert_eq!(&clair::decide(phase, &conditions, snapshot, &now), &decision);
            assert_consistent(&decision, &snapshot.config, &snapshot.database);
            assert_transition_times(&conditions, &decision, &now);
            if decision.phase == Phase::Available {
                // No service may be missing, degraded or on its way.
                for child in &snapshot.children {
                    let ok = matches!(child, ChildObservation::Disabled | ChildObservation::Present { phase: Some(Phase::Available), .. });
                    prop_assert!(ok, "Available with child {:?}", child);
                }
            }
            phase = Some(decision.phase);
            conditions = decision.conditions;
        }
    }
}

#[test]
fn every_phase_and_every_reason_has_its_runbook_entry() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/runbooks");
    let mut missing = Vec::new();
    for phase in Phase::VARIANTS {
        let path = dir.join(format!("{phase}.md"));
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for heading in ["## What it means", "## Confirm it", "## What to do"] {
                    if !text.contains(heading) {
                        missing.push(format!("{}: no '{heading}' section", path.display()));
                    }
                }
            }
            Err(_) => missing.push(format!("{} does not exist", path.display())),
        }
    }
    for reason in Reason::VARIANTS {
        let page = dir.join(format!("{}.md", reason.runbook()));
        let text = std::fs::read_to_string(&page).unwrap_or_default();
        if !text.contains(&format!("\n### {reason}\n")) {
            missing.push(format!("{}: no '### {reason}' entry", page.display()));
        }
    }
    assert!(
        missing.is_empty(),
        "runbooks incomplete:\n{}",
        missing.join("\n")
    );
}

#[test]
fn reasons_are_camel_case_and_named_once_each() {
    // By their names, as conditions and Events carry them: a renamed variant
    // (`#[strum(serialize = ...)]`) that takes another's name fails here.
    let names: HashSet<&str> = Reason::VARIANTS.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names.len(),
        Reason::VARIANTS.len(),
        "two reasons share a name"
    );
    for name in names {
        assert!(
            name.starts_with(|c: char| c.is_ascii_uppercase())
                && name.chars().all(|c| c.is_ascii_alphanumeric()),
            "{name:?} is not CamelCase"
        );
    }
}

fn clair_actions(
    from: Phase,
    class: ClairClass,
    upgrade: &super::upgrade::Upgrade,
) -> clair::ClairActions {
    let snapshot = ClairSnapshot {
        upgrade: upgrade.observation.clone(),
        ..clair_example(class)
    };
    let decision = clair::decide(Some(from), &[], &snapshot, &at(0));
    clair::actions(&decision, &snapshot, upgrade)
}

fn no_upgrade() -> super::upgrade::Upgrade {
    super::upgrade::Upgrade {
        observation: UpgradeObservation::None,
        start: None,
        completed: false,
    }
}

#[test]
fn a_notifier_switched_off_is_removed_unless_nothing_may_be_written() {
    use clair::ChildAction;
    // clair_example's children have the notifier disabled.
    let healthy = clair_actions(Phase::Available, ClairClass::AllAvailable, &no_upgrade());
    assert_eq!(healthy.notifier, ChildAction::Remove);
    assert_eq!(healthy.indexer, ChildAction::Apply);
    // A running Clair whose config broke: its services are left, the switch-off honoured.
    let degraded = clair_actions(Phase::Available, ClairClass::ConfigInvalid, &no_upgrade());
    assert_eq!(degraded.indexer, ChildAction::Leave);
    assert_eq!(degraded.notifier, ChildAction::Remove);
    // Nothing ever ran: nothing is written, not even a deletion.
    let pending = clair_actions(Phase::Pending, ClairClass::ConfigInvalid, &no_upgrade());
    assert_eq!(pending.notifier, ChildAction::Leave);
    assert!(!pending.routing && !pending.roll);
}

#[test]
fn the_reported_version_moves_when_the_services_roll_or_an_upgrade_completes() {
    use clair::ReportedVersion;
    let rolled = clair_actions(Phase::Available, ClairClass::AllAvailable, &no_upgrade());
    assert_eq!(rolled.version, ReportedVersion::Desired);
    let held = clair_actions(Phase::Available, ClairClass::ConfigInvalid, &no_upgrade());
    assert_eq!(held.version, ReportedVersion::Running);
    let rolling = super::upgrade::Upgrade {
        observation: UpgradeObservation::Rolling {
            from: "v4.8.0".into(),
            to: "v4.9.0".into(),
        },
        start: None,
        completed: false,
    };
    let during = clair_actions(Phase::Upgrading, ClairClass::UpgradeRolling, &rolling);
    assert_eq!(during.version, ReportedVersion::Running);
    let completed = super::upgrade::Upgrade {
        completed: true,
        ..no_upgrade()
    };
    let done = clair_actions(Phase::Upgrading, ClairClass::AllAvailable, &completed);
    assert_eq!(done.version, ReportedVersion::Desired);
    assert_eq!(done.upgrade, clair::UpgradeAction::CleanUp);
}

#[test]
fn an_upgrade_step_starts_only_in_the_upgrading_phase() {
    use crate::api::clair::UpgradeStep;
    let preparing = super::upgrade::Upgrade {
        observation: UpgradeObservation::Preparing {
            from: "v4.8.0".into(),
            to: "v4.9.0".into(),
            job: "clair-upgrade-pre-v4-9-0".into(),
        },
        start: Some(UpgradeStep::Pre),
        completed: false,
    };
    let started = clair_actions(Phase::Available, ClairClass::UpgradePreparing, &preparing);
    assert_eq!(
        started.upgrade,
        clair::UpgradeAction::Start {
            step: UpgradeStep::Pre,
            version: "v4.9.0".into()
        }
    );
    // The pre step holds the services at the version they run.
    assert_eq!(started.indexer, clair::ChildAction::Leave);
    // A config problem outranks the upgrade: the phase is Degraded, no step starts.
    let snapshot = ClairSnapshot {
        upgrade: preparing.observation.clone(),
        ..clair_example(ClairClass::ConfigInvalid)
    };
    let decision = clair::decide(Some(Phase::Available), &[], &snapshot, &at(0));
    assert_eq!(decision.phase, Phase::Degraded);
    assert_eq!(
        clair::actions(&decision, &snapshot, &preparing).upgrade,
        clair::UpgradeAction::None
    );
}
