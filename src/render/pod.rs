//! Pod and container settings every workload the operator runs shares: what the
//! `restricted` Pod Security Standard asks for.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};

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

/// A pod that runs as non-root under the runtime's default seccomp profile.
pub fn restricted_pod() -> PodSpec {
    PodSpec {
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
