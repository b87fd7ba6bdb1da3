//! How fresh a `Clair`'s vulnerability data is, when a CronJob runs the updaters: the
//! `UpdatersReady` condition from the runs the cluster still records. It never moves the
//! phase: stale data is a warning on an Available Clair, not an outage.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::conditions::{ConditionSpec, ConditionType, Reason, Status};

/// Who runs the updaters, and how their runs went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdatersObservation {
    /// The matcher runs them (Clair's default): nothing to watch here.
    InMatcher,
    /// The updater CronJob runs them.
    CronJob(UpdaterRuns),
}

/// The updater runs the cluster records (the CronJob's status and the Jobs it keeps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdaterRuns {
    pub last_success: Option<Time>,
    /// When the last failed run failed, and why (its Job's name and failure message).
    pub last_failure: Option<(Time, String)>,
    /// Failed runs among the Jobs kept.
    pub failed_runs: i32,
    /// Data older than this is stale.
    pub stale_after: Duration,
}

/// How old data may get: `explicit` seconds, else twice the time between two runs of
/// `schedule` (from now); a schedule that cannot be read counts as six-hourly.
pub fn stale_after(schedule: &str, explicit: Option<i64>, now: &Time) -> Duration {
    if let Some(seconds) = explicit.filter(|s| *s > 0) {
        return Duration::from_secs(seconds.unsigned_abs());
    }
    interval(schedule, now).unwrap_or(Duration::from_secs(6 * 3600)) * 2
}

/// The time between the next two runs of a cron `schedule` after `now` (UTC).
fn interval(schedule: &str, now: &Time) -> Option<Duration> {
    let cron: croner::Cron = schedule.parse().ok()?;
    let start = now.0.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
    let first = cron.find_next_occurrence(&start, false).ok()?;
    let second = cron.find_next_occurrence(&first, false).ok()?;
    let seconds = second.timestamp().as_second() - first.timestamp().as_second();
    u64::try_from(seconds).ok().map(Duration::from_secs)
}

/// `UpdatersReady`: True while the last run succeeded recently enough, False when the last
/// run failed or the data is stale, Unknown before any run finished.
pub fn condition(observation: &UpdatersObservation, now: &Time) -> ConditionSpec {
    let runs = match observation {
        UpdatersObservation::InMatcher => {
            return ConditionSpec::new(
                ConditionType::UpdatersReady,
                Status::True,
                Reason::UpdatersInMatcher,
                "the matcher runs the updaters; its log tells how they go",
            );
        }
        UpdatersObservation::CronJob(runs) => runs,
    };
    let succeeded = runs.last_success.as_ref().map(|t| t.0);
    let failed_after_success = runs
        .last_failure
        .as_ref()
        .filter(|(at, _)| succeeded.is_none_or(|s| at.0 > s));
    let last_success = match &succeeded {
        Some(at) => format!("the last success was at {at}"),
        None => "no run has succeeded yet".to_string(),
    };
    if let Some((_, why)) = failed_after_success {
        return ConditionSpec::new(
            ConditionType::UpdatersReady,
            Status::False,
            Reason::UpdaterFailed,
            format!("the last updater run failed: {why}; {last_success}"),
        );
    }
    let Some(at) = succeeded else {
        return ConditionSpec::new(
            ConditionType::UpdatersReady,
            Status::Unknown,
            Reason::UpdatersNotRunYet,
            "no updater run has finished yet: the vulnerability data may be empty",
        );
    };
    let age = Duration::from_secs(now.0.as_second().saturating_sub(at.as_second()).max(0) as u64);
    if age > runs.stale_after {
        return ConditionSpec::new(
            ConditionType::UpdatersReady,
            Status::False,
            Reason::VulnerabilityDataStale,
            format!(
                "the vulnerability data was last updated {} ago (at {at}), more than the {} allowed (spec.updaters.staleAfterSeconds)",
                human(age),
                human(runs.stale_after)
            ),
        );
    }
    ConditionSpec::new(
        ConditionType::UpdatersReady,
        Status::True,
        Reason::UpdatersSucceeded,
        format!("the vulnerability data was updated at {at}"),
    )
}

/// `3h20m`, `45m`, `2d4h`: enough to read at a glance.
fn human(duration: Duration) -> String {
    let minutes = duration.as_secs() / 60;
    let (days, hours, minutes) = (minutes / 1440, (minutes / 60) % 24, minutes % 60);
    match (days, hours) {
        (0, 0) => format!("{minutes}m"),
        (0, _) => format!("{hours}h{minutes}m"),
        _ => format!("{days}d{hours}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Time {
        Time(text.parse().expect("a timestamp"))
    }

    fn runs(success: Option<&str>, failure: Option<&str>) -> UpdatersObservation {
        UpdatersObservation::CronJob(UpdaterRuns {
            last_success: success.map(at),
            last_failure: failure.map(|f| {
                (
                    at(f),
                    "Job clair-updaters-1: BackoffLimitExceeded".to_string(),
                )
            }),
            failed_runs: i32::from(failure.is_some()),
            stale_after: Duration::from_secs(12 * 3600),
        })
    }

    #[test]
    fn twice_the_schedule_unless_told() {
        let now = at("2026-11-30T07:00:00Z");
        assert_eq!(
            stale_after("0 */6 * * *", None, &now),
            Duration::from_secs(12 * 3600)
        );
        assert_eq!(
            stale_after("30 2 * * *", None, &now),
            Duration::from_secs(48 * 3600)
        );
        assert_eq!(
            stale_after("0 */6 * * *", Some(600), &now),
            Duration::from_secs(600)
        );
        assert_eq!(
            stale_after("not a schedule", None, &now),
            Duration::from_secs(12 * 3600)
        );
    }

    #[test]
    fn the_condition_follows_the_runs() {
        let now = at("2026-11-30T07:00:00Z");
        let judge = |o| {
            let c = condition(&o, &now);
            (c.status, c.reason)
        };
        assert_eq!(
            judge(runs(None, None)),
            (Status::Unknown, Reason::UpdatersNotRunYet)
        );
        assert_eq!(
            judge(runs(Some("2026-11-30T06:00:00Z"), None)),
            (Status::True, Reason::UpdatersSucceeded)
        );
        let failed = condition(
            &runs(Some("2026-11-30T01:00:00Z"), Some("2026-11-30T06:00:00Z")),
            &now,
        );
        assert_eq!(
            (failed.status, failed.reason),
            (Status::False, Reason::UpdaterFailed)
        );
        assert!(
            failed.message.contains("BackoffLimitExceeded"),
            "{}",
            failed.message
        );
        // A success after the failure: ready again.
        assert_eq!(
            judge(runs(
                Some("2026-11-30T06:30:00Z"),
                Some("2026-11-30T06:00:00Z")
            )),
            (Status::True, Reason::UpdatersSucceeded)
        );
        let stale = condition(&runs(Some("2026-11-29T07:00:00Z"), None), &now);
        assert_eq!(
            (stale.status, stale.reason),
            (Status::False, Reason::VulnerabilityDataStale)
        );
        assert!(stale.message.contains("1d0h ago"), "{}", stale.message);
        assert_eq!(
            judge(UpdatersObservation::InMatcher),
            (Status::True, Reason::UpdatersInMatcher)
        );
    }
}
