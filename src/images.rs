//! Which container images resources may run. Whoever writes a `Clair` or a service resource
//! chooses its images; a platform team that lets tenants write them can restrict the
//! repositories with `--allowed-images` (prefixes). The resource webhook refuses a resource
//! outside the list, and the controllers do not render one (its config is reported invalid),
//! so an image slipped in while the webhook was down never runs either.

use crate::api::{ClairSpec, ServiceSpec};
use crate::render;

/// An allow-list of image repository prefixes; empty allows every image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImagePolicy {
    prefixes: Vec<String>,
}

impl ImagePolicy {
    /// Allows images under any of `prefixes` (`quay.io/projectquay/`, `registry.example/clair`).
    pub fn new(prefixes: impl IntoIterator<Item = String>) -> Self {
        ImagePolicy {
            prefixes: prefixes
                .into_iter()
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .collect(),
        }
    }

    /// Whether `image` is under an allowed prefix. A prefix matches whole path segments:
    /// `quay.io/projectquay` allows `quay.io/projectquay/clair:4.9.0`, not
    /// `quay.io/projectquay-evil/clair`; a bare registry host (`registry.example`) allows
    /// its repositories, not `registry.example:5000/...`, another registry.
    pub fn allows(&self, image: &str) -> bool {
        self.prefixes.is_empty()
            || self.prefixes.iter().any(|prefix| {
                image.strip_prefix(prefix.as_str()).is_some_and(|rest| {
                    // After a repository, `:` starts a tag and `@` a digest; after a host,
                    // `:` would start a port.
                    let repository = prefix.contains('/');
                    rest.is_empty()
                        || prefix.ends_with('/')
                        || rest.starts_with('/')
                        || (repository && rest.starts_with([':', '@']))
                })
            })
    }

    /// Why the images of a resource are refused (`field: image`), or `None`.
    pub fn refusal(&self, images: &[(String, String)]) -> Option<String> {
        let refused: Vec<String> = images
            .iter()
            .filter(|(_, image)| !self.allows(image))
            .map(|(field, image)| format!("{field} {image}"))
            .collect();
        (!refused.is_empty()).then(|| {
            format!(
                "{} outside the repositories this cluster allows ({}): use an image from one of \
                 them, or ask the platform team to add yours to the operator's --allowed-images",
                refused.join(", "),
                self.prefixes.join(", ")
            )
        })
    }
}

/// The Clair version an image names by its tag (`quay.io/projectquay/clair:4.9.0` →
/// `v4.9.0`, `registry:5000/clair:v4.8.1` → `v4.8.1`), parsed as the distribution spec reads
/// a reference. `None` for no tag, a digest alone or a tag that is no version (`latest`): no
/// upgrade steps can be derived from those.
pub fn version(image: &str) -> Option<String> {
    let reference: oci_spec::distribution::Reference = image.parse().ok()?;
    let tag = reference.tag()?;
    let version = tag.strip_prefix('v').unwrap_or(tag);
    version
        .split('.')
        .next()
        .is_some_and(|major| major.parse::<u32>().is_ok())
        .then(|| format!("v{version}"))
}

/// Every image a `Clair` runs, with the field that sets it (defaults included).
pub fn clair_images(spec: &ClairSpec) -> Vec<(String, String)> {
    let mut images = vec![("spec.image".to_string(), render::clair::image(spec))];
    let overrides = [
        ("indexer", spec.indexer.as_ref()),
        ("matcher", spec.matcher.as_ref()),
        ("notifier", spec.notifier.as_ref().map(|n| &n.service)),
    ];
    for (service, overrides) in overrides {
        if let Some(image) = overrides.and_then(|o| o.image.clone()) {
            images.push((format!("spec.{service}.image"), image));
        }
    }
    if let Some(managed) = &spec.database.managed {
        images.push((
            "spec.database.managed.image".to_string(),
            render::database::engine_image(managed),
        ));
    }
    images
}

/// The image of a service resource (the default included).
pub fn service_images(spec: &ServiceSpec) -> Vec<(String, String)> {
    vec![("spec.image".to_string(), render::service::image(spec))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_whole_segments_and_an_empty_list_allows_all() {
        let policy = ImagePolicy::new([
            "quay.io/projectquay".to_string(),
            "registry.example/".into(),
        ]);
        assert!(policy.allows("quay.io/projectquay/clair:4.9.0"));
        assert!(policy.allows("registry.example/anything@sha256:abc"));
        assert!(!policy.allows("quay.io/projectquay-evil/clair:1"));
        assert!(!policy.allows("docker.io/evil/clair:1"));
        assert!(ImagePolicy::default().allows("anything"));
        let host = ImagePolicy::new(["registry.example".to_string()]);
        assert!(host.allows("registry.example/clair:4.9.0"));
        assert!(!host.allows("registry.example:5000/evil/clair:1"));
        assert!(!host.allows("registry.example.evil.com/clair:1"));
        let repository = ImagePolicy::new(["quay.io/projectquay/clair".to_string()]);
        assert!(repository.allows("quay.io/projectquay/clair:4.9.0"));
        assert!(repository.allows("quay.io/projectquay/clair@sha256:abc"));
    }

    #[test]
    fn versions_come_from_tags() {
        assert_eq!(
            version("quay.io/projectquay/clair:4.9.0").as_deref(),
            Some("v4.9.0")
        );
        assert_eq!(
            version("registry:5000/clair:v4.8.1").as_deref(),
            Some("v4.8.1")
        );
        let digest = format!("quay.io/projectquay/clair:4.9.0@sha256:{}", "a".repeat(64));
        assert_eq!(version(&digest).as_deref(), Some("v4.9.0"));
        assert_eq!(version("registry:5000/clair"), None);
        assert_eq!(version("clair:latest"), None);
        assert_eq!(version("clair@sha256:abc"), None);
        assert_eq!(version("not an image"), None);
    }

    #[test]
    fn a_refusal_names_each_field_and_image() {
        let policy = ImagePolicy::new(["quay.io/projectquay/".to_string()]);
        let spec: ClairSpec = serde_json::from_value(serde_json::json!({
            "image": "evil.example/clair:1",
            "database": {"managed": {}},
        }))
        .unwrap();
        let refusal = policy.refusal(&clair_images(&spec)).expect("refused");
        assert!(
            refusal.contains("spec.image evil.example/clair:1"),
            "{refusal}"
        );
        assert!(
            refusal.contains("spec.database.managed.image docker.io/library/postgres:17"),
            "{refusal}"
        );
        let allowed = ImagePolicy::new([
            "evil.example/".to_string(),
            "docker.io/library/postgres".into(),
        ]);
        assert_eq!(allowed.refusal(&clair_images(&spec)), None);
    }
}
