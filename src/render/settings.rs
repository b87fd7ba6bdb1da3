//! The user's pod settings (`pod:` of a service, or of a `Clair` for every pod it runs)
//! applied to a pod the operator built: scheduling, pull secrets, identity, extra CAs, a
//! proxy, extra volumes, environment, labels and annotations. Whatever the operator sets
//! itself wins: its labels, its volumes and mounts, its own variables.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EnvVar, PodSpec, SecretVolumeSource, Volume, VolumeMount,
};

use crate::api::common::PodOverrides;

/// Always reached directly: the cluster's own names, whatever the proxy settings say.
const IN_CLUSTER: &str = "localhost,127.0.0.1,.svc,.svc.cluster.local,.cluster.local";

/// The volume of extra CA certificates, and where Clair reads them: a folder of the
/// `SSL_CERT_DIR` Clair's image sets.
const CA_BUNDLE_VOLUME: &str = "ca-bundle";
pub const CA_BUNDLE_DIR: &str = "/var/run/certs";

/// Names and paths the operator's own volumes use in some pod: the user's may not take them
/// (the CRD's schema refuses them, naming these).
pub const RESERVED_VOLUMES: [&str; 6] = [
    "config",
    "scratch",
    "tmp",
    "import",
    "export",
    CA_BUNDLE_VOLUME,
];
pub const RESERVED_MOUNT_PATHS: [&str; 6] = [
    "/config",
    "/var/tmp",
    "/tmp",
    "/import",
    "/export",
    CA_BUNDLE_DIR,
];

/// Applies `settings` to `pod`, whose first container is Clair's (or `clairctl`'s). Its
/// environment gets the proxy variables, then the user's, except those named in
/// `own_variables`.
pub fn apply(pod: &mut PodSpec, settings: &PodOverrides, own_variables: &[&str]) {
    if let Some(container) = pod.containers.first_mut() {
        apply_to_container(container, settings, own_variables);
    }
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    for volume in ca_bundle_volume(settings)
        .into_iter()
        .chain(settings.volumes.iter().cloned())
    {
        if !volumes.iter().any(|v| v.name == volume.name) {
            volumes.push(volume);
        }
    }
    pod.image_pull_secrets = non_empty_vec(&settings.image_pull_secrets);
    pod.service_account_name = settings.service_account_name.clone();
    pod.priority_class_name = settings.priority_class_name.clone();
    pod.node_selector = non_empty_map(&settings.node_selector);
    pod.tolerations = non_empty_vec(&settings.tolerations);
    pod.affinity = settings.affinity.clone();
    pod.topology_spread_constraints = non_empty_vec(&settings.topology_spread_constraints);
}

/// The container's part of [`apply`]: environment and mounts.
fn apply_to_container(container: &mut Container, settings: &PodOverrides, own_variables: &[&str]) {
    let mut env = container.env.take().unwrap_or_default();
    env.extend(proxy_env(settings));
    // The user's own variables last: where they name the same variable, theirs wins.
    env.extend(
        settings
            .env
            .iter()
            .filter(|e| !own_variables.contains(&e.name.as_str()))
            .cloned(),
    );
    container.env = non_empty_vec(&env);
    mount(container, ca_bundle_mount(settings));
    for extra in &settings.volume_mounts {
        mount(container, Some(extra.clone()));
    }
}

/// The pod template's labels: the user's, then the operator's over them.
pub fn labels(settings: &PodOverrides, own: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut labels = settings.labels.clone();
    labels.extend(own);
    labels
}

/// The pod template's annotations: the user's, then the operator's over them.
pub fn annotations(
    settings: &PodOverrides,
    own: BTreeMap<String, String>,
) -> Option<BTreeMap<String, String>> {
    let mut annotations = settings.annotations.clone();
    annotations.extend(own);
    non_empty_map(&annotations)
}

/// Adds `mount` unless the container already mounts something at its path or by its name.
fn mount(container: &mut Container, mount: Option<VolumeMount>) {
    let Some(mount) = mount else {
        return;
    };
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    if !mounts.iter().any(|m| m.mount_path == mount.mount_path) {
        mounts.push(mount);
    }
}

/// `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY` (with the cluster's names) from `pod.proxy`.
fn proxy_env(settings: &PodOverrides) -> Vec<EnvVar> {
    let Some(proxy) = &settings.proxy else {
        return Vec::new();
    };
    let var = |name: &str, value: &str| EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        ..Default::default()
    };
    let mut env = Vec::new();
    if let Some(url) = &proxy.http_proxy {
        env.push(var("HTTP_PROXY", url));
    }
    if let Some(url) = &proxy.https_proxy {
        env.push(var("HTTPS_PROXY", url));
    }
    let no_proxy = match proxy.no_proxy.as_deref().map(str::trim) {
        Some(extra) if !extra.is_empty() => format!("{extra},{IN_CLUSTER}"),
        _ => IN_CLUSTER.to_string(),
    };
    env.push(var("NO_PROXY", &no_proxy));
    env
}

/// The `caBundle` ConfigMap or Secret as a read-only volume, when one is given.
fn ca_bundle_volume(settings: &PodOverrides) -> Option<Volume> {
    let bundle = settings.ca_bundle.as_ref()?;
    Some(Volume {
        name: CA_BUNDLE_VOLUME.to_string(),
        config_map: bundle
            .config_map
            .as_ref()
            .map(|name| ConfigMapVolumeSource {
                name: name.clone(),
                ..Default::default()
            }),
        secret: bundle.secret.as_ref().map(|name| SecretVolumeSource {
            secret_name: Some(name.clone()),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn ca_bundle_mount(settings: &PodOverrides) -> Option<VolumeMount> {
    settings.ca_bundle.as_ref()?;
    Some(VolumeMount {
        name: CA_BUNDLE_VOLUME.to_string(),
        mount_path: CA_BUNDLE_DIR.to_string(),
        read_only: Some(true),
        ..Default::default()
    })
}

fn non_empty_vec<T: Clone>(items: &[T]) -> Option<Vec<T>> {
    (!items.is_empty()).then(|| items.to_vec())
}

fn non_empty_map(map: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then(|| map.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_refuses_the_operators_own_volumes_and_paths() {
        let schema = serde_json::to_string(&schemars::schema_for!(PodOverrides)).unwrap();
        for reserved in RESERVED_VOLUMES.iter().chain(&RESERVED_MOUNT_PATHS) {
            assert!(
                schema.contains(&format!("'{reserved}'")),
                "{reserved} is not refused"
            );
        }
    }
}
