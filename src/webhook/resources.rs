//! Checks of the four custom resources that the schema cannot express. What the operator
//! cannot act on is refused; what may still be fixed (a ConfigMap created after the
//! resource, a config being edited) comes back as warnings.

use kube::api::DynamicObject;

use super::validate::Verdict;
use crate::api::{Clair, ConfigSource, Indexer, Matcher, Notifier, ServiceSpec};
use crate::images;
use crate::platform::Platform;

/// What the cluster holds, as far as the checks need it: the text of a referenced key, or
/// why there is none; `None` when it was not read (a caller who is not known to be the
/// apiserver is told nothing about the cluster: `webhook::callers`).
pub trait Lookup {
    fn get(&self, source: &ConfigSource) -> Option<Result<String, String>>;
}

fn service_checks(
    spec: &ServiceSpec,
    mode: crate::api::ServiceKind,
    lookup: &impl Lookup,
    warnings: &mut Vec<String>,
) {
    let sources = std::iter::once(&spec.config.root).chain(&spec.config.dropins);
    let mut documents = Vec::new();
    for source in sources {
        match lookup.get(source) {
            None => {}
            Some(Ok(text)) => documents.push(crate::clairconfig::Document {
                name: source
                    .key()
                    .map(|k| format!("{} key {}", k.name, k.key))
                    .unwrap_or_default(),
                key: source.key().map(|k| k.key.clone()).unwrap_or_default(),
                text,
                secret: source.secret.is_some(),
            }),
            Some(Err(missing)) => warnings.push(format!(
                "{missing}: the service stays Pending until it exists"
            )),
        }
    }
    if documents.len() == 1 + spec.config.dropins.len() {
        let (root, dropins) = documents.split_at(1);
        for error in crate::clairconfig::check(&root[0], dropins, mode).errors() {
            warnings.push(format!(
                "the config is invalid in {} mode: {error}; it will not be rolled out",
                mode.as_str()
            ));
        }
    }
    if let Some(autoscaling) = &spec.autoscaling {
        let resources = spec.pod.resources.as_ref();
        let requests = resources.and_then(|r| r.requests.as_ref());
        warnings.extend(unbounded_memory("", resources));
        for (target, resource) in [
            (autoscaling.target_cpu_utilization_percentage, "cpu"),
            (autoscaling.target_memory_utilization_percentage, "memory"),
        ] {
            if target.is_some() && !requests.is_some_and(|r| r.contains_key(resource)) {
                warnings.push(format!(
                    "autoscaling targets {resource} utilization but pod.resources.requests.{resource} is unset: the autoscaler cannot compute it"
                ));
            }
        }
    }
}

/// The warning for an autoscaled service whose resources (at `path`, empty for a service
/// resource's own `pod`) name no memory limit. Without resources the operator sets a limit
/// of its own; with them, the spec's are used as they are.
fn unbounded_memory(
    path: &str,
    resources: Option<&k8s_openapi::api::core::v1::ResourceRequirements>,
) -> Option<String> {
    let limited = |r: &k8s_openapi::api::core::v1::ResourceRequirements| {
        r.limits.as_ref().is_some_and(|l| l.contains_key("memory"))
    };
    resources.filter(|r| !limited(r)).map(|_| {
        format!(
            "the service autoscales but {path}pod.resources.limits.memory is unset: Clair sets no GOMEMLIMIT and nothing bounds one pod's memory (a matcher holds every report in flight whole); set a limit (docs/autoscaling.md)"
        )
    })
}

/// One of the operator's resources, decoded once per admission.
pub enum Resource {
    Indexer(Indexer),
    Matcher(Matcher),
    Notifier(Notifier),
    Clair(Box<Clair>),
}

