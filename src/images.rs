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
    let tag = tag(image)?;
    let version = tag.strip_prefix('v').unwrap_or(tag);
    version
        .split('.')
        .next()
        .is_some_and(|major| major.parse::<u32>().is_ok())
        .then(|| format!("v{version}"))
}

/// The tag of an image reference, by the distribution spec's grammar
/// (`reference := name [":" tag] ["@" digest]`, `name := [domain "/"] path`,
/// `tag := [\w][\w.-]{0,127}`): what follows the last `:` of the last path component. Not
/// a regex: the `oci-spec` crate's reference regex took 20 MiB to compile and kept 7 MiB,
/// a third of the operator's heap (`docs/performance.md`).
fn tag(image: &str) -> Option<&str> {
    let name_and_tag = image.split_once('@').map_or(image, |(before, _)| before);
    let last = name_and_tag.rsplit('/').next()?;
    let (_, tag) = last.split_once(':')?;
    let name = &name_and_tag[..name_and_tag.len() - tag.len() - 1];
    let name_ok = !name.is_empty()
        && name.split('/').all(|component| !component.is_empty())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/:".contains(c));
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let tag_ok = tag.len() <= 128
        && tag.starts_with(word)
        && tag.chars().all(|c| word(c) || c == '.' || c == '-');
    (name_ok && tag_ok).then_some(tag)
}

/// Every image a `Clair` runs, with the field that sets it (defaults included).
pub fn clair_images(spec: &ClairSpec) -> Vec<(String, String)> {
    let mut images = vec![("spec.image".to_string(), render::clair::image(spec))];
    let overrides = [
        ("indexer", spec.indexer.as_deref()),
        ("matcher", spec.matcher.as_deref()),
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
        assert_eq!(version("bad name:4.9.0"), None, "a name with a space");
        assert_eq!(
            version("clair:4.9.0").as_deref(),
            Some("v4.9.0"),
            "no domain"
        );
        assert_eq!(version("clair:4.9.0:1"), None, "a tag with a colon");
        assert_eq!(
            version(&format!("clair:4{}", "0".repeat(128))),
            None,
            "over 128"
        );
        assert_eq!(
            version("clair:.4"),
            None,
            "a tag starts with a word character"
        );
        assert_eq!(version("registry:5000/clair"), None, "a port is no tag");
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
