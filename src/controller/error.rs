//! The errors of a reconcile, one type per step, each saying what was being read or written
//! and of which object; and the policy that follows from them: a transient error (the
//! apiserver busy, a conflict, a dropped connection) is retried soon with a growing,
//! jittered delay per object; one only a change of the resource can fix (the apiserver
//! refused what its spec produced as invalid) waits for that change; a refusal of the
//! operator's permissions is retried slowly, since an administrator may fix them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// Reading the cluster while observing.
#[derive(Debug, thiserror::Error)]
#[error("reading {what}: {source}")]
pub struct ObserveError {
    /// `StatefulSet clair-database`, `the Jobs of the upgrade to v4.9.0`.
    pub what: String,
    #[source]
    pub source: kube::Error,
}

impl ObserveError {
    /// A closure for `map_err` that names what was read.
    pub fn reading(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| ObserveError { what, source }
    }
}

/// Applying the desired objects or deleting unwanted ones.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("listing the {kind} objects the resource owns: {source}")]
    List {
        kind: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading {kind} {name}: {source}")]
    Read {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("applying {kind} {name}: {source}")]
    Write {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting {kind} {name}, which the resource no longer wants: {source}")]
    Delete {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "{kind} {name} exists and is not this resource's (another controller owns it, or the \
         operator did not make it): it is left as it is; rename or delete it, or rename the \
         resource. Right after a resource of the same name was deleted this is the old one's, \
         which garbage collection removes: it clears by itself"
    )]
    NotOurs { kind: String, name: String },
    #[error("serializing {kind} {name}: {source}")]
    Serialize {
        kind: String,
        name: String,
        #[source]
        source: serde_json::Error,
    },
}

impl ApplyError {
    fn kube(&self) -> Option<&kube::Error> {
        match self {
            ApplyError::List { source, .. }
            | ApplyError::Read { source, .. }
            | ApplyError::Write { source, .. }
            | ApplyError::Delete { source, .. } => Some(source),
            ApplyError::Serialize { .. } | ApplyError::NotOurs { .. } => None,
        }
    }

    /// The apiserver refused to create an object because its namespace is being deleted:
    /// nothing more is applied there.
    pub fn namespace_terminating(&self) -> bool {
        self.kube().is_some_and(namespace_terminating)
    }
}

/// Whether the apiserver refused a write because the namespace is being deleted (or is
/// already gone).
pub fn namespace_terminating(error: &kube::Error) -> bool {
    let kube::Error::Api(status) = error else {
        return false;
    };
    let terminating = status.code == 403
        && (status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
            || status.message.contains("because it is being terminated"));
    let gone = status.code == 404
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.kind == "namespaces");
    terminating || gone
}

/// Writing the status subresource.
#[derive(Debug, thiserror::Error)]
#[error("writing the status of {object}: {source}")]
pub struct StatusError {
    pub object: String,
    #[source]
    pub source: kube::Error,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Observe(#[from] ObserveError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The object lacks what the apiserver always sets (a name, a namespace, a UID).
    #[error("the resource has no {0}")]
    MissingField(&'static str),
    #[error("the operating system gave no random bytes: {0}")]
    Random(String),
}

impl Error {
    /// Every [`Error::reason`], so each kind's error series exist (at zero) before the first
    /// error: a rate over them works from the start, and an alert sees the first one.
    pub const REASONS: &[&str] = &[
        "ObserveFailed",
        "ApplyFailed",
        "StatusWriteFailed",
        "MissingField",
        "RandomUnavailable",
    ];

    /// For logs and metrics: the step that failed.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Observe(_) => "ObserveFailed",
            Error::Apply(_) => "ApplyFailed",
            Error::Status(_) => "StatusWriteFailed",
            Error::MissingField(_) => "MissingField",
            Error::Random(_) => "RandomUnavailable",
        }
    }

