//! The OLM bundle (`deploy/olm`): operator-framework's own validators pass it (and fail a
//! broken copy), the apiserver takes its Deployment and roles, and the operator runs the
//! way OLM runs it: serving the certificate OLM mounts (no `ca.crt`), answering through
//! webhook configurations made from the bundle's `webhookdefinitions`, and writing none
//! itself.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, ensure};
use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::support::{TestEnv, eventually};

const BUNDLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/olm");

/// `tools/olm-validate`, built once into the cache.
fn validator() -> anyhow::Result<PathBuf> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/olm-validate/build.sh");
    let output = Command::new(script).output()?;
    ensure!(
        output.status.success(),
        "tools/olm-validate/build.sh failed (it builds operator-framework/api's validators \
         from the Go module proxy; run it to see why): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout)?;
    Ok(PathBuf::from(
        stdout.lines().last().context("build.sh printed nothing")?,
    ))
}

fn validate(dir: &Path) -> anyhow::Result<(bool, String)> {
    let output = Command::new(validator()?).arg(dir).output()?;
    Ok((
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    ))
}

fn csv() -> anyhow::Result<Value> {
    let path = format!("{BUNDLE}/manifests/clair-operator.clusterserviceversion.yaml");
    Ok(serde_saphyr::from_str(&std::fs::read_to_string(path)?)?)
}

pub async fn the_bundle_passes_operator_frameworks_validators(
    _env: &TestEnv,
) -> anyhow::Result<()> {
    let (valid, said) = validate(Path::new(BUNDLE))?;
    ensure!(valid, "deploy/olm is refused: {said}");
    ensure!(
        said.contains("valid (4 CRDs"),
        "the validator did not see the CRDs: {said}"
    );
    ensure!(
        !said.contains("warning:"),
        "the validator warns about deploy/olm: {said}"
    );
    // The same validator refuses a copy whose example names a kind the bundle does not own.
    // Not a dot-folder: the bundle reader skips hidden paths.
    let broken = tempfile::Builder::new().prefix("olm-bundle").tempdir()?;
    for folder in ["manifests", "metadata"] {
        std::fs::create_dir(broken.path().join(folder))?;
        for entry in std::fs::read_dir(Path::new(BUNDLE).join(folder))? {
            let entry = entry?;
            let mut text = std::fs::read_to_string(entry.path())?;
            if entry
                .file_name()
                .to_string_lossy()
                .contains("clusterserviceversion")
            {
                text = text.replace("\"kind\": \"Indexer\"", "\"kind\": \"Indexr\"");
            }
            std::fs::write(broken.path().join(folder).join(entry.file_name()), text)?;
        }
    }
    let (valid, said) = validate(broken.path())?;
    ensure!(
        !valid && said.contains("Kind=Indexr"),
        "a broken bundle passed: {said}"
    );
    Ok(())
}

pub async fn the_bundles_deployment_and_roles_are_taken_by_the_apiserver(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("olm").await?;
    let csv = csv()?;
    let install = &csv["spec"]["install"]["spec"];
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": install["deployments"][0]["name"]},
        "spec": install["deployments"][0]["spec"],
    }))?;
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(&dry_run, &deployment)
        .await
        .context("the CSV's Deployment")?;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "clair-operator"},
        "rules": install["permissions"][0]["rules"],
    }))?;
    Api::<Role>::namespaced(client.clone(), &ns)
        .create(&dry_run, &role)
        .await
        .context("the CSV's permissions")?;
    let cluster_role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "clair-operator-olm-check"},
        "rules": install["clusterPermissions"][0]["rules"],
    }))?;
    Api::<ClusterRole>::all(client)
        .create(&dry_run, &cluster_role)
        .await
        .context("the CSV's clusterPermissions")?;
    Ok(())
}

