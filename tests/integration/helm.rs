//! The Helm chart (`deploy/helm/clair-operator`): lint-clean; with its defaults it renders
//! the objects `deploy/base` does (the Namespace aside), which the apiserver accepts (a
//! server-side apply, dry run); each option renders what it promises; a bad option fails
//! naming itself. Helm is built from the Go module proxy by `tools/helm/build.sh`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail, ensure};
use serde_json::Value;

use crate::support::TestEnv;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/helm/clair-operator");

/// The `helm` binary, built once into the cache.
fn helm() -> anyhow::Result<PathBuf> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/helm/build.sh");
    let output = Command::new(script).output()?;
    ensure!(
        output.status.success(),
        "tools/helm/build.sh failed (it builds Helm from the Go module proxy; run it to see \
         why): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let folder = String::from_utf8(output.stdout)?;
    let folder = folder
        .lines()
        .last()
        .context("tools/helm/build.sh printed nothing")?;
    Ok(PathBuf::from(folder).join("helm"))
}

/// `helm template` of the chart into `namespace` with `--set` options.
fn render(namespace: &str, options: &[&str]) -> anyhow::Result<Result<String, String>> {
    let mut command = Command::new(helm()?);
    command.args(["template", "clair-operator", CHART, "--include-crds"]);
    command.args(["--namespace", namespace, "--kube-version", "1.33.0"]);
    for option in options {
        command.args(["--set", option]);
    }
    let output = command.output()?;
    Ok(if output.status.success() {
        Ok(String::from_utf8(output.stdout)?)
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    })
}

fn documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut objects = Vec::new();
    for document in text.split("\n---") {
        let value: Value = serde_saphyr::from_str(document).with_context(|| {
            format!(
                "not YAML: {}",
                document.chars().take(300).collect::<String>()
            )
        })?;
        if value.is_object() {
            objects.push(value);
        }
    }
    Ok(objects)
}

type Key = (String, String, String);

/// Whole numbers written `1.0` (the CRD files) and `1` (kustomize's rewrite) are one value.
fn canonical(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e15) {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(canonical),
        Value::Object(map) => map.values_mut().for_each(canonical),
        _ => {}
    }
}

/// Objects by kind, namespace and name; namespaced objects without a namespace get
/// `namespace` (what `helm install` does).
fn by_key(objects: Vec<Value>, namespace: &str) -> BTreeMap<Key, Value> {
    const CLUSTER_SCOPED: [&str; 5] = [
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Namespace",
        "ValidatingWebhookConfiguration",
    ];
    objects
        .into_iter()
        .map(|mut object| {
            canonical(&mut object);
            let kind = object["kind"].as_str().unwrap_or_default().to_string();
            if !CLUSTER_SCOPED.contains(&kind.as_str()) && object["metadata"]["namespace"].is_null()
            {
                object["metadata"]["namespace"] = Value::String(namespace.to_string());
            }
            let ns = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            ((kind, ns, name), object)
        })
        .collect()
}

/// Where `a` (deploy/base) and `b` (the chart) first differ, as a JSON pointer and values.
fn first_difference(a: &Value, b: &Value, at: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x.keys().chain(y.keys()).find_map(|k| {
            first_difference(&x[k], y.get(k).unwrap_or(&Value::Null), format!("{at}/{k}"))
                .or_else(|| (!x.contains_key(k)).then(|| format!("{at}/{k}: only in the chart")))
        }),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, format!("{at}/{i}"))),
        _ if a == b => None,
        _ => Some(format!("{at}: deploy/base {a} / chart {b}")),
    }
}

