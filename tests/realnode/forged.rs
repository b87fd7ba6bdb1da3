//! Forged admission reviews against the operator as `deploy/base` installs it: its webhook
//! answers anyone who reaches it (no client CA is configured there), so a pod in a tenant's
//! namespace and a client on the host can both POST a review written by hand, claiming a
//! cluster administrator in another tenant's namespace. The answers must hold nothing the
//! operator read: no Secret value, no ConfigMap content, not whether they exist.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use clair_operator::webhook::register::SECRET_NAME;
use clair_operator::webhook::{TEMPLATE_CONFIG_PATH, VALIDATE_RESOURCE_PATH};
use clair_testenv::forged;
use clair_testenv::https::{self, Answer};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, LogParams, PostParams};

use crate::support::{TestEnv, eventually};

const MARKER: &str = "Vict1mMarker";
const OPERATOR_NAMESPACE: &str = "clair-operator";
const WEBHOOK_HOST: &str = "clair-operator-webhook.clair-operator.svc";

/// What an answer may not hold: the marker, a patch of the object's data (a Secret's value
/// goes there base64-encoded), or anything said about the ConfigMaps.
fn tells_something(answer: &str) -> bool {
    let patch = forged::patch_of(answer);
    answer.contains(MARKER)
        || patch.contains(MARKER)
        || patch.contains("/data")
        || answer.contains("log_level")
        || answer.contains("does not exist")
}

pub async fn forged_reviews_from_a_pod_and_the_host_get_nothing(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let victim = env.namespace("victim").await?;
    let objects = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: victim\nstringData:\n  value: {MARKER}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: victim-config\ndata:\n  config.yaml: \"log_level: {MARKER}\\n\"\n"
    );
    let applied = env.kubectl_run(
        &victim,
        &["apply", "--server-side", "-f", "-"],
        Some(&objects),
    )?;
    ensure!(applied.success, "{}", applied.stderr);
    let reviews = [
        (
            "template",
            TEMPLATE_CONFIG_PATH,
            forged::template_review(&victim, "victim", "value"),
        ),
        (
            "resource",
            VALIDATE_RESOURCE_PATH,
            forged::resource_review(&victim, "victim-config"),
        ),
        (
            "missing",
            VALIDATE_RESOURCE_PATH,
            forged::resource_review(&victim, "no-such-config"),
        ),
    ];

    // From the host, straight to a replica's pod address.
    let ca = Api::<Secret>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .get(SECRET_NAME)
        .await?
        .data
        .and_then(|d| {
            d.get("ca.crt")
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        })
        .context("the webhook's CA")?;
    let pods = Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/name=clair-operator"))
        .await?;
    let address: std::net::IpAddr = pods
        .items
        .iter()
        .find_map(|p| p.status.as_ref()?.pod_ip.clone())
        .context("a running operator pod")?
        .parse()?;
    for (what, path, review) in &reviews {
        let answer = https::post(
            (address, 8443).into(),
            WEBHOOK_HOST,
            &ca,
            None,
            path,
            review,
        )
        .await?;
        let Answer::Response(200, body) = answer else {
            anyhow::bail!("the webhook did not answer the host's {what} review: {answer:?}");
        };
        ensure!(
            !tells_something(&body),
            "the host's forged {what} review was told something: {body}"
        );
    }

    // From a pod in a tenant's namespace, through the webhook's Service (by its address: the
    // client image's static busybox cannot resolve names; its wget, through openssl, crashes
    // with `-T`, so the time is bounded by the server's deadlines and the wait below).
    let service_ip =
        Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), OPERATOR_NAMESPACE)
            .get("clair-operator-webhook")
            .await?
            .spec
            .and_then(|s| s.cluster_ip)
            .context("the webhook Service's address")?;
    let tenant = env.namespace("tenant").await?;
    let mut env_vars = Vec::new();
    let mut script = String::from("set -e\n");
    for (i, (what, path, review)) in reviews.iter().enumerate() {
        env_vars.push(serde_json::json!({"name": format!("REVIEW{i}"), "value": review}));
        script.push_str(&format!(
            "printf '%s' \"$REVIEW{i}\" > /tmp/review{i}\necho '=== {what}'\n\
             wget -q -O- --no-check-certificate --header 'Content-Type: application/json' \
             --post-file /tmp/review{i} https://{service_ip}{path}\necho\n"
        ));
    }
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "forger"},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "forger",
                "image": "clair-testenv.local/client:1",
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script],
                "env": env_vars,
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &tenant);
    pods.create(&PostParams::default(), &pod).await?;
    eventually(Duration::from_secs(120), "the forging pod finished", || {
        let pods = pods.clone();
        async move {
            let phase = pods
                .get("forger")
                .await?
                .status
                .and_then(|s| s.phase)
                .unwrap_or_default();
            Ok(phase == "Succeeded" || phase == "Failed")
        }
    })
    .await?;
    let logs = pods.logs("forger", &LogParams::default()).await?;
    let phase = pods.get("forger").await?.status.and_then(|s| s.phase);
    ensure!(
        phase.as_deref() == Some("Succeeded"),
        "the pod's requests failed ({phase:?}): {logs}"
    );
    let answers: BTreeMap<&str, &str> = logs
        .split("=== ")
        .filter_map(|part| part.split_once('\n'))
        .map(|(what, body)| (what.trim(), body.trim()))
        .collect();
    for (what, _, _) in &reviews {
        let body = answers
            .get(what)
            .with_context(|| format!("no answer to the pod's {what} review: {logs}"))?;
        ensure!(
            body.contains("\"allowed\":true"),
            "the pod's {what} review was not answered as expected: {body}"
        );
        ensure!(
            !tells_something(body),
            "the pod's forged {what} review was told something: {body}"
        );
    }
    ensure!(
        forged::patch_of(answers["template"]).contains("template-seal"),
        "the template review's answer should hold its seal: {}",
        answers["template"]
    );
    Ok(())
}
