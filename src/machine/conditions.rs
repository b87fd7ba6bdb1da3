//! Condition types and reasons, and building a full condition set that keeps
//! `lastTransitionTime` when a condition's status does not change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::Phase;

/// The condition types of every kind; `Clair` adds one per service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::Display, strum::IntoStaticStr)]
pub enum ConditionType {
    Ready,
    ConfigValid,
    DatabaseReady,
    Progressing,
    Scaling,
    Degraded,
    IndexerReady,
    MatcherReady,
    NotifierReady,
    ConnectionsFit,
    RoutingReady,
    Upgrading,
    UpdatersReady,
    /// Whether the notifier's notifications reach their receiver (none without a notifier).
    NotificationsDelivered,
    /// Present only while another writer fights the operator over an owned object.
    Contested,
}

impl ConditionType {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Every reason a condition or an Event can carry. CamelCase, never empty; each has an
/// entry in the runbook of [`Reason::runbook`] (a test holds the runbooks to this list).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    strum::Display,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
pub enum Reason {
    // ConfigValid
    ConfigAccepted,
    ConfigMissing,
    ConfigInvalid,
    // DatabaseReady
    DatabaseReachable,
    DatabaseUnreachable,
    DatabaseNotChecked,
    DatabaseAuthFailed,
    DatabaseMissing,
    DatabaseMisconfigured,
    DatabaseRejected,
    DatabaseNotReady,
    // ConnectionsFit (Clair)
    ConnectionsWithinLimit,
    ConnectionsExceedLimit,
    ConnectionsUnknown,
    // RoutingReady (Clair)
    RoutingApplied,
    RoutingDisabled,
    RoutingUnsupported,
    // Upgrading (Clair)
    NoUpgrade,
    UpgradePreparing,
    UpgradeRolling,
    UpgradeFinishing,
    UpgradeFailed,
    // Progressing
    RolloutInProgress,
    RolloutComplete,
    ProgressDeadlineExceeded,
    NotDeployed,
    // Scaling
    ReplicasChanging,
    ReplicasStable,
    // Degraded
    AsExpected,
    BelowMinimumAvailable,
    WorkloadMissing,
    ServiceDegraded,
    // Ready
    AllReplicasReady,
    Waiting,
    ServicesAvailable,
    ServiceMissing,
    ServiceNotReady,
    ServiceDisabled,
    UpdatersInMatcher,
    UpdatersNotRunYet,
    UpdaterFailed,
    VulnerabilityDataStale,
    UpdatersSucceeded,
    // NotificationsDelivered (Clair)
    DeliveriesSucceeding,
    DeliveriesFailing,
    DeliveriesNotChecked,
    // An Event only: a resource the operator cannot decode.
    SpecUnreadable,
    // Contested: another writer keeps changing a field the operator owns.
    FieldContested,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The runbook page that explains this reason: the phase it leads to or holds in.
    pub fn runbook(self) -> Phase {
        match self {
            Reason::ConfigMissing | Reason::ConfigInvalid => Phase::Pending,
            Reason::ConfigAccepted
            | Reason::DatabaseUnreachable
            | Reason::DatabaseNotChecked
            | Reason::DatabaseAuthFailed
            | Reason::DatabaseMissing
            | Reason::DatabaseMisconfigured
            | Reason::DatabaseRejected
            | Reason::DatabaseNotReady => Phase::ConfigValid,
            Reason::DatabaseReachable | Reason::NotDeployed => Phase::DatabaseReady,
            Reason::RolloutInProgress | Reason::Waiting | Reason::ServiceMissing => {
                Phase::Deploying
            }
            Reason::RolloutComplete
            | Reason::AllReplicasReady
            | Reason::ServicesAvailable
            | Reason::AsExpected
            | Reason::ReplicasStable
            | Reason::ServiceDisabled
            | Reason::ConnectionsWithinLimit
            | Reason::ConnectionsExceedLimit
            | Reason::ConnectionsUnknown
            | Reason::RoutingApplied
            | Reason::RoutingDisabled
            | Reason::RoutingUnsupported
            | Reason::NoUpgrade
            | Reason::UpdatersInMatcher
            | Reason::UpdatersNotRunYet
            | Reason::UpdaterFailed
            | Reason::VulnerabilityDataStale
            | Reason::UpdatersSucceeded
            | Reason::DeliveriesSucceeding
            | Reason::DeliveriesFailing
            | Reason::DeliveriesNotChecked => Phase::Available,
            Reason::UpgradePreparing | Reason::UpgradeRolling | Reason::UpgradeFinishing => {
                Phase::Upgrading
            }
            Reason::ReplicasChanging => Phase::Scaling,
            Reason::ProgressDeadlineExceeded
            | Reason::BelowMinimumAvailable
            | Reason::WorkloadMissing
            | Reason::ServiceDegraded
            | Reason::ServiceNotReady
            | Reason::UpgradeFailed
            | Reason::SpecUnreadable
            | Reason::FieldContested => Phase::Degraded,
        }
    }

    /// Where to read about it, for condition messages: `docs/runbooks/Degraded.md#rolloutfailed`.
    pub fn runbook_link(self) -> String {
        format!(
            "docs/runbooks/{}.md#{}",
            self.runbook(),
            self.as_str().to_ascii_lowercase()
        )
    }
}

/// The reason `Ready=False` gives while the resource is in `phase`, held back by `blocking`:
/// `blocking` when its runbook entry is on the phase's page, else `Waiting` (on Deploying's),
/// so the link always leads to the page of the phase the resource is in.
pub fn reason_in(phase: Phase, blocking: Reason) -> Reason {
    if blocking.runbook() == phase {
        blocking
    } else {
        Reason::Waiting
    }
}

/// The tri-state of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    pub fn from_bool(value: bool) -> Self {
        if value { Status::True } else { Status::False }
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One condition as the machine decides it, before timestamps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionSpec {
    pub type_: ConditionType,
    pub status: Status,
    pub reason: Reason,
    pub message: String,
}

impl ConditionSpec {
    /// A condition whose message ends by naming the runbook entry of its reason, so
    /// `kubectl describe` points at what to do.
    pub fn new(
        type_: ConditionType,
        status: Status,
        reason: Reason,
        message: impl Into<String>,
    ) -> Self {
        let message = message.into();
        let message = format!("{message} (see {})", reason.runbook_link());
        Self {
            type_,
            status,
            reason,
            message,
        }
    }
}

/// The conditions to write: `wanted` in order, each keeping the previous
/// `lastTransitionTime` when its status is unchanged, all stamped with `generation`.
pub fn merge(
    previous: &[Condition],
    wanted: &[ConditionSpec],
    generation: i64,
    now: &Time,
) -> Vec<Condition> {
    wanted
        .iter()
        .map(|spec| {
            let type_ = spec.type_.as_str();
            let status = spec.status.as_str();
            let last_transition_time = previous
                .iter()
                .find(|c| c.type_ == type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: spec.reason.as_str().to_string(),
                message: spec.message.clone(),
                last_transition_time,
                observed_generation: Some(generation),
            }
        })
        .collect()
}
