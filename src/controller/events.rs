//! Publishing Events without keeping them. kube's `Recorder` keeps every Event it published
//! for six minutes, to fold a repeat into a series; while 1,000 Clairs converge that is
//! about 9,000 Events, the largest single site of the operator's heap profile
//! (docs/performance.md). The operator's Events rarely repeat within six minutes (one per
//! phase transition; one per unreadable generation), so each is published through a fresh
//! recorder and nothing stays: a Clair flapping between two phases records an Event per
//! flip instead of a count on one.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};

pub struct Events {
    client: Client,
    reporter: Reporter,
}

impl Events {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Events { client, reporter }
    }

    /// Creates `event` about `regarding`.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        Recorder::new(self.client.clone(), self.reporter.clone())
            .publish(event, regarding)
            .await
    }
}
