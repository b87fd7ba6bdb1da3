//! Where a move to a new Clair version stands, from the versions and the two step Jobs, and
//! which step's Job to start. Pure: the controller reads the Jobs; this decides.

use super::clair::UpgradeObservation;
use crate::api::clair::UpgradeStep;

/// Where one step's Job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    Absent,
    Running,
    Succeeded,
    Failed,
}

/// The two step Jobs of the move to one version, by name, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepJobs {
    pub pre: (String, JobState),
    pub post: (String, JobState),
}

/// What the upgrade needs next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upgrade {
    pub observation: UpgradeObservation,
    /// The step whose Job does not exist yet and should: created once the phase is
    /// `Upgrading`.
    pub start: Option<UpgradeStep>,
    /// Both steps succeeded: the services run the new version; the Jobs can go.
    pub completed: bool,
}

impl Upgrade {
    fn none() -> Self {
        Upgrade {
            observation: UpgradeObservation::None,
            start: None,
            completed: false,
        }
    }
}

/// The state of a move from `running` to `desired` (versions from image tags).
/// `services_on_new`: every enabled service is Available on the new image. `jobs`: the step
/// Jobs of `desired`, read only when the versions differ.
pub fn assess(
    running: Option<&str>,
    desired: Option<&str>,
    services_on_new: bool,
    jobs: Option<&StepJobs>,
) -> Upgrade {
    let (Some(from), Some(to), Some(jobs)) = (running, desired, jobs) else {
        return Upgrade::none();
    };
    if from == to {
        return Upgrade::none();
    }
    let (from, to) = (from.to_string(), to.to_string());
    let failed = |job: &str| Upgrade {
        observation: UpgradeObservation::Failed {
            from: from.clone(),
            to: to.clone(),
            job: job.to_string(),
        },
        start: None,
        completed: false,
    };
    let (pre, pre_state) = &jobs.pre;
    match pre_state {
        JobState::Failed => return failed(pre),
        JobState::Absent | JobState::Running => {
            return Upgrade {
                start: (*pre_state == JobState::Absent).then_some(UpgradeStep::Pre),
                observation: UpgradeObservation::Preparing {
                    from,
                    to,
                    job: pre.clone(),
                },
                completed: false,
            };
        }
        JobState::Succeeded => {}
    }
    if !services_on_new {
        return Upgrade {
            observation: UpgradeObservation::Rolling { from, to },
            start: None,
            completed: false,
        };
    }
    let (post, post_state) = &jobs.post;
    match post_state {
        JobState::Failed => failed(post),
        JobState::Absent | JobState::Running => Upgrade {
            start: (*post_state == JobState::Absent).then_some(UpgradeStep::Post),
            observation: UpgradeObservation::Finishing {
                from,
                to,
                job: post.clone(),
            },
            completed: false,
        },
        JobState::Succeeded => Upgrade {
            observation: UpgradeObservation::None,
            start: None,
            completed: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(pre: JobState, post: JobState) -> StepJobs {
        StepJobs {
            pre: ("pre".into(), pre),
            post: ("post".into(), post),
        }
    }

    #[test]
    fn no_version_change_is_no_upgrade() {
        let all = jobs(JobState::Absent, JobState::Absent);
        assert_eq!(
            assess(Some("v1"), Some("v1"), true, Some(&all)),
            Upgrade::none()
        );
        assert_eq!(assess(None, Some("v2"), true, Some(&all)), Upgrade::none());
        assert_eq!(assess(Some("v1"), None, true, Some(&all)), Upgrade::none());
    }

    #[test]
    fn the_pre_step_starts_first_and_holds_until_it_succeeds() {
        let up = assess(
            Some("v1"),
            Some("v2"),
            false,
            Some(&jobs(JobState::Absent, JobState::Absent)),
        );
        assert_eq!(up.start, Some(UpgradeStep::Pre));
        assert!(matches!(
            up.observation,
            UpgradeObservation::Preparing { .. }
        ));
        let up = assess(
            Some("v1"),
            Some("v2"),
            true,
            Some(&jobs(JobState::Running, JobState::Absent)),
        );
        assert_eq!(up.start, None, "a running step is not started again");
        assert!(matches!(
            up.observation,
            UpgradeObservation::Preparing { .. }
        ));
    }

    #[test]
    fn the_services_roll_then_the_post_step_runs_then_the_move_completes() {
        let rolling = assess(
            Some("v1"),
            Some("v2"),
            false,
            Some(&jobs(JobState::Succeeded, JobState::Absent)),
        );
        assert!(matches!(
            rolling.observation,
            UpgradeObservation::Rolling { .. }
        ));
        assert_eq!(rolling.start, None);
        let finishing = assess(
            Some("v1"),
            Some("v2"),
            true,
            Some(&jobs(JobState::Succeeded, JobState::Absent)),
        );
        assert_eq!(finishing.start, Some(UpgradeStep::Post));
        let done = assess(
            Some("v1"),
            Some("v2"),
            true,
            Some(&jobs(JobState::Succeeded, JobState::Succeeded)),
        );
        assert!(done.completed && done.observation == UpgradeObservation::None);
    }

    #[test]
    fn a_failed_step_stops_the_move() {
        for (pre, post, services_on_new, job) in [
            (JobState::Failed, JobState::Absent, false, "pre"),
            (JobState::Succeeded, JobState::Failed, true, "post"),
        ] {
            let up = assess(
                Some("v1"),
                Some("v2"),
                services_on_new,
                Some(&jobs(pre, post)),
            );
            assert_eq!(
                up.observation,
                UpgradeObservation::Failed {
                    from: "v1".into(),
                    to: "v2".into(),
                    job: job.into()
                }
            );
            assert_eq!(up.start, None);
        }
    }
}