    /// Whether someone must act on the resource or around it (a same-named object, what
    /// it asks for refused, permissions): worth a Warning Event on it, where
    /// `kubectl describe` shows it. A transient failure is only logged.
    pub fn needs_action(&self) -> bool {
        matches!(self, Error::Apply(ApplyError::NotOurs { .. })) || !self.is_transient()
    }

    /// Whether retrying soon may succeed.
    pub fn is_transient(&self) -> bool {
        self.retry() == Retry::Soon
    }

    /// When a retry may succeed.
    pub fn retry(&self) -> Retry {
        let kube = match self {
            Error::Observe(e) => Some(&e.source),
            Error::Apply(ApplyError::Serialize { .. }) => return Retry::OnChange,
            // Clears when the other object goes (often by itself: the garbage collector
            // removing a deleted resource's), a change no watch of the resource hears.
            Error::Apply(ApplyError::NotOurs { .. }) => return Retry::Soon,
            Error::Apply(e) => e.kube(),
            Error::Status(e) => Some(&e.source),
            Error::MissingField(_) => return Retry::OnChange,
            Error::Random(_) => return Retry::Soon,
        };
        kube.map_or(Retry::Slowly, retry_of)
    }
}

/// When retrying a failed reconcile may succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Any moment: the failure was transient.
    Soon,
    /// Once someone changes what the operator may do (its permissions).
    Slowly,
    /// Only once the resource (or what it references) changes: what it asks for was refused.
    OnChange,
}

/// Transient: the apiserver overloaded or unavailable, a conflict with another writer, an
/// object gone between two calls, or no answer at all. Invalid and bad requests stay refused
/// until the resource changes; forbidden until the operator's permissions do.
fn retry_of(error: &kube::Error) -> Retry {
    match error {
        kube::Error::Api(status) => match status.code {
            404 | 408 | 409 | 429 | 500..=599 => Retry::Soon,
            // Invalid: what the resource asks for cannot be stored (an immutable field
            // changed, a value out of range). A bad request or a denial (403, and 400 from
            // some admission policies) may be lifted by an administrator: retried slowly.
            422 => Retry::OnChange,
            _ => Retry::Slowly,
        },
        kube::Error::HyperError(_)
        | kube::Error::Service(_)
        | kube::Error::HttpError(_)
        | kube::Error::ReadEvents(_) => Retry::Soon,
        _ => Retry::Slowly,
    }
}

/// How long to wait before retrying an object whose reconcile failed: per object, growing
/// from 1 s to 5 min with jitter on transient errors (reset by a success), 5 min on
/// permanent ones.
#[derive(Default)]
pub struct RetryPolicy {
    failures: Mutex<HashMap<String, usize>>,
    /// Per failing object, the failure last said in an Event and when.
    said: Mutex<HashMap<String, (String, std::time::Instant)>>,
}

/// How long the same failure of an object goes unsaid after its Event.
const SAID_AGAIN: Duration = Duration::from_secs(3600);

/// The slow retry of a permanent error, and the ceiling of the transient backoff.
pub const SLOW_RETRY: Duration = Duration::from_secs(300);

impl RetryPolicy {
    /// The delay before retrying `key` after `error`; `None`: wait for a change.
    pub fn failed(&self, key: &str, error: &Error) -> Option<Duration> {
        match error.retry() {
            Retry::Soon => Some(self.backoff(key)),
            Retry::Slowly => Some(SLOW_RETRY),
            Retry::OnChange => None,
        }
    }