pub async fn the_chart_renders_what_kustomize_does_and_the_apiserver_takes_it(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let lint = Command::new(helm()?)
        .args(["lint", "--strict", CHART, "--kube-version", "1.33.0"])
        .output()?;
    ensure!(
        lint.status.success(),
        "helm lint: {}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
    let rendered = match render("clair-operator", &[])? {
        Ok(text) => text,
        Err(e) => bail!("helm template with the defaults: {e}"),
    };
    let base = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/base");
    let kustomized = env.plane.kubectl().args(["kustomize", base]).output()?;
    ensure!(
        kustomized.status.success(),
        "kubectl kustomize deploy/base failed"
    );
    let chart = by_key(documents(&rendered)?, "clair-operator");
    let mut kustomize = by_key(
        documents(&String::from_utf8(kustomized.stdout)?)?,
        "clair-operator",
    );
    // The chart leaves the namespace to `--create-namespace`.
    kustomize.retain(|(kind, _, _), _| kind != "Namespace");
    let only = |a: &BTreeMap<Key, Value>, b: &BTreeMap<Key, Value>| -> Vec<String> {
        a.keys()
            .filter(|k| !b.contains_key(*k))
            .map(|(kind, ns, name)| format!("{kind} {ns}/{name}"))
            .collect()
    };
    ensure!(
        only(&chart, &kustomize).is_empty() && only(&kustomize, &chart).is_empty(),
        "only in the chart: {:?}; only in deploy/base: {:?}",
        only(&chart, &kustomize),
        only(&kustomize, &chart)
    );
    let differing: Vec<String> = kustomize
        .iter()
        .filter(|(key, object)| chart.get(*key) != Some(*object))
        .map(|((kind, ns, name), object)| {
            let theirs = &chart[&(kind.clone(), ns.clone(), name.clone())];
            format!(
                "{kind} {ns}/{name}: {}",
                first_difference(object, theirs, String::new()).unwrap_or_default()
            )
        })
        .collect();
    ensure!(
        differing.is_empty(),
        "the chart and deploy/base differ:\n{}",
        differing.join("\n")
    );

    // The apiserver takes every object as the chart renders it.
    let applied = env.kubectl_run(
        "clair-operator",
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            "--force-conflicts",
            "--field-manager=helm-check",
            "-f",
            "-",
        ],
        Some(&rendered),
    )?;
    ensure!(
        applied.success,
        "server-side apply of the chart: {}",
        applied.stderr
    );
    Ok(())
}

