//! The custom resources of group `clair.projectquay.io`, version `v1alpha1`: `Clair` (the
//! batteries-included entry point) and the three Clair services it owns, `Indexer`, `Matcher`
//! and `Notifier`. Types only: behaviour lives in the machine, render and controller modules.

pub mod bounds;
pub mod clair;
pub mod common;
pub mod decode;
pub mod labels;
pub mod names;
pub mod service;

pub use clair::{Clair, ClairSpec, ClairStatus};
pub use common::{
    AutoscalingEngine, ConfigSource, ConfigSpec, KedaAutoscaling, KeyReference, OtlpProtocol,
    Phase, ServiceStatus, TracingSpec,
};
pub use service::{Indexer, Matcher, Notifier, ServiceKind, ServiceSpec};

/// The API group of every custom resource here.
pub const GROUP: &str = "clair.projectquay.io";
/// The only served and stored version.
pub const VERSION: &str = "v1alpha1";

/// The Clair image run when a resource names none: the release these configs are checked
/// against (see `../shared/notes/clair-config.md`).
pub const DEFAULT_IMAGE: &str = "quay.io/projectquay/clair:4.9.0";

/// Labels and annotations on ConfigMaps and Secrets. The design discussion (the seed) spelled
/// them `projectquay.io/clair/NAME`, which Kubernetes refuses (a key has at most one `/`);
/// they live under the API group's domain instead (see `docs/decisions.md`).
pub mod keys {
    /// Label: the validating webhook checks the config under the [`CONFIG`] key.
    pub const VALIDATE_CONFIG: &str = "clair.projectquay.io/validate-config";
    /// Annotation: which key of the object holds a Clair config.
    pub const CONFIG: &str = "clair.projectquay.io/config";
    /// Label: the templating webhook resolves `secret://` and `configmap://` references.
    pub const TEMPLATE_CONFIG: &str = "clair.projectquay.io/template-config";
    /// Annotation: the key read by the templating webhook.
    pub const TEMPLATE_INPUT: &str = "clair.projectquay.io/template-input";
    /// Annotation: the key written by the templating webhook.
    pub const TEMPLATE_OUTPUT: &str = "clair.projectquay.io/template-output";
    /// Pod annotation of a `Clair`'s services on a managed database: the UID of the engine's
    /// pod they connect to. A replaced engine changes it, which rolls them.
    pub const DATABASE_POD: &str = "clair.projectquay.io/database-pod";
}

#[cfg(test)]
mod tests {
    /// The controllers' caches hold every resource in full; a spec's optional sections are
    /// boxed so an absent one costs a pointer (inline, `ClairSpec` was 4.5 KiB: 4.5 MiB at
    /// 1,000 Clairs, mostly empty).
    #[test]
    fn a_cached_resource_is_small_when_its_optional_sections_are_absent() {
        use std::mem::size_of;
        let (clair, indexer) = (
            size_of::<super::clair::Clair>(),
            size_of::<super::service::Indexer>(),
        );
        eprintln!("Clair {clair} bytes, Indexer {indexer} bytes");
        assert!(clair <= 2048, "Clair: {clair} bytes");
        assert!(indexer <= 1024, "Indexer: {indexer} bytes");
    }
}
