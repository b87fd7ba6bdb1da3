//! What the cluster serves beyond core Kubernetes (ServiceMonitor today; Routes and Gateway
//! API with the Clair controller), checked through discovery and re-checked after a while,
//! so an API installed after the operator started is picked up without a restart.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;

const RECHECK: Duration = Duration::from_secs(60);

pub struct Capabilities {
    client: Client,
    service_monitor: Mutex<Option<(bool, Instant)>>,
}

impl Capabilities {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            service_monitor: Mutex::new(None),
        }
    }

    /// Whether `monitoring.coreos.com/v1` ServiceMonitors are served.
    pub async fn service_monitor(&self) -> bool {
        if let Ok(guard) = self.service_monitor.lock()
            && let Some((known, at)) = *guard
            && at.elapsed() < RECHECK
        {
            return known;
        }
        let served = match self
            .client
            .list_api_group_resources("monitoring.coreos.com/v1")
            .await
        {
            Ok(list) => list.resources.iter().any(|r| r.name == "servicemonitors"),
            Err(_) => false,
        };
        if let Ok(mut guard) = self.service_monitor.lock() {
            *guard = Some((served, Instant::now()));
        }
        served
    }
}