    fn backoff(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let count = failures.entry(key.to_string()).or_insert(0);
        *count += 1;
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_secs(1))
            .with_max_delay(SLOW_RETRY)
            .with_jitter()
            .without_max_times()
            .build()
            .nth(*count - 1)
            .unwrap_or(SLOW_RETRY)
    }

    /// Whether failure `note` of `key` is to be said in an Event: the first of a run of
    /// failures, another one than last said, or the same again an hour later (a retry every
    /// few minutes would otherwise add an Event each time).
    pub fn to_say(&self, key: &str, note: &str) -> bool {
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        match said.get(key) {
            Some((last, at)) if last == note && now.duration_since(*at) < SAID_AGAIN => false,
            _ => {
                said.insert(key.to_string(), (note.to_string(), now));
                true
            }
        }
    }

    /// `key` reconciled: its next failure starts the backoff again.
    pub fn succeeded(&self, key: &str) {
        self.said
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_listed() {
        // One error of each variant: their reasons are exactly the listed ones.
        let errors = [
            observe(500),
            Error::Apply(ApplyError::NotOurs {
                kind: "Service".into(),
                name: "taken".into(),
            }),
            Error::Status(StatusError {
                object: "Clair a/b".into(),
                source: api_error(500),
            }),
            Error::MissingField("metadata.name"),
            Error::Random("no entropy".into()),
        ];
        let reasons: Vec<&str> = errors.iter().map(Error::reason).collect();
        assert_eq!(reasons, Error::REASONS);
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: "refused".into(),
            ..Default::default()
        }))
    }

    fn observe(code: u16) -> Error {
        Error::Observe(ObserveError {
            what: "StatefulSet db".into(),
            source: api_error(code),
        })
    }

    #[test]
    fn conflicts_and_overload_are_transient_refusals_are_not() {
        for code in [409, 429, 500, 503, 404] {
            assert_eq!(observe(code).retry(), Retry::Soon, "{code}");
        }
        assert_eq!(observe(403).retry(), Retry::Slowly);
        assert_eq!(observe(400).retry(), Retry::Slowly);
        assert_eq!(observe(422).retry(), Retry::OnChange);
        assert_eq!(Error::MissingField("metadata.uid").retry(), Retry::OnChange);
    }

    #[test]
    fn the_message_names_what_was_read_or_written() {
        assert!(
            observe(500)
                .to_string()
                .starts_with("reading StatefulSet db: ")
        );
        let write = Error::Apply(ApplyError::Write {
            kind: "Deployment".into(),
            name: "clair-indexer".into(),
            source: api_error(422),
        });
        assert!(
            write
                .to_string()
                .starts_with("applying Deployment clair-indexer: ")
        );
    }

    #[test]
    fn transient_retries_grow_per_object_and_reset_on_success() {
        let policy = RetryPolicy::default();
        let delays: Vec<Duration> = (0..6)
            .map(|_| policy.failed("a", &observe(503)).expect("a delay"))
            .collect();
        // Jitter adds up to the delay itself: each stays within [2^n, 2^(n+1)) seconds.
        for (n, delay) in delays.iter().enumerate() {
            let floor = Duration::from_secs(1 << n);
            assert!(*delay >= floor && *delay <= floor * 2, "{n}: {delay:?}");
        }
        let first = |key: &str| policy.failed(key, &observe(503)).expect("a delay");
        assert!(first("b") <= Duration::from_secs(2));
        policy.succeeded("a");
        assert!(first("a") <= Duration::from_secs(2));
        assert_eq!(policy.failed("a", &observe(403)), Some(SLOW_RETRY));
        assert_eq!(policy.failed("a", &observe(422)), None);
    }

    #[test]
    fn a_create_refused_in_a_terminating_namespace_is_recognised() {
        let status = kube::core::Status {
            code: 403,
            message: "secrets \"x\" is forbidden: unable to create new content in namespace t because it is being terminated".into(),
            reason: "Forbidden".into(),
            ..Default::default()
        };
        let error = ApplyError::Write {
            kind: "Secret".into(),
            name: "x".into(),
            source: kube::Error::Api(Box::new(status)),
        };
        assert!(error.namespace_terminating());
        let other = ApplyError::Write {
            kind: "Secret".into(),
            name: "x".into(),
            source: api_error(403),
        };
        assert!(!other.namespace_terminating());
    }
}
