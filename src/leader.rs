//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several replicas only
//! one runs the controllers (the webhooks and metrics serve on all). A small module of our
//! own rather than a crate: the maintained ones build on older kube majors, and the
//! algorithm is client-go's in a few lines. Every write carries the Lease's
//! `resourceVersion`, so two candidates racing for it cannot both win: the apiserver refuses
//! the second (409). The leader renews well within the lease's duration and gives up
//! (its controllers stop, and it stands by like any other replica) when it cannot, before
//! another replica may take over.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use tracing::{debug, info, warn};

/// How long a lease holds without renewal, how often the leader renews it, and how often a
/// candidate looks again (client-go's defaults: 15 s, 2 s retries, renewal within 10 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub lease: Duration,
    pub renew_deadline: Duration,
    pub retry: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

/// What a candidate does with the Lease as it read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No Lease yet: create it, held by us.
    Create,
    /// Ours: renew it.
    Renew,
    /// Another's, expired (or released): take it over.
    TakeOver,
    /// Another's and current: wait.
    Wait { holder: String },
}

/// The step for `me` given `lease` at `now`.
pub fn step(lease: Option<&Lease>, me: &str, now: Timestamp) -> Step {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return Step::Create;
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == me {
        return Step::Renew;
    }
    let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0.as_second())
        .unwrap_or(0);
    if holder.is_empty() || now.as_second() > renewed + seconds {
        Step::TakeOver
    } else {
        Step::Wait { holder }
    }
}

/// One replica's candidacy for the Lease `name` in `namespace`.
pub struct Election {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
}

impl Election {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            timing,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&self) {
        let mut waiting_for = String::new();
        loop {
            match self.try_once().await {
                Ok(true) => {
                    info!(lease = %self.name, identity = %self.identity, "leading: the controllers start");
                    return;
                }
                Ok(false) => {}
                Err(e) => debug!(lease = %self.name, error = %e, "cannot take the lease yet"),
            }
            if let Ok(Some(lease)) = self.api.get_opt(&self.name).await {
                let holder = lease
                    .spec
                    .and_then(|s| s.holder_identity)
                    .unwrap_or_default();
                if holder != waiting_for {
                    info!(lease = %self.name, %holder, "another replica leads; standing by");
                    waiting_for = holder;
                }
            }
            tokio::time::sleep(self.timing.retry).await;
        }
    }

    /// Keeps the Lease renewed; returns when it could not be renewed within the renew
    /// deadline (the caller must stop leading at once: another replica may take over once
    /// the lease's duration has passed).
    pub async fn hold(&self) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.timing.retry).await;
            // A renewal that hangs (an apiserver that accepts and never answers) must not
            // outlive the deadline: another replica may lead after it.
            let deadline = last_renewal + self.timing.renew_deadline;
            let Ok(renewed) = tokio::time::timeout_at(deadline, self.try_once()).await else {
                warn!(lease = %self.name, "the lease renewal did not answer in time");
                return;
            };
            match renewed {
                Ok(true) => last_renewal = tokio::time::Instant::now(),
                Ok(false) => {
                    warn!(lease = %self.name, "another replica took the lease");
                    return;
                }
                Err(e) => warn!(lease = %self.name, error = %e, "cannot renew the lease"),
            }
            if last_renewal.elapsed() > self.timing.renew_deadline {
                warn!(lease = %self.name, "the lease was not renewed in time");
                return;
            }
        }
    }

    /// Gives the Lease up (on shutdown), so another replica need not wait for it to expire.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return;
        }
        spec.holder_identity = None;
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.name, "lease released"),
            Err(e) => warn!(lease = %self.name, error = %e, "cannot release the lease"),
        }
    }

    /// One look at the Lease and the write its step asks for; whether we hold it after.
    async fn try_once(&self) -> Result<bool, kube::Error> {
        let current = self.api.get_opt(&self.name).await?;
        let now = Timestamp::now();
        let held = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: i32::try_from(self.timing.lease.as_secs()).ok(),
            acquire_time: acquired.or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        };
        match step(current.as_ref(), &self.identity, now) {
            Step::Wait { .. } => Ok(false),
            Step::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(held(0, None)),
                };
                written(self.api.create(&PostParams::default(), &lease).await)
            }
            step => {
                let mut lease = current.unwrap_or_default();
                let spec = lease.spec.clone().unwrap_or_default();
                lease.spec = Some(if step == Step::Renew {
                    held(spec.lease_transitions.unwrap_or(0), spec.acquire_time)
                } else {
                    held(spec.lease_transitions.unwrap_or(0) + 1, None)
                });
                // `resourceVersion` as read: a concurrent write makes this one fail.
                debug!(lease = %lease.name_any(), ?step, "writing the lease");
                written(
                    self.api
                        .replace(&self.name, &PostParams::default(), &lease)
                        .await,
                )
            }
        }
    }
}

/// A write that lost a race (409) means another replica holds the Lease.
fn written(result: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: &str, seconds: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                renew_time: Some(MicroTime(renewed.parse().expect("a time"))),
                lease_duration_seconds: Some(seconds),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_lease_is_taken_only_when_free_or_expired() {
        let now: Timestamp = "2026-11-30T08:00:20Z".parse().expect("a time");
        assert_eq!(step(None, "a", now), Step::Create);
        let mine = lease(Some("a"), "2026-11-30T08:00:10Z", 15);
        assert_eq!(step(Some(&mine), "a", now), Step::Renew);
        let current = lease(Some("b"), "2026-11-30T08:00:10Z", 15);
        assert_eq!(
            step(Some(&current), "a", now),
            Step::Wait {
                holder: "b".to_string()
            }
        );
        let expired = lease(Some("b"), "2026-11-30T08:00:04Z", 15);
        assert_eq!(step(Some(&expired), "a", now), Step::TakeOver);
        let released = lease(None, "2026-11-30T08:00:19Z", 15);
        assert_eq!(step(Some(&released), "a", now), Step::TakeOver);
    }
}