/// A webhook configuration of `kind` as OLM makes it from the CSV's definitions of `kind`:
/// called for `namespace` (the OperatorGroup's), trusting `ca`; here at `base` (loopback)
/// instead of OLM's Service.
fn configuration(
    csv: &Value,
    kind: &str,
    name: &str,
    base: &str,
    ca: &str,
    namespace: &str,
) -> Value {
    let webhooks: Vec<Value> = csv["spec"]["webhookdefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["type"] == kind)
        .map(|d| {
            let mut webhook = json!({
                "name": d["generateName"],
                "clientConfig": {
                    "url": format!("{base}{}", d["webhookPath"].as_str().unwrap_or_default()),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
                },
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            });
            for field in [
                "rules",
                "failurePolicy",
                "sideEffects",
                "admissionReviewVersions",
                "timeoutSeconds",
                "objectSelector",
                "reinvocationPolicy",
            ] {
                if !d[field].is_null() {
                    webhook[field] = d[field].clone();
                }
            }
            webhook
        })
        .collect();
    json!({"metadata": {"name": name}, "webhooks": webhooks})
}

pub async fn the_operator_serves_olms_certificate_and_leaves_the_configurations_to_olm(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use clair_operator::webhook::register::{Settings, Target};
    let client = env.client().await?;
    let ns = env.namespace("olm-webhook").await?;
    // What OLM mounts: tls.crt and tls.key, no ca.crt (OLM publishes the CA itself).
    let dir = tempfile::tempdir()?;
    let mount = |dir: &Path| -> anyhow::Result<clair_operator::webhook::certs::Bundle> {
        let bundle = clair_operator::webhook::certs::issue(
            &["127.0.0.1".to_string()],
            None,
            time::OffsetDateTime::now_utc(),
        )?;
        std::fs::write(dir.join("tls.crt"), &bundle.cert)?;
        std::fs::write(dir.join("tls.key"), &bundle.key)?;
        Ok(bundle)
    };
    let first = mount(dir.path())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let base = format!("https://127.0.0.1:{port}");
    // Only this server refuses the default Clair image: the suite's operator allows it, so
    // a refusal proves the call came through OLM's configuration to this server.
    let own_name = "clair-operator-olm-test";
    let settings = Settings {
        name: own_name.to_string(),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        target: Target::Url(base.clone()),
        hosts: vec!["127.0.0.1".to_string()],
        namespace: "clair-operator".to_string(),
        recheck: Duration::from_secs(1),
        mounted: Some(dir.path().to_path_buf()),
        register: false,
        platform: clair_operator::platform::Platform {
            images: clair_operator::images::ImagePolicy::new(["registry.example/".to_string()]),
            ..Default::default()
        },
        namespaces: vec![ns.clone()],
        callers: Default::default(),
    };
    let (stop, server) = crate::support::spawn_webhook(client.clone(), settings, 2);
    let csv = csv()?;
    let olm_name = format!("olm-{ns}");
    let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mutating_api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let publish = |ca: String| {
        let (validating_api, mutating_api) = (validating_api.clone(), mutating_api.clone());
        let validating = configuration(
            &csv,
            "ValidatingAdmissionWebhook",
            &olm_name,
            &base,
            &ca,
            &ns,
        );
        let mutating = configuration(&csv, "MutatingAdmissionWebhook", &olm_name, &base, &ca, &ns);
        async move {
            let params = kube::api::PatchParams::apply("olm-test").force();
            let patch = |mut v: Value, kind: &str| {
                v["apiVersion"] = json!("admissionregistration.k8s.io/v1");
                v["kind"] = json!(kind);
                kube::api::Patch::Apply(v)
            };
            let name = validating["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let v = validating_api
                .patch(
                    &name,
                    &params,
                    &patch(validating, "ValidatingWebhookConfiguration"),
                )
                .await?;
            mutating_api
                .patch(
                    &name,
                    &params,
                    &patch(mutating, "MutatingWebhookConfiguration"),
                )
                .await?;
            anyhow::Ok(v.metadata.resource_version)
        }
    };
    let indexer = |name: &str| {
        format!(
            "apiVersion: clair.projectquay.io/v1alpha1\nkind: Indexer\nmetadata:\n  name: {name}\n\
             spec:\n  config:\n    root:\n      configMap: {{name: cfg, key: config.yaml}}\n"
        )
    };
    let refused_through_olm = |name: String| {
        let outcome = env.kubectl_run(&ns, &["apply", "-f", "-"], Some(&indexer(&name)));
        async move {
            let outcome = outcome?;
            anyhow::Ok(!outcome.success && outcome.stderr.contains("registry.example/"))
        }
    };
    let outcome: anyhow::Result<()> = async {
        let version = publish(first.ca_cert.clone()).await?;
        let mut attempt = 0;
        eventually(
            Duration::from_secs(30),
            "an image refused by the server behind OLM's configuration",
            || {
                attempt += 1;
                refused_through_olm(format!("first-{attempt}"))
            },
        )
        .await?;
        // A few rechecks later the operator has written no configuration of its own, and
        // left OLM's as OLM wrote it.
        tokio::time::sleep(Duration::from_secs(3)).await;
        ensure!(
            validating_api.get_opt(own_name).await?.is_none()
                && mutating_api.get_opt(own_name).await?.is_none(),
            "the operator registered webhooks that OLM owns"
        );
        let now = validating_api
            .get(&olm_name)
            .await?
            .metadata
            .resource_version;
        ensure!(now == version, "the operator changed OLM's configuration");

        // OLM rotates: new files and a new caBundle; the operator serves the new
        // certificate without a restart.
        let second = mount(dir.path())?;
        publish(second.ca_cert.clone()).await?;
        eventually(
            Duration::from_secs(30),
            "the rotated certificate served behind OLM's configuration",
            || {
                attempt += 1;
                refused_through_olm(format!("second-{attempt}"))
            },
        )
        .await?;
        Ok(())
    }
    .await;
    let _ = stop.send(true);
    let _ = server.await;
    let _ = validating_api
        .delete(&olm_name, &DeleteParams::default())
        .await;
    let _ = mutating_api
        .delete(&olm_name, &DeleteParams::default())
        .await;
    outcome
}
