//! Observations both families share (the config and the database) and the conditions
//! that report them.

use super::conditions::{ConditionSpec, ConditionType as T, Reason, Status};

/// The config as the controller found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigObservation {
    /// A referenced ConfigMap, Secret or key does not exist; `what` names it.
    Missing { what: String },
    /// The merged config fails validation for this service's mode; `message` has the field
    /// path and the reason.
    Invalid { message: String },
    /// Present and valid; `hash` is what the pods will be given.
    Valid { hash: String },
}

/// The service's database, as measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseObservation {
    Reachable,
    /// `reason` says which kind of failure (`DatabaseAuthFailed`, `DatabaseMissing`, ...);
    /// `message` what failed, never a password.
    Unreachable {
        reason: Reason,
        message: String,
    },
    /// Not measured (for example no credentials to try): does not hold the service back.
    NotChecked {
        message: String,
    },
}

/// `ConfigValid` for `subject` (`indexer`, `Clair`, ...).
pub fn config_condition(subject: &str, config: &ConfigObservation) -> ConditionSpec {
    match config {
        ConfigObservation::Missing { what } => ConditionSpec::new(
            T::ConfigValid,
            Status::False,
            Reason::ConfigMissing,
            format!("the {subject} config is missing: {what}"),
        ),
        ConfigObservation::Invalid { message } => ConditionSpec::new(
            T::ConfigValid,
            Status::False,
            Reason::ConfigInvalid,
            format!("the {subject} config is invalid: {message}"),
        ),
        ConfigObservation::Valid { hash } => ConditionSpec::new(
            T::ConfigValid,
            Status::True,
            Reason::ConfigAccepted,
            format!("the {subject} config {hash} is valid"),
        ),
    }
}

/// `DatabaseReady` for `subject`.
pub fn database_condition(subject: &str, database: &DatabaseObservation) -> ConditionSpec {
    match database {
        DatabaseObservation::Reachable => ConditionSpec::new(
            T::DatabaseReady,
            Status::True,
            Reason::DatabaseReachable,
            format!("the {subject} database answers"),
        ),
        DatabaseObservation::Unreachable { reason, message } => ConditionSpec::new(
            T::DatabaseReady,
            Status::False,
            *reason,
            format!("the {subject} database: {message}"),
        ),
        DatabaseObservation::NotChecked { message } => ConditionSpec::new(
            T::DatabaseReady,
            Status::Unknown,
            Reason::DatabaseNotChecked,
            message.clone(),
        ),
    }
}

/// `Degraded=False`: what both families report while nothing is wrong.
pub fn not_degraded() -> ConditionSpec {
    ConditionSpec::new(
        T::Degraded,
        Status::False,
        Reason::AsExpected,
        "nothing is wrong",
    )
}

/// A condition message without its runbook suffix, for quoting it in another.
pub fn strip_link(message: &str) -> &str {
    message
        .rsplit_once(" (see docs/runbooks/")
        .map_or(message, |(m, _)| m)
}