impl Resource {
    /// Decodes `object` as `kind`; `None` for a kind the checks do not cover, an error
    /// naming what does not fit the schema.
    pub fn decode(object: &DynamicObject, kind: &str) -> Result<Option<Self>, String> {
        let value =
            serde_json::to_value(object).map_err(|e| format!("cannot read the object: {e}"))?;
        use crate::api::decode::named;
        // Before anything is read for it: the apiserver sends nothing over these bounds.
        if let Some(refusal) = crate::api::bounds::exceeded(kind, &value) {
            return Err(format!(
                "{refusal}: the apiserver admits no such {kind}, so this review is not its"
            ));
        }
        let decoded = match kind {
            "Indexer" => named(kind, value).map(Self::Indexer),
            "Matcher" => named(kind, value).map(Self::Matcher),
            "Notifier" => named(kind, value).map(Self::Notifier),
            "Clair" => named(kind, value).map(|c| Self::Clair(Box::new(c))),
            _ => return Ok(None),
        };
        decoded
            .map(Some)
            .map_err(|e| format!("the {kind} does not match its schema: {e}"))
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::Indexer(_) => "Indexer",
            Self::Matcher(_) => "Matcher",
            Self::Notifier(_) => "Notifier",
            Self::Clair(_) => "Clair",
        }
    }

    pub fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        use kube::Resource as _;
        match self {
            Self::Indexer(o) => o.meta(),
            Self::Matcher(o) => o.meta(),
            Self::Notifier(o) => o.meta(),
            Self::Clair(o) => o.meta(),
        }
    }

    /// The service spec and its mode, for the three services.
    fn service(&self) -> Option<(&ServiceSpec, crate::api::ServiceKind)> {
        use crate::api::ServiceKind;
        match self {
            Self::Indexer(o) => Some((&o.spec.service, ServiceKind::Indexer)),
            Self::Matcher(o) => Some((&o.spec.service, ServiceKind::Matcher)),
            Self::Notifier(o) => Some((&o.spec.service, ServiceKind::Notifier)),
            Self::Clair(_) => None,
        }
    }

    /// Every ConfigMap or Secret key the resource names, for fetching before [`check`].
    pub fn sources(&self) -> Vec<ConfigSource> {
        if let Some((spec, _)) = self.service() {
            return std::iter::once(spec.config.root.clone())
                .chain(spec.config.dropins.iter().cloned())
                .collect();
        }
        let Self::Clair(clair) = self else {
            return Vec::new();
        };
        let mut all = clair.spec.dropins.clone();
        if let Some(external) = &clair.spec.database.external {
            let secrets = [
                Some(&external.indexer),
                Some(&external.matcher),
                external.notifier.as_ref(),
            ];
            all.extend(secrets.into_iter().flatten().map(|k| ConfigSource {
                config_map: None,
                secret: Some(k.clone()),
            }));
        }
        all.extend(quay_psk(clair));
        all
    }

    /// The Secrets other than config sources the operator reads for the resource: the
    /// tracing headers (copied into the pods' config), and a `Clair`'s CA bundles
    /// (`spec.pod` and each service's `pod`, to check its external databases).
    pub fn other_secrets(&self) -> Vec<String> {
        let (tracing, pods) = match self {
            Self::Clair(clair) => {
                let spec = &clair.spec;
                let services = [
                    spec.indexer.as_deref(),
                    spec.matcher.as_deref(),
                    spec.notifier.as_ref().map(|n| &n.service),
                ];
                let pods: Vec<_> = services
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.pod.as_ref())
                    .chain(spec.pod.as_deref())
                    .collect();
                (spec.tracing.as_ref(), pods)
            }
            _ => match self.service() {
                Some((spec, _)) => (spec.tracing.as_ref(), Vec::new()),
                None => (None, Vec::new()),
            },
        };
        let mut names: Vec<String> = pods
            .into_iter()
            .filter_map(|pod| pod.ca_bundle.as_ref()?.secret.clone())
            .chain(tracing.and_then(|t| t.headers_secret.clone()))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// The verdict on a decoded resource.