pub async fn the_charts_options_render_what_they_promise(_: &TestEnv) -> anyhow::Result<()> {
    let options = [
        "webhook.certificate=certManager",
        "metrics.serviceMonitor.enabled=true",
        "metrics.prometheusRule.enabled=true",
        "metrics.grafanaDashboards.enabled=true",
        "namespaces={team-a,team-b}",
        "allowedImages={quay.io/projectquay/}",
        "allowedPrometheus={http://prometheus-operated.monitoring.svc:9090}",
        "databaseNetworks={10.0.0.0/8,fd00::/8}",
        "databaseNetworksRefused={none}",
        "logFormat=json",
        "replicas=3",
        "image.tag=0.2.0",
        "webhook.clientCA.secretName=apiserver-webhook-client-ca",
        "webhook.clientCA.names={kube-apiserver-webhook-client}",
        "metrics.serviceMonitor.prometheusServiceAccount.name=prometheus-user-workload",
        "metrics.serviceMonitor.prometheusServiceAccount.namespace=openshift-user-workload-monitoring",
        "networkPolicy.metricsNamespaces={observability}",
    ];
    let rendered = match render("scanners", &options)? {
        Ok(text) => text,
        Err(e) => bail!("helm template with options: {e}"),
    };
    let objects = by_key(documents(&rendered)?, "scanners");
    let has = |kind: &str, ns: &str, name: &str| {
        objects.contains_key(&(kind.to_string(), ns.to_string(), name.to_string()))
    };
    for (kind, ns, name) in [
        ("Certificate", "scanners", "clair-operator-webhook"),
        ("Certificate", "scanners", "clair-operator-webhook-ca"),
        ("Issuer", "scanners", "clair-operator-webhook"),
        ("ServiceMonitor", "scanners", "clair-operator"),
        ("PrometheusRule", "scanners", "clair-operator"),
        ("ConfigMap", "scanners", "clair-operator-dashboards"),
        ("RoleBinding", "team-a", "clair-operator-watched"),
        ("RoleBinding", "team-b", "clair-operator-watched"),
        ("RoleBinding", "scanners", "clair-operator"),
        ("ClusterRoleBinding", "", "clair-operator-cluster"),
        ("ClusterRoleBinding", "", "clair-operator-metrics-reader"),
        ("ClusterRole", "", "clair-operator-metrics-reader"),
        ("NetworkPolicy", "scanners", "clair-operator"),
    ] {
        ensure!(has(kind, ns, name), "no {kind} {ns}/{name} in:\n{rendered}");
    }
    ensure!(
        !has("ClusterRoleBinding", "", "clair-operator"),
        "scoped to namespaces, the chart still binds the ClusterRole cluster-wide"
    );
    let dashboards = &objects[&(
        "ConfigMap".to_string(),
        "scanners".to_string(),
        "clair-operator-dashboards".to_string(),
    )];
    for key in ["clair-operator.json", "clair.json"] {
        let text = dashboards["data"][key].as_str().unwrap_or_default();
        let dashboard: serde_json::Value = serde_json::from_str(text)
            .with_context(|| format!("the chart's dashboard {key} is not JSON"))?;
        ensure!(
            dashboard["panels"]
                .as_array()
                .is_some_and(|p| !p.is_empty()),
            "the chart's dashboard {key} has no panels"
        );
    }
    let binding = &objects[&(
        "RoleBinding".to_string(),
        "team-a".to_string(),
        "clair-operator-watched".to_string(),
    )];
    ensure!(
        binding["subjects"][0]["namespace"] == "scanners",
        "{binding}"
    );
    let deployment = &objects[&(
        "Deployment".to_string(),
        "scanners".to_string(),
        "clair-operator".to_string(),
    )];
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    ensure!(deployment["spec"]["replicas"] == 3, "{deployment}");
    ensure!(
        container["image"] == "quay.io/projectquay/clair-operator:0.2.0",
        "{container}"
    );
    ensure!(
        container["args"].as_array().is_some_and(|a| a
            .iter()
            .any(|x| x == "--webhook-cert-dir=/var/run/webhook-certs")),
        "{container}"
    );
    ensure!(
        pod["volumes"][0]["secret"]["secretName"] == "clair-operator-webhook-cert",
        "{pod}"
    );
    ensure!(
        pod["volumes"][1]["secret"]["secretName"] == "apiserver-webhook-client-ca",
        "{pod}"
    );
    let env: BTreeMap<String, String> = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .collect();
    for (name, value) in [
        ("CLAIR_OPERATOR_NAMESPACES", "team-a,team-b"),
        ("CLAIR_OPERATOR_ALLOWED_IMAGES", "quay.io/projectquay/"),
        (
            "CLAIR_OPERATOR_ALLOWED_PROMETHEUS",
            "http://prometheus-operated.monitoring.svc:9090",
        ),
        ("CLAIR_OPERATOR_DATABASE_NETWORKS", "10.0.0.0/8,fd00::/8"),
        ("CLAIR_OPERATOR_DATABASE_NETWORKS_REFUSED", "none"),
        ("CLAIR_OPERATOR_LOG_FORMAT", "json"),
        (
            "CLAIR_OPERATOR_WEBHOOK_CLIENT_CA",
            "/var/run/webhook-client-ca/ca.crt",
        ),
        (
            "CLAIR_OPERATOR_WEBHOOK_CLIENT_NAMES",
            "kube-apiserver-webhook-client",
        ),
    ] {
        ensure!(
            env.get(name).map(String::as_str) == Some(value),
            "{name}: {env:?}"
        );
    }
    // The serving certificate names the webhook Service in the release's namespace.
    let certificate = &objects[&(
        "Certificate".to_string(),
        "scanners".to_string(),
        "clair-operator-webhook".to_string(),
    )];
    ensure!(
        certificate["spec"]["dnsNames"][0] == "clair-operator-webhook.scanners.svc",
        "{certificate}"
    );
    // The scraper bound is the one named; the metrics port admits the namespaces named.
    let reader = &objects[&(
        "ClusterRoleBinding".to_string(),
        String::new(),
        "clair-operator-metrics-reader".to_string(),
    )];
    ensure!(
        reader["subjects"][0]["name"] == "prometheus-user-workload"
            && reader["subjects"][0]["namespace"] == "openshift-user-workload-monitoring",
        "{reader}"
    );
    let policy = &objects[&(
        "NetworkPolicy".to_string(),
        "scanners".to_string(),
        "clair-operator".to_string(),
    )];
    ensure!(
        policy["spec"]["ingress"][1]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"]
            == serde_json::json!(["observability"]),
        "{policy}"
    );
    // Switched off: no policy; plain HTTP metrics probed over HTTP.
    let plain = match render(
        "scanners",
        &["networkPolicy.enabled=false", "metrics.insecure=true"],
    )? {
        Ok(text) => by_key(documents(&text)?, "scanners"),
        Err(e) => bail!("helm template with the policy off: {e}"),
    };
    ensure!(
        !plain.contains_key(&(
            "NetworkPolicy".to_string(),
            "scanners".to_string(),
            "clair-operator".to_string()
        )),
        "networkPolicy.enabled=false rendered the policy"
    );
    let container = &plain[&(
        "Deployment".to_string(),
        "scanners".to_string(),
        "clair-operator".to_string(),
    )]["spec"]["template"]["spec"]["containers"][0];
    ensure!(
        container["args"].to_string().contains("--metrics-insecure")
            && container["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
            && container["livenessProbe"]["httpGet"]["scheme"] == "HTTP",
        "{container}"
    );
    // A bad option fails, naming itself.
    match render("scanners", &["webhook.certificate=bogus"])? {
        Ok(_) => bail!("webhook.certificate=bogus rendered"),
        Err(e) => ensure!(
            e.contains("webhook.certificate") && e.contains("selfSigned or certManager"),
            "{e}"
        ),
    }
    Ok(())
}
