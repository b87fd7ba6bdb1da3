//! What the platform team lets tenants name, one set of rules kept twice: by the resource
//! webhook when a resource is written, and by the controllers before anything is rendered or
//! dialled (so what slipped past a webhook that was down is refused all the same). The
//! images resources may run (`--allowed-images`), the Prometheus origins KEDA may be given
//! (`--allowed-prometheus`), the networks the database checks may reach
//! (`--database-networks`, `--database-networks-refused`).

use crate::api::common::Autoscaling;
use crate::database::networks::Networks;
use crate::images::ImagePolicy;

/// The platform's rules for what tenants write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Platform {
    pub images: ImagePolicy,
    pub prometheus: Origins,
    pub databases: Networks,
}

impl Platform {
    /// Why a service's KEDA address cannot be given to KEDA (`prefix`: where the service's
    /// spec is, `spec` or `spec.indexer`): not an origin and a base path, or an origin the
    /// platform does not list. `None` when it may, or when there is none.
    pub fn prometheus_refusal(
        &self,
        autoscaling: Option<&Autoscaling>,
        prefix: &str,
    ) -> Option<String> {
        let keda = autoscaling?.keda.as_ref()?;
        let field = format!("{prefix}.autoscaling.keda.prometheusAddress");
        match crate::render::autoscaling::prometheus_address(&keda.prometheus_address, &field) {
            Err(refused) => Some(refused),
            Ok(address) => self.prometheus.refusal(&address, &field),
        }
    }
}

/// The origins (`scheme://host:port`) a KEDA address may name; any when empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origins {
    origins: Vec<String>,
}

impl Origins {
    /// The origins of `addresses` (`https://prometheus.monitoring.svc:9090`, a path after
    /// it ignored), or which one is none.
    pub fn parse(addresses: &[String]) -> Result<Self, String> {
        let mut origins = Vec::new();
        for address in addresses.iter().map(|a| a.trim()).filter(|a| !a.is_empty()) {
            let origin = origin(address).ok_or_else(|| {
                format!(
                    "--allowed-prometheus: {address:?} is not an http or https origin; give \
                     origins such as http://prometheus-operated.monitoring.svc:9090, separated \
                     by commas"
                )
            })?;
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        Ok(Origins { origins })
    }

    /// Why `address` (checked as an origin and a base path already) is refused, naming
    /// `field`, or `None`.
    fn refusal(&self, address: &str, field: &str) -> Option<String> {
        if self.origins.is_empty() || origin(address).is_some_and(|o| self.origins.contains(&o)) {
            return None;
        }
        Some(format!(
            "{field}: {address} is not a Prometheus this cluster lets KEDA query ({}): use one \
             of them, or ask the platform team to add yours to the operator's \
             --allowed-prometheus",
            self.origins.join(", ")
        ))
    }
}

/// `scheme://host:port` of an http or https URL, the port always written (so that
/// `http://p` and `http://p:80` are one origin).
fn origin(address: &str) -> Option<String> {
    let url = url::Url::parse(address).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    let host = url.host_str()?;
    let port = url.port_or_known_default()?;
    Some(format!("{}://{host}:{port}", url.scheme()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::{Autoscaling, KedaAutoscaling};

    fn autoscaling(address: &str) -> Autoscaling {
        Autoscaling {
            keda: Some(KedaAutoscaling {
                prometheus_address: address.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_keda_address_must_be_one_of_the_listed_origins() {
        let platform = Platform {
            prometheus: Origins::parse(&[
                "http://prometheus-operated.monitoring.svc:9090".to_string(),
                "https://thanos.example".to_string(),
            ])
            .unwrap(),
            ..Default::default()
        };
        for allowed in [
            "http://prometheus-operated.monitoring.svc:9090",
            "http://prometheus-operated.monitoring.svc:9090/prometheus",
            "https://thanos.example:443/",
        ] {
            let refused = platform.prometheus_refusal(Some(&autoscaling(allowed)), "spec");
            assert_eq!(refused, None, "{allowed}");
        }
        for refused in [
            "http://prometheus-operated.monitoring.svc:9091",
            "https://prometheus-operated.monitoring.svc:9090",
            "http://thanos.example",
            "http://prometheus-k8s.monitoring.svc:9090",
        ] {
            let why = platform
                .prometheus_refusal(Some(&autoscaling(refused)), "spec.indexer")
                .unwrap_or_else(|| panic!("{refused} passed"));
            assert!(
                why.starts_with("spec.indexer.autoscaling.keda.prometheusAddress: ")
                    && why.contains("--allowed-prometheus"),
                "{why}"
            );
        }
        // The shape is checked before the list, and with no list any origin is taken.
        let query = "http://prometheus-operated.monitoring.svc:9090/api/v1/query?query=up#";
        let why = platform
            .prometheus_refusal(Some(&autoscaling(query)), "spec")
            .unwrap_or_default();
        assert!(
            why.starts_with("spec.autoscaling.keda.prometheusAddress: ")
                && !why.contains("--allowed-prometheus"),
            "{why}"
        );
        let open = Platform::default();
        assert_eq!(
            open.prometheus_refusal(Some(&autoscaling("http://anywhere:1234")), "spec"),
            None
        );
        assert!(Origins::parse(&["ftp://p".to_string()]).is_err());
        assert!(Origins::parse(&["prometheus:9090".to_string()]).is_err());
    }
}