pub fn check(resource: &Resource, lookup: &impl Lookup, platform: &Platform) -> Verdict {
    let mut warnings = Vec::new();
    let refused = match resource.service() {
        Some((spec, mode)) => {
            service_checks(spec, mode, lookup, &mut warnings);
            (platform.images)
                .refusal(&images::service_images(spec))
                .or_else(|| tracing_refusal(spec.tracing.as_ref()))
                .or_else(|| platform.prometheus_refusal(spec.autoscaling.as_deref(), "spec"))
        }
        None => match resource {
            Resource::Clair(clair) => {
                clair_checks(clair, lookup, &mut warnings);
                (platform.images)
                    .refusal(&images::clair_images(&clair.spec))
                    .or_else(|| tracing_refusal(clair.spec.tracing.as_ref()))
                    .or_else(|| clair_prometheus_refusal(&clair.spec, platform))
            }
            _ => None,
        },
    };
    Verdict {
        denied: refused,
        warnings,
    }
}

/// The notifier intervals under a minute that a Clair's drop-ins set, merged in order (a
/// later one may put right an earlier one). A Clair's root config is the operator's own
/// (YAML), so only `.yaml` drop-ins merge into it; the whole merged config is checked by
/// the reconcile, which keeps it from rolling out (`ConfigValid`).
fn dropin_intervals(dropins: Vec<(&ConfigSource, String)>) -> Vec<String> {
    use crate::clairconfig::{self, DropinKind, Format};
    let mut merged = serde_json::Value::Object(Default::default());
    for (dropin, text) in dropins {
        let Some(key) = dropin.key() else { continue };
        if clairconfig::dropin_kind(Format::Yaml, &key.key) != DropinKind::MergePatch {
            continue;
        }
        let document = clairconfig::Document {
            name: format!("{} key {}", dropin.describe(), key.key),
            key: key.key.clone(),
            text,
            secret: dropin.secret.is_some(),
        };
        if let Ok(patch) = clairconfig::parse(&document, Format::Yaml) {
            json_patch::merge(&mut merged, &patch);
        }
    }
    let serde_json::Value::Object(config) = merged else {
        return Vec::new();
    };
    clairconfig::notifier_intervals(&config)
        .into_iter()
        .map(|problem| {
            format!("the drop-ins set {problem}; the Clair's config will not be rolled out")
        })
        .collect()
}

/// A `tracing` Clair could not export to: refused, since no later edit of another object
/// can make it work.
fn tracing_refusal(tracing: Option<&crate::api::TracingSpec>) -> Option<String> {
    crate::render::traces::exporter(tracing?).err()
}

/// A KEDA address of any of a Clair's services that KEDA must not be given.
fn clair_prometheus_refusal(spec: &crate::api::ClairSpec, platform: &Platform) -> Option<String> {
    use strum::VariantArray;
    crate::api::ServiceKind::VARIANTS.iter().find_map(|&role| {
        platform.prometheus_refusal(
            spec.overrides(role)?.autoscaling.as_ref(),
            &format!("spec.{role}"),
        )
    })
}

