//! Pod and container settings every workload the operator runs shares: what the
//! `restricted` Pod Security Standard asks for, and the user the pod runs as.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, ResourceRequirements, SeccompProfile,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A container that cannot gain privileges, runs as non-root with no capabilities and a
/// read-only root filesystem. Fill in the rest with `..restricted_container()`.
pub fn restricted_container() -> Container {
    Container {
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_string()]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `resources`, or requests of `cpu` and `memory` when none are given: a pod without
/// requests is scheduled as if it cost nothing and is the first evicted under pressure.
/// No CPU limit is added: it would throttle Clair's bursts and change its pool sizes (a
/// Clair service without resources gets a memory limit: `render::service`).
pub fn with_default_requests(
    resources: Option<ResourceRequirements>,
    cpu: &str,
    memory: &str,
) -> ResourceRequirements {
    resources.unwrap_or_else(|| ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.to_string())),
            ("memory".to_string(), Quantity(memory.to_string())),
        ])),
        ..Default::default()
    })
}

/// Who picks the numeric user a pod runs as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodUsers {
    /// Plain Kubernetes: the operator names the image's user by number. With
    /// `runAsNonRoot` and an image whose `USER` is a name (Clair's is `nobody`), the kubelet
    /// cannot verify the user is not root and refuses to start the container.
    #[default]
    Numeric,
    /// OpenShift: the restricted SecurityContextConstraints assign a user from the
    /// namespace's range, and refuse a pod that asks for one outside it.
    AssignedByPlatform,
}

/// The user `nobody` of Clair's image.
pub const CLAIR_UID: i64 = 65534;
/// The user `postgres` of the postgres image.
pub const POSTGRES_UID: i64 = 999;

/// A pod that runs as non-root under the runtime's default seccomp profile; as `uid` (user
/// and group, and the group owning its volumes) unless the platform assigns users. None of
/// the operator's pods talks to the apiserver: no ServiceAccount token is mounted.
pub fn restricted_pod(users: PodUsers, uid: i64) -> PodSpec {
    let numeric = (users == PodUsers::Numeric).then_some(uid);
    PodSpec {
        automount_service_account_token: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: numeric,
            run_as_group: numeric,
            fs_group: numeric,
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_kubernetes_gets_the_images_user_by_number_and_openshift_none() {
        let plain = restricted_pod(PodUsers::Numeric, CLAIR_UID)
            .security_context
            .unwrap();
        assert_eq!(plain.run_as_user, Some(65534));
        assert_eq!(plain.run_as_group, Some(65534));
        assert_eq!(plain.fs_group, Some(65534));
        assert_eq!(plain.run_as_non_root, Some(true));
        let openshift = restricted_pod(PodUsers::AssignedByPlatform, POSTGRES_UID)
            .security_context
            .unwrap();
        assert_eq!(openshift.run_as_user, None);
        assert_eq!(openshift.run_as_group, None);
        assert_eq!(openshift.fs_group, None);
        assert_eq!(openshift.run_as_non_root, Some(true));
        assert_eq!(
            restricted_pod(PodUsers::Numeric, CLAIR_UID).automount_service_account_token,
            Some(false)
        );
    }

    #[test]
    fn pods_without_resources_get_requests_and_given_ones_are_kept() {
        let defaulted = with_default_requests(None, "100m", "256Mi");
        let requests = defaulted.requests.unwrap();
        assert_eq!(requests["cpu"].0, "100m");
        assert_eq!(requests["memory"].0, "256Mi");
        assert!(defaulted.limits.is_none());
        let given = ResourceRequirements {
            limits: Some(BTreeMap::from([("cpu".into(), Quantity("2".into()))])),
            ..Default::default()
        };
        assert_eq!(
            with_default_requests(Some(given.clone()), "1", "1Gi"),
            given
        );
    }
}
