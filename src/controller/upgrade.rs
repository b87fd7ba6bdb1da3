//! Moving a `Clair` to a new Clair version: `clairctl admin pre VERSION` in a Job before the
//! services roll, `clairctl admin post VERSION` once every service is Available on the new
//! image. The version comes from the image tag; `status.version` records the one the
//! services run, and moves only when the post step has succeeded.

use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;

use super::apply::{apply, delete_unwanted};
use super::{Context, Error};
use crate::api::labels;
use crate::machine::clair::UpgradeObservation;
use crate::render::clair::{ClairInput, UpgradeStep, upgrade_job, upgrade_job_name};

/// Where one step's Job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JobState {
    Absent,
    Running,
    Succeeded,
    Failed,
}

fn job_state(job: Option<&Job>) -> JobState {
    let Some(job) = job else {
        return JobState::Absent;
    };
    let condition = |type_: &str| {
        job.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
    };
    if condition("Failed") {
        JobState::Failed
    } else if condition("Complete") {
        JobState::Succeeded
    } else {
        JobState::Running
    }
}

/// What the upgrade needs next.
pub struct Upgrade {
    pub observation: UpgradeObservation,
    /// The Job to create for the current step, when it does not exist yet.
    pub job_to_create: Option<Job>,
    /// Both steps succeeded: the services run `to`.
    pub completed: bool,
}

/// The state of a move from `running` to `desired` (versions from image tags).
/// `services_on_new`: every enabled service is Available on the new image.
pub async fn observe(
    context: &Context,
    input: &ClairInput<'_>,
    running: Option<&str>,
    desired: Option<&str>,
    services_on_new: bool,
) -> Result<Upgrade, Error> {
    let (Some(from), Some(to)) = (running, desired) else {
        return Ok(none());
    };
    if from == to {
        return Ok(none());
    }
    let (from, to) = (from.to_string(), to.to_string());
    let jobs: Api<Job> = Api::namespaced(context.client.clone(), input.namespace);
    let pre_name = upgrade_job_name(input, UpgradeStep::Pre, &to);
    let pre = jobs.get_opt(&pre_name).await?;
    let failed = |job: String| UpgradeObservation::Failed {
        from: from.clone(),
        to: to.clone(),
        job,
    };
    match job_state(pre.as_ref()) {
        JobState::Failed => {
            return Ok(Upgrade {
                observation: failed(pre_name),
                job_to_create: None,
                completed: false,
            });
        }
        state @ (JobState::Absent | JobState::Running) => {
            return Ok(Upgrade {
                job_to_create: (state == JobState::Absent)
                    .then(|| upgrade_job(input, UpgradeStep::Pre, &to)),
                observation: UpgradeObservation::Preparing {
                    from,
                    to,
                    job: pre_name,
                },
                completed: false,
            });
        }
        JobState::Succeeded => {}
    }
    if !services_on_new {
        return Ok(Upgrade {
            observation: UpgradeObservation::Rolling { from, to },
            job_to_create: None,
            completed: false,
        });
    }
    let post_name = upgrade_job_name(input, UpgradeStep::Post, &to);
    let post = jobs.get_opt(&post_name).await?;
    Ok(match job_state(post.as_ref()) {
        JobState::Failed => Upgrade {
            observation: failed(post_name),
            job_to_create: None,
            completed: false,
        },
        state @ (JobState::Absent | JobState::Running) => Upgrade {
            job_to_create: (state == JobState::Absent)
                .then(|| upgrade_job(input, UpgradeStep::Post, &to)),
            observation: UpgradeObservation::Finishing {
                from,
                to,
                job: post_name,
            },
            completed: false,
        },
        JobState::Succeeded => Upgrade {
            observation: UpgradeObservation::None,
            job_to_create: None,
            completed: true,
        },
    })
}

fn none() -> Upgrade {
    Upgrade {
        observation: UpgradeObservation::None,
        job_to_create: None,
        completed: false,
    }
}

/// Creates the current step's Job.
pub async fn start_step(context: &Context, input: &ClairInput<'_>, job: &Job) -> Result<(), Error> {
    let jobs: Api<Job> = Api::namespaced(context.client.clone(), input.namespace);
    apply(&jobs, job, None).await?;
    Ok(())
}

/// Deletes the finished upgrade's Jobs (and, in the background, their pods).
pub async fn clean_up(
    context: &Context,
    input: &ClairInput<'_>,
    owner_uid: &str,
) -> Result<(), Error> {
    let jobs: Api<Job> = Api::namespaced(context.client.clone(), input.namespace);
    let selector = labels::to_selector_string(&labels::all(input.name, "upgrade"));
    delete_unwanted(&jobs, &selector, owner_uid, |_| false).await?;
    Ok(())
}