fn clair_checks(clair: &Clair, lookup: &impl Lookup, warnings: &mut Vec<String>) {
    let spec = &clair.spec;
    let mut found = Vec::new();
    for dropin in &spec.dropins {
        match lookup.get(dropin) {
            Some(Err(missing)) => warnings.push(format!(
                "{missing}: the Clair stays Pending until it exists"
            )),
            Some(Ok(text)) => found.push((dropin, text)),
            None => {}
        }
    }
    let notifier = spec
        .notifier
        .as_ref()
        .and_then(|n| n.enabled)
        .unwrap_or(true);
    if notifier {
        warnings.extend(dropin_intervals(found));
    }
    if let Some(external) = &spec.database.external {
        let services = [
            ("indexer", Some(&external.indexer)),
            ("matcher", Some(&external.matcher)),
            ("notifier", external.notifier.as_ref()),
        ];
        for (service, reference) in services {
            let Some(reference) = reference else { continue };
            let source = ConfigSource {
                config_map: None,
                secret: Some(reference.clone()),
            };
            if let Some(Err(missing)) = lookup.get(&source) {
                warnings.push(format!("the {service} connection string: {missing}"));
            }
        }
    }
    // Each autoscaled service's resources, its own over `spec.pod`'s, as its child gets them.
    let shared = spec.pod.as_deref().cloned().unwrap_or_default();
    for (name, service) in [
        ("indexer", spec.indexer.as_deref()),
        ("matcher", spec.matcher.as_deref()),
        ("notifier", spec.notifier.as_ref().map(|n| &n.service)),
    ] {
        let Some(service) = service.filter(|s| s.autoscaling.is_some()) else {
            continue;
        };
        let pod = service.pod.clone().unwrap_or_default().over(&shared);
        warnings.extend(unbounded_memory(
            &format!("spec.{name}.pod (or spec.pod): "),
            pod.resources.as_ref(),
        ));
    }
    if let Some(source) = quay_psk(clair) {
        use base64::Engine;
        match lookup.get(&source) {
            Some(Err(missing)) => warnings.push(format!(
                "spec.quay.psk: {missing}: the Clair stays Pending until it exists"
            )),
            Some(Ok(key))
                if base64::engine::general_purpose::STANDARD
                    .decode(key.trim())
                    .is_err() =>
            {
                warnings.push(
                    "spec.quay.psk: the key is not standard base64, as Quay's \
                     SECURITY_SCANNER_V4_PSK and Clair's auth.psk.key are: Clair refuses it"
                        .to_string(),
                )
            }
            _ => {}
        }
    }
    let notifier_disabled = spec.notifier.as_ref().and_then(|n| n.enabled) == Some(false);
    if notifier_disabled
        && spec
            .notifier
            .as_ref()
            .is_some_and(|n| n.service != Default::default())
    {
        warnings.push("notifier settings are ignored while notifier.enabled is false".to_string());
    }
}

/// The Secret key of the PSK a Quay signs with, when the `Clair` names one.
fn quay_psk(clair: &Clair) -> Option<ConfigSource> {
    let reference = clair.spec.quay.as_ref()?.psk.as_ref()?;
    Some(ConfigSource {
        config_map: None,
        secret: Some(reference.clone()),
    })
}

/// Keys fetched ahead of the checks.
pub struct Fetched(pub Vec<(ConfigSource, Result<String, String>)>);

impl Lookup for Fetched {
    fn get(&self, source: &ConfigSource) -> Option<Result<String, String>> {
        self.0
            .iter()
            .find(|(s, _)| s == source)
            .map(|(_, r)| r.clone())
    }
}

/// Nothing read: the checks of what the request itself holds.
pub struct Unread;

impl Lookup for Unread {
    fn get(&self, _: &ConfigSource) -> Option<Result<String, String>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::ImagePolicy;
    use serde_json::{Value, json};

    struct Cluster(Vec<(String, String)>);

    impl Lookup for Cluster {
        fn get(&self, source: &ConfigSource) -> Option<Result<String, String>> {
            let Some(key) = source.key() else {
                return Some(Err("no reference".to_string()));
            };
            Some(
                self.0
                    .iter()
                    .find(|(name, _)| *name == key.name)
                    .map(|(_, text)| text.clone())
                    .ok_or_else(|| format!("{} does not exist", key.name)),
            )
        }
    }

    fn check(
        object: &DynamicObject,
        kind: &str,
        lookup: &impl Lookup,
        images: &ImagePolicy,
    ) -> Verdict {
        let resource = Resource::decode(object, kind).unwrap().unwrap();
        let platform = Platform {
            images: images.clone(),
            ..Default::default()
        };
        super::check(&resource, lookup, &platform)
    }

    fn indexer(extra: Value) -> DynamicObject {
        let mut spec =
            json!({"config": {"root": {"configMap": {"name": "cfg", "key": "config.yaml"}}}});
        json_patch::merge(&mut spec, &extra);
        serde_json::from_value(json!({"apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Indexer", "metadata": {"name": "i"}, "spec": spec})).unwrap()
    }

