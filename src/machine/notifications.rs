//! Whether the notifier's notifications reach their receiver (Quay, or any webhook, AMQP or
//! STOMP target): the `NotificationsDelivered` condition, from the notifier's own database.
//! Clair v4.9 gives no metric for a failing delivery, and a refused one is never marked
//! failed (it stays `created` and is tried again every `delivery_interval`:
//! `../shared/notes/quay.md`), so the undelivered notifications and the age of the oldest
//! are the signal. It never moves the phase: a receiver that refuses is the receiver's
//! outage, not Clair's, and Clair keeps every notification until it is delivered.

use std::time::Duration;

use k8s_openapi::jiff;

use super::conditions::{ConditionSpec, ConditionType, Reason, Status};

pub use crate::database::probe::{Oldest, Undelivered};

/// What the operator knows of the notifier's deliveries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveriesObservation {
    /// No notifier: no condition.
    Off,
    /// Not measured: why.
    Unchecked(String),
    /// The notifier's database as the last check found it, and the delivery interval of
    /// its config (each waiting notification is tried once per interval).
    Checked {
        undelivered: Undelivered,
        interval: Duration,
    },
}

/// A notification still waiting after this many delivery intervals has had at least one
/// attempt refused or unanswered.
pub const GRACE_INTERVALS: u32 = 2;

/// `NotificationsDelivered`: False while a notification has waited longer than
/// [`GRACE_INTERVALS`] delivery intervals, True otherwise, Unknown when not measured; none
/// without a notifier.
pub fn condition(observation: &DeliveriesObservation) -> Option<ConditionSpec> {
    let (undelivered, interval) = match observation {
        DeliveriesObservation::Off => return None,
        DeliveriesObservation::Unchecked(why) => {
            return Some(ConditionSpec::new(
                ConditionType::NotificationsDelivered,
                Status::Unknown,
                Reason::DeliveriesNotChecked,
                why.clone(),
            ));
        }
        DeliveriesObservation::Checked {
            undelivered,
            interval,
        } => (undelivered, *interval),
    };
    let grace = interval.saturating_mul(GRACE_INTERVALS);
    match undelivered.oldest {
        Some(oldest) if oldest.age > grace => Some(ConditionSpec::new(
            ConditionType::NotificationsDelivered,
            Status::False,
            Reason::DeliveriesFailing,
            format!(
                "{} notification(s) not delivered, the oldest created at {}, more than {} \
                 delivery intervals ({} each) ago: the receiver refuses them or cannot be \
                 reached (the notifier's log names the answer), or the notifier is not \
                 running (see NotifierReady); Clair keeps them and tries again every interval",
                undelivered.count,
                oldest
                    .created
                    .round(jiff::Unit::Second)
                    .unwrap_or(oldest.created),
                GRACE_INTERVALS,
                minutes(interval),
            ),
        )),
        _ => Some(ConditionSpec::new(
            ConditionType::NotificationsDelivered,
            Status::True,
            Reason::DeliveriesSucceeding,
            // No count: a busy notifier's status would change at every check.
            format!(
                "no notification has waited more than {GRACE_INTERVALS} delivery intervals ({} each)",
                minutes(interval)
            ),
        )),
    }
}

/// `90s` → `1m30s`; whole minutes without seconds.
fn minutes(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match (seconds / 60, seconds % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(count: u64, oldest: Option<u64>) -> DeliveriesObservation {
        DeliveriesObservation::Checked {
            undelivered: Undelivered {
                count,
                oldest: oldest.map(|seconds| Oldest {
                    age: Duration::from_secs(seconds),
                    created: "2026-12-02T19:01:05.4Z".parse().unwrap(),
                }),
            },
            interval: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_notification_waiting_past_two_intervals_means_deliveries_fail() {
        let failing = condition(&checked(3, Some(150))).unwrap();
        assert_eq!(failing.status, Status::False);
        assert_eq!(failing.reason, Reason::DeliveriesFailing);
        assert!(
            failing.message.starts_with(
                "3 notification(s) not delivered, the oldest created at 2026-12-02T19:01:05Z, \
                 more than 2 delivery intervals (1m each) ago"
            ),
            "{}",
            failing.message
        );
        // Within the grace: an attempt may simply not have come yet.
        let waiting = condition(&checked(1, Some(100))).unwrap();
        assert_eq!(
            (waiting.status, waiting.reason),
            (Status::True, Reason::DeliveriesSucceeding)
        );
        let none = condition(&checked(0, None)).unwrap();
        assert_eq!(none.status, Status::True);
    }

    #[test]
    fn an_interval_too_long_to_double_does_not_overflow() {
        let huge = DeliveriesObservation::Checked {
            undelivered: Undelivered {
                count: 1,
                oldest: Some(Oldest {
                    age: Duration::from_secs(3600),
                    created: "2026-12-02T19:01:05Z".parse().unwrap(),
                }),
            },
            interval: Duration::MAX,
        };
        assert_eq!(condition(&huge).unwrap().status, Status::True);
    }

    #[test]
    fn no_notifier_no_condition_and_unmeasured_is_unknown() {
        assert_eq!(condition(&DeliveriesObservation::Off), None);
        let unknown = condition(&DeliveriesObservation::Unchecked("not yet".to_string())).unwrap();
        assert_eq!(
            (unknown.status, unknown.reason),
            (Status::Unknown, Reason::DeliveriesNotChecked)
        );
        assert!(
            unknown.message.starts_with("not yet"),
            "{}",
            unknown.message
        );
    }
}
