//! How the updater CronJob's runs went: its status and the Jobs it keeps (those it started
//! on schedule and those started by hand with `kubectl create job --from=cronjob/...`).

use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::api::clair::{UpdaterMode, UpdatersStatus};
use crate::api::labels;
use crate::controller::error::ObserveError;
use crate::controller::observer::Observer;
use crate::machine::updaters::{self, UpdaterRuns, UpdatersObservation};
use crate::render::clair::ClairInput;

/// Reads the CronJob and its Jobs, when a CronJob runs the updaters.
pub async fn observe(
    source: &impl Observer,
    input: &ClairInput<'_>,
    now: &Time,
) -> Result<UpdatersObservation, ObserveError> {
    if input.updater_mode() == UpdaterMode::Matcher {
        return Ok(UpdatersObservation::InMatcher);
    }
    let name = input.cronjob_name();
    let cronjob: Option<CronJob> = source
        .owned(input.namespace, &name)
        .await
        .map_err(ObserveError::reading(format!("CronJob {name}")))?;
    let selector = labels::to_selector_string(&labels::all(input.name, "updaters"));
    let jobs: Vec<Job> = source
        .owned_list(input.namespace, &selector)
        .await
        .map_err(ObserveError::reading(format!("the Jobs of CronJob {name}")))?;
    let updaters = input.spec.updaters.as_ref();
    let schedule = cronjob
        .as_ref()
        .and_then(|c| c.spec.as_ref())
        .map(|s| s.schedule.clone())
        .unwrap_or_default();
    let stale_after =
        updaters::stale_after(&schedule, updaters.and_then(|u| u.stale_after_seconds), now);
    Ok(UpdatersObservation::CronJob(runs(
        cronjob.as_ref(),
        &jobs,
        &name,
        stale_after,
    )))
}

/// The runs the CronJob `name`'s status and Jobs record.
pub fn runs(
    cronjob: Option<&CronJob>,
    jobs: &[Job],
    name: &str,
    stale_after: Duration,
) -> UpdaterRuns {
    let finished = |job: &Job, type_: &str| {
        job.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
            .cloned()
    };
    let ours: Vec<&Job> = jobs
        .iter()
        .filter(|job| {
            job.owner_references()
                .iter()
                .any(|o| o.kind == "CronJob" && o.name == name)
        })
        .collect();
    let recorded = cronjob
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.last_successful_time.clone());
    let last_success = ours
        .iter()
        .filter_map(|job| finished(job, "Complete")?.last_transition_time)
        .chain(recorded)
        .max_by_key(|t| t.0);
    let failures: Vec<(Time, String)> = ours
        .iter()
        .filter_map(|job| {
            let failed = finished(job, "Failed")?;
            let why = format!(
                "Job {}: {}: {}",
                job.name_any(),
                failed.reason.as_deref().unwrap_or("Failed"),
                failed.message.as_deref().unwrap_or("no message")
            );
            Some((failed.last_transition_time?, why))
        })
        .collect();
    UpdaterRuns {
        last_success,
        failed_runs: i32::try_from(failures.len()).unwrap_or(i32::MAX),
        last_failure: failures.into_iter().max_by_key(|(t, _)| t.0),
        stale_after,
    }
}

/// The status block of what was observed.
pub fn status(observation: &UpdatersObservation) -> Option<UpdatersStatus> {
    let UpdatersObservation::CronJob(runs) = observation else {
        return None;
    };
    Some(UpdatersStatus {
        last_success_time: runs.last_success.clone(),
        last_failure_time: runs.last_failure.as_ref().map(|(t, _)| t.clone()),
        last_failure_message: runs.last_failure.as_ref().map(|(_, why)| why.clone()),
        failed_runs: runs.failed_runs,
        stale_after_seconds: i64::try_from(runs.stale_after.as_secs()).ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, owner: &str, condition: Option<(&str, &str)>) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "CronJob", "name": owner, "uid": "u"}
            ]},
            "status": {"conditions": condition.map(|(type_, at)| vec![serde_json::json!({
                "type": type_, "status": "True", "lastTransitionTime": at,
                "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit",
            })])},
        }))
        .expect("a Job")
    }

    #[test]
    fn the_latest_success_and_failure_of_its_own_jobs() {
        let jobs = [
            job(
                "a",
                "clair-updaters",
                Some(("Complete", "2026-11-30T01:00:00Z")),
            ),
            job(
                "b",
                "clair-updaters",
                Some(("Failed", "2026-11-30T02:00:00Z")),
            ),
            job("c", "clair-updaters", None),
            job(
                "d",
                "someone-else",
                Some(("Complete", "2026-11-30T05:00:00Z")),
            ),
        ];
        let runs = runs(None, &jobs, "clair-updaters", Duration::from_secs(60));
        assert_eq!(
            runs.last_success.map(|t| t.0.to_string()),
            Some("2026-11-30T01:00:00Z".into())
        );
        let (at, why) = runs.last_failure.expect("a failure");
        assert_eq!(at.0.to_string(), "2026-11-30T02:00:00Z");
        assert_eq!(
            why,
            "Job b: BackoffLimitExceeded: Job has reached the specified backoff limit"
        );
        assert_eq!(runs.failed_runs, 1);
    }
}