    #[test]
    fn a_tracing_endpoint_clair_cannot_export_to_is_refused_naming_the_field() {
        let cluster = Cluster(vec![]);
        let verdict = |tracing: Value| {
            check(
                &indexer(json!({"tracing": tracing})),
                "Indexer",
                &cluster,
                &ImagePolicy::default(),
            )
        };
        let good = verdict(json!({"endpoint": "http://jaeger.observability:4318"}));
        assert_eq!(good.denied, None);
        let named =
            indexer(json!({"tracing": {"endpoint": "http://j:4318", "headersSecret": "h"}}));
        let resource = Resource::decode(&named, "Indexer").unwrap().unwrap();
        assert_eq!(
            resource.other_secrets(),
            ["h"],
            "the writer must be able to read it"
        );
        let bad = verdict(json!({"endpoint": "http://jaeger.observability"}));
        assert!(
            bad.denied
                .as_deref()
                .is_some_and(|d| d.contains("spec.tracing.endpoint")),
            "{:?}",
            bad.denied
        );
    }

    #[test]
    fn a_missing_config_is_a_warning_and_an_invalid_one_says_why() {
        let v = check(
            &indexer(json!({})),
            "Indexer",
            &Cluster(vec![]),
            &ImagePolicy::default(),
        );
        assert_eq!(v.denied, None);
        assert!(
            v.warnings[0].contains("cfg does not exist"),
            "{:?}",
            v.warnings
        );
        let v = check(
            &indexer(json!({})),
            "Indexer",
            &Cluster(vec![("cfg".into(), "indexr: {}".into())]),
            &ImagePolicy::default(),
        );
        assert!(
            v.warnings[0].contains("invalid in indexer mode: indexr: unknown key"),
            "{:?}",
            v.warnings
        );
        let v = check(
            &indexer(json!({})),
            "Indexer",
            &Cluster(vec![("cfg".into(), "log_level: info".into())]),
            &ImagePolicy::default(),
        );
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    }

    #[test]
    fn an_image_outside_the_allow_list_is_refused() {
        let policy = ImagePolicy::new(["quay.io/projectquay/".to_string()]);
        let lookup = Cluster(vec![("cfg".into(), "log_level: info".into())]);
        let v = check(&indexer(json!({})), "Indexer", &lookup, &policy);
        assert_eq!(v.denied, None, "the default image is allowed");
        let v = check(
            &indexer(json!({"image": "evil.example/clair:1"})),
            "Indexer",
            &lookup,
            &policy,
        );
        assert!(
            v.denied
                .as_deref()
                .is_some_and(|d| d.contains("spec.image evil.example/clair:1")),
            "{v:?}"
        );
    }

    #[test]
    fn unread_sources_tell_nothing_and_the_request_is_still_checked() {
        let policy = ImagePolicy::new(["quay.io/projectquay/".to_string()]);
        let v = check(&indexer(json!({})), "Indexer", &Unread, &policy);
        assert_eq!(v.denied, None);
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
        let v = check(
            &indexer(json!({"image": "evil.example/clair:1"})),
            "Indexer",
            &Unread,
            &policy,
        );
        assert!(v.denied.is_some(), "{v:?}");
    }

    #[test]
    fn cpu_targets_need_cpu_requests() {
        let v = check(
            &indexer(
                json!({"autoscaling": {"maxReplicas": 3, "targetCPUUtilizationPercentage": 70}}),
            ),
            "Indexer",
            &Cluster(vec![("cfg".into(), String::new())]),
            &ImagePolicy::default(),
        );
        assert!(
            v.warnings
                .iter()
                .any(|w| w.contains("requests.cpu is unset")),
            "{:?}",
            v.warnings
        );
    }

    #[test]
    fn an_autoscaled_pod_with_resources_but_no_memory_limit_is_warned() {
        let warned = |pod: Value| {
            let v = check(
                &indexer(json!({"autoscaling": {"maxReplicas": 3}, "pod": pod})),
                "Indexer",
                &Cluster(vec![("cfg".into(), String::new())]),
                &ImagePolicy::default(),
            );
            v.warnings
                .iter()
                .any(|w| w.contains("limits.memory is unset"))
        };
        assert!(warned(
            json!({"resources": {"requests": {"memory": "1Gi"}}})
        ));
        assert!(!warned(json!({"resources": {"limits": {"memory": "1Gi"}}})));
        assert!(
            !warned(json!({})),
            "without resources the operator sets one"
        );
    }

    #[test]
    fn a_clairs_autoscaled_service_with_resources_but_no_memory_limit_is_warned() {
        let warned = |spec: Value| {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Clair",
                "metadata": {"name": "c"}, "spec": spec,
            }))
            .unwrap();
            let v = check(&object, "Clair", &Cluster(vec![]), &ImagePolicy::default());
            v.warnings
                .iter()
                .any(|w| w.contains("spec.matcher.pod (or spec.pod): pod.resources.limits.memory"))
        };
        let autoscaled = json!({"autoscaling": {"maxReplicas": 3}});
        let requests = json!({"resources": {"requests": {"memory": "1Gi"}}});
        let limited = json!({"resources": {"limits": {"memory": "1Gi"}}});
        let database = json!({"managed": {}});
        assert!(warned(
            json!({"database": database, "pod": requests, "matcher": autoscaled})
        ));
        assert!(!warned(
            json!({"database": database, "pod": limited, "matcher": autoscaled})
        ));
        assert!(
            !warned(json!({"database": database, "pod": requests})),
            "not autoscaled"
        );
        assert!(
            !warned(json!({"database": database, "matcher": autoscaled})),
            "without resources the operator sets a limit"
        );
    }

    #[test]
    fn a_clairs_dropin_with_a_notifier_interval_under_a_minute_is_warned() {
        let clair = |key: &str, extra: Value| -> DynamicObject {
            let mut spec = json!({"database": {"managed": {}},
                "dropins": [{"configMap": {"name": "quay", "key": key}},
                    {"configMap": {"name": "later", "key": "later.yaml"}}]});
            json_patch::merge(&mut spec, &extra);
            serde_json::from_value(json!({
                "apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Clair",
                "metadata": {"name": "c"}, "spec": spec,
            }))
            .unwrap()
        };
        let warnings_with = |key: &str, text: &str, later: &str, extra: Value| {
            check(
                &clair(key, extra),
                "Clair",
                &Cluster(vec![
                    ("quay".into(), text.into()),
                    ("later".into(), later.into()),
                ]),
                &ImagePolicy::default(),
            )
            .warnings
        };
        let warnings = |key: &str, text: &str| warnings_with(key, text, "", json!({}));
        let found = warnings(
            "quay.yaml",
            "notifier: {poll_interval: 5m, delivery_interval: 30s}",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .starts_with("the drop-ins set notifier.delivery_interval: 30s is under a minute")
                && found[0].contains("not be rolled out"),
            "{found:?}"
        );
        assert!(warnings("quay.yaml", "notifier: {delivery_interval: 1m}").is_empty());
        assert!(
            warnings("quay.json", "notifier: {delivery_interval: 0s}").is_empty(),
            "a .json drop-in does not merge into the Clair's YAML root"
        );
        let bad = "notifier: {delivery_interval: 30s}";
        assert!(
            warnings_with(
                "quay.yaml",
                bad,
                "notifier: {delivery_interval: 5m}",
                json!({})
            )
            .is_empty(),
            "a later drop-in puts it right"
        );
        assert!(
            warnings_with(
                "quay.yaml",
                bad,
                "",
                json!({"notifier": {"enabled": false}})
            )
            .is_empty(),
            "no notifier runs"
        );
    }
}
