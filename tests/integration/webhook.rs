//! The config validation webhook, called by the real kube-apiserver over TLS: labelled
//! ConfigMaps and Secrets with invalid configs are refused with the field named, valid ones
//! pass with Clair's lints as warnings, unlabelled objects never reach it, and a rotated
//! certificate keeps it answering.

use std::time::Duration;

use anyhow::{Context, ensure};
use clair_operator::webhook::CONFIGURATION_NAME;
use clair_operator::webhook::register::SECRET_NAME;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};

use crate::support::{TestEnv, eventually};

fn labelled(kind: &str, name: &str, body: &str) -> String {
    let data = if kind == "Secret" {
        "stringData"
    } else {
        "data"
    };
    let indented: String = body.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: {kind}\nmetadata:\n  name: {name}\n  labels:\n    clair.projectquay.io/validate-config: \"true\"\n  annotations:\n    clair.projectquay.io/config: config.yaml\n{data}:\n  config.yaml: |\n{indented}"
    )
}

pub async fn webhook_registered(env: &TestEnv) -> anyhow::Result<()> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(env.client().await?);
    eventually(Duration::from_secs(60), "the webhook configuration", || {
        let api = api.clone();
        async move { Ok(api.get_opt(CONFIGURATION_NAME).await?.is_some()) }
    })
    .await
}

pub async fn invalid_labelled_configs_are_refused_and_valid_ones_warn(
    env: &TestEnv,
) -> anyhow::Result<()> {
    webhook_registered(env).await?;
    let ns = env.namespace("webhook").await?;
    let apply = ["apply", "--server-side", "-f", "-"];

    let bad = env.kubectl_run(
        &ns,
        &apply,
        Some(&labelled("ConfigMap", "bad", "indexr:\n  connstring: x\n")),
    )?;
    ensure!(!bad.success, "an invalid config was accepted");
    ensure!(
        bad.stderr.contains("denied the request") && bad.stderr.contains("indexr: unknown key"),
        "{}",
        bad.stderr
    );

    let secret = env.kubectl_run(
        &ns,
        &apply,
        Some(&labelled("Secret", "bad-secret", "log_level: loud\n")),
    )?;
    ensure!(
        !secret.success && secret.stderr.contains("log_level: unknown level"),
        "{}",
        secret.stderr
    );

    // Invalid YAML, a missing required key, a PSK that is not base64: refused, named.
    for (name, body, named) in [
        (
            "yaml",
            "indexer:\n  connstring: [unclosed\n",
            "unclosed bracket",
        ),
        (
            "missing",
            "indexer:\n  connstring: host=db\nauth:\n  psk:\n    iss: [quay]\n",
            "auth.psk.key: required",
        ),
        (
            "psk",
            "indexer:\n  connstring: host=db\nauth:\n  psk:\n    key: \"not base64!\"\n    iss: [quay]\n",
            "auth.psk.key: not standard padded base64",
        ),
    ] {
        let refused = env.kubectl_run(&ns, &apply, Some(&labelled("ConfigMap", name, body)))?;
        ensure!(
            !refused.success && refused.stderr.contains(named),
            "{name}: {}",
            refused.stderr
        );
    }

    // Valid for the indexer, not for a matcher: accepted, with the matcher's problem as a
    // warning kubectl shows.
    let good = env.kubectl_run(
        &ns,
        &apply,
        Some(&labelled(
            "ConfigMap",
            "good",
            "indexer:\n  connstring: host=db\n",
        )),
    )?;
    ensure!(good.success, "a valid config was refused: {}", good.stderr);
    ensure!(
        good.stderr.contains("Warning:")
            && good
                .stderr
                .contains("invalid in matcher mode: matcher.indexer_addr"),
        "{}",
        good.stderr
    );

    // Without the label the webhook is never asked.
    let plain = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\ndata:\n  config.yaml: \"indexr: {}\"\n";
    let unlabelled = env.kubectl_run(&ns, &apply, Some(plain))?;
    ensure!(
        unlabelled.success,
        "an unlabelled object was checked: {}",
        unlabelled.stderr
    );
    Ok(())
}

pub async fn a_rotated_certificate_keeps_the_webhook_answering(
    env: &TestEnv,
) -> anyhow::Result<()> {
    webhook_registered(env).await?;
    // Not while `a_settled_webhook_watches_rather_than_polls` counts the webhook's reads.
    let _rotating = crate::support::CLUSTER_WIDE_CHANGES.read().await;
    let client = env.client().await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "clair-operator");
    let tls = |s: &Secret, key: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
    };
    let before = secrets.get(SECRET_NAME).await?;
    let old_cert = tls(&before, "tls.crt").context("tls.crt")?;
    let old_ca = String::from_utf8(tls(&before, "ca.crt").context("ca.crt")?)?;

    // Losing the Secret makes the operator issue a new CA and certificate, publish the new
    // CA beside the old one (replicas still serving the old certificate stay trusted), and
    // reload its server; a few recheck intervals later the old CA goes.
    secrets
        .delete(SECRET_NAME, &DeleteParams::default())
        .await?;
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client);
    let published = || {
        let configurations = configurations.clone();
        async move {
            let configuration = configurations.get(CONFIGURATION_NAME).await?;
            let bundles: Vec<String> = configuration
                .webhooks
                .unwrap_or_default()
                .iter()
                .map(|w| {
                    let bundle = w.client_config.ca_bundle.clone().unwrap_or_default();
                    String::from_utf8_lossy(&bundle.0).into_owned()
                })
                .collect();
            anyhow::Ok(bundles)
        }
    };
    let new_ca = std::sync::Mutex::new(String::new());
    eventually(
        Duration::from_secs(60),
        "a new certificate in use, both CAs trusted",
        || {
            let (secrets, old_cert, old_ca, new_ca) =
                (secrets.clone(), old_cert.clone(), old_ca.clone(), &new_ca);
            async move {
                let Some(secret) = secrets.get_opt(SECRET_NAME).await? else {
                    return Ok(false);
                };
                let (Some(cert), Some(ca)) = (tls(&secret, "tls.crt"), tls(&secret, "ca.crt"))
                else {
                    return Ok(false);
                };
                let ca = String::from_utf8(ca)?;
                let bundles = published().await?;
                let both = bundles
                    .iter()
                    .all(|b| b.contains(ca.trim()) && b.contains(old_ca.trim()));
                *new_ca.lock().expect("lock") = ca;
                Ok(cert != old_cert && both)
            }
        },
    )
    .await?;
    let new_ca = new_ca.into_inner().expect("lock");
    eventually(
        Duration::from_secs(60),
        "the old CA no longer trusted",
        || async {
            let bundles = published().await?;
            Ok(bundles.iter().all(|b| b.trim() == new_ca.trim()))
        },
    )
    .await?;

    let ns = env.namespace("rotation").await?;
    let apply = ["apply", "--server-side", "-f", "-"];
    let bad = env.kubectl_run(
        &ns,
        &apply,
        Some(&labelled("ConfigMap", "bad", "matcher:\n  period: 1d\n")),
    )?;
    ensure!(
        !bad.success && bad.stderr.contains("matcher.period"),
        "after rotation: {}",
        bad.stderr
    );
    let good = env.kubectl_run(
        &ns,
        &apply,
        Some(&labelled("ConfigMap", "good", "log_level: debug\n")),
    )?;
    ensure!(
        good.success,
        "after rotation a valid config was refused: {}",
        good.stderr
    );
    Ok(())
}

/// Settled, the webhook watches its certificate Secret and configurations rather than
/// reading them every recheck (1 s for the in-process operator): quiet, it asks nothing
/// about them; a deleted configuration is back at once all the same.
pub async fn a_settled_webhook_watches_rather_than_polls(env: &TestEnv) -> anyhow::Result<()> {
    webhook_registered(env).await?;
    // Its configuration goes away for a moment, and no rotation may run while it counts.
    let _exclusive = crate::support::CLUSTER_WIDE_CHANGES.write().await;
    let webhooks_own = |entry: &serde_json::Value| {
        let object = &entry["objectRef"];
        entry["user"]["username"] == clair_testenv::OPERATOR
            && entry["stage"] == "ResponseComplete"
            && (object["name"] == CONFIGURATION_NAME || object["name"] == SECRET_NAME)
    };
    // Settled (whatever woke it last is a second or two behind), then five quiet seconds:
    // polling at its recheck would read each of the three about five times.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let quiet = std::time::SystemTime::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let asked: Vec<String> = crate::support::audited_since(env, quiet, webhooks_own)?
        .iter()
        .filter(|e| e["verb"] != "watch")
        .map(crate::support::request_line)
        .collect();
    ensure!(
        asked.is_empty(),
        "a settled webhook read its own objects with nothing changed: {asked:?}"
    );

    let client = env.client().await?;
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client);
    let deleted = std::time::SystemTime::now();
    configurations
        .delete(CONFIGURATION_NAME, &DeleteParams::default())
        .await?;
    // Its hourly check cannot be what brings it back.
    eventually(
        Duration::from_secs(10),
        "the configuration restored",
        || {
            let configurations = configurations.clone();
            async move { Ok(configurations.get_opt(CONFIGURATION_NAME).await?.is_some()) }
        },
    )
    .await?;
    let restored = crate::support::audited_since(env, deleted, webhooks_own)?
        .iter()
        .any(|e| {
            e["verb"] == "patch" && e["objectRef"]["resource"] == "validatingwebhookconfigurations"
        });
    ensure!(
        restored,
        "the configuration came back, but not by the operator's apply"
    );
    Ok(())
}

fn templated(kind: &str, name: &str, template: &str) -> String {
    let data = if kind == "Secret" {
        "stringData"
    } else {
        "data"
    };
    let indented: String = template.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: {kind}\nmetadata:\n  name: {name}\n  labels:\n    clair.projectquay.io/template-config: \"true\"\n  annotations:\n    clair.projectquay.io/template-input: config.yaml.in\n    clair.projectquay.io/template-output: config.yaml\n{data}:\n  config.yaml.in: |\n{indented}"
    )
}

pub async fn output_of(env: &TestEnv, ns: &str, name: &str) -> anyhow::Result<Option<String>> {
    let secrets: Api<Secret> = Api::namespaced(env.client().await?, ns);
    Ok(secrets.get(name).await?.data.and_then(|d| {
        d.get("config.yaml")
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    }))
}

pub async fn templating_resolves_references_the_author_may_read(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let _templating = crate::support::CLUSTER_WIDE_CHANGES.read().await;
    webhook_registered(env).await?;
    let ns = env.namespace("template").await?;
    let apply = ["apply", "--server-side", "-f", "-"];
    let database = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: database\nstringData:\n  DSN: \"host=db user=clair password='p: #1'\"\n";
    ensure!(env.kubectl_run(&ns, &apply, Some(database))?.success);
    let addresses = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: addresses\ndata:\n  indexer: http://indexer:6060\n";
    ensure!(env.kubectl_run(&ns, &apply, Some(addresses))?.success);

    let template = "matcher:\n  connstring: secret://database/DSN\n  indexer_addr: configmap://addresses/indexer\n";
    let created = env.kubectl_run(
        &ns,
        &apply,
        Some(&templated("Secret", "clair-config", template)),
    )?;
    ensure!(created.success, "{}", created.stderr);
    // The webhook seals; the re-render controller writes the output (the webhook's answer
    // never holds a value: docs/security.md).
    eventually(Duration::from_secs(60), "the output rendered", || async {
        Ok(output_of(env, &ns, "clair-config").await?.is_some())
    })
    .await?;
    let output = output_of(env, &ns, "clair-config")
        .await?
        .context("no rendered output")?;
    let rendered: serde_json::Value = serde_saphyr::from_str(&output)?;
    ensure!(
        rendered["matcher"]["connstring"] == "host=db user=clair password='p: #1'",
        "{output}"
    );
    ensure!(
        rendered["matcher"]["indexer_addr"] == "http://indexer:6060",
        "{output}"
    );

    // A Secret's value never goes into a ConfigMap.
    let leak = env.kubectl_run(
        &ns,
        &apply,
        Some(&templated("ConfigMap", "leaky", template)),
    )?;
    ensure!(
        !leak.success && leak.stderr.contains("never written into a ConfigMap"),
        "{}",
        leak.stderr
    );

    // alice may create Secrets here but not read `database`: her template is refused.
    let rbac = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: writer\nrules:\n- apiGroups: [\"\"]\n  resources: [secrets]\n  verbs: [create]\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: alice-writer\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: writer\nsubjects:\n- kind: User\n  name: alice\n";
    ensure!(env.kubectl_run(&ns, &apply, Some(rbac))?.success);
    let denied = env.kubectl_run_as(
        "alice",
        &ns,
        &["create", "-f", "-"],
        Some(&templated("Secret", "alices", template)),
    )?;
    ensure!(!denied.success, "alice read a Secret she may not get");
    ensure!(
        denied
            .stderr
            .contains("user alice may not get secrets database"),
        "{}",
        denied.stderr
    );
    // What she may read, she may use.
    let allowed = env.kubectl_run_as(
        "alice",
        &ns,
        &["create", "-f", "-"],
        Some(&templated(
            "Secret",
            "alices",
            "matcher:\n  indexer_addr: configmap://addresses/indexer\n",
        )),
    )?;
    ensure!(allowed.success, "{}", allowed.stderr);

    // Rotating the referenced Secret re-renders the output.
    let rotated = database.replace("password='p: #1'", "password=rotated");
    ensure!(env.kubectl_run(&ns, &apply, Some(&rotated))?.success);
    eventually(
        Duration::from_secs(60),
        "the output re-rendered",
        || async {
            Ok(output_of(env, &ns, "clair-config")
                .await?
                .is_some_and(|o| o.contains("password=rotated")))
        },
    )
    .await
}

pub async fn resources_get_warnings_for_what_the_schema_cannot_check(
    env: &TestEnv,
) -> anyhow::Result<()> {
    webhook_registered(env).await?;
    let ns = env.namespace("resources").await?;
    let indexer = "apiVersion: clair.projectquay.io/v1alpha1\nkind: Indexer\nmetadata:\n  name: early\nspec:\n  config:\n    root:\n      configMap: {name: later, key: config.yaml}\n  autoscaling: {maxReplicas: 3, targetCPUUtilizationPercentage: 70}\n";
    // The webhook's failure policy is Ignore: wait until it answers with its warnings.
    let mut last = String::new();
    eventually(Duration::from_secs(30), "resource warnings", || {
        let outcome = env.kubectl_run(&ns, &["apply", "--server-side", "-f", "-"], Some(indexer));
        let ok = outcome.as_ref().is_ok_and(|o| {
            o.success
                && o.stderr.contains("ConfigMap later does not exist")
                && o.stderr.contains("requests.cpu is unset")
        });
        if let Ok(o) = &outcome {
            last = o.stderr.clone();
        }
        async move { Ok(ok) }
    })
    .await
    .with_context(|| format!("last kubectl output: {last}"))?;
    Ok(())
}

fn write_certificate(
    dir: &std::path::Path,
) -> anyhow::Result<clair_operator::webhook::certs::Bundle> {
    let bundle = clair_operator::webhook::certs::issue(
        &["127.0.0.1".to_string()],
        None,
        time::OffsetDateTime::now_utc(),
    )?;
    std::fs::write(dir.join("ca.crt"), &bundle.ca_cert)?;
    std::fs::write(dir.join("tls.crt"), &bundle.cert)?;
    std::fs::write(dir.join("tls.key"), &bundle.key)?;
    Ok(bundle)
}

/// An HTTPS request to the server, trusting only `ca`: succeeds only if the server presents
/// a certificate `ca` signed. The error is curl's.
fn handshake(port: u16, ca: &std::path::Path) -> anyhow::Result<()> {
    let url = format!("https://127.0.0.1:{port}/validate-config");
    let output = std::process::Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--noproxy",
            "*",
            "--output",
            "/dev/null",
        ])
        .args(["--max-time", "5", "--cacert"])
        .arg(ca)
        .args(["-X", "POST", "-d", "{}", &url])
        .output()?;
    ensure!(
        output.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

pub async fn a_mounted_certificate_is_served_and_reloaded(env: &TestEnv) -> anyhow::Result<()> {
    use clair_operator::webhook::register::{Settings, Target, run};
    let dir = tempfile::tempdir()?;
    let first = write_certificate(dir.path())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    // Its own configuration name, so the operator's own webhook is left alone, and called
    // for a namespace of its own, so it stamps no other test's templates with its seal.
    let name = "clair-operator-mounted-test";
    let own = env.namespace("mounted").await?;
    let settings = Settings {
        name: name.to_string(),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        target: Target::Url(format!("https://127.0.0.1:{port}")),
        hosts: vec!["127.0.0.1".to_string()],
        namespace: "clair-operator".to_string(),
        recheck: Duration::from_secs(1),
        mounted: Some(dir.path().to_path_buf()),
        register: true,
        platform: crate::support::platform(),
        namespaces: vec![own],
        callers: Default::default(),
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let client = env.client().await?;
    let seal = clair_operator::templating::seal::Seal::from_key(vec![1; 32]);
    let telemetry = clair_operator::metrics::Telemetry::new();
    let health = telemetry.health.clone();
    let server = tokio::spawn(run(client.clone(), settings, seal, telemetry, async move {
        let mut stopped = stopped;
        let _ = stopped.wait_for(|s| *s).await;
    }));
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let bundle_is = |ca: String| {
        let configurations = configurations.clone();
        async move {
            let Some(c) = configurations.get_opt(name).await? else {
                return Ok(false);
            };
            let bundle = c
                .webhooks
                .unwrap_or_default()
                .first()
                .and_then(|w| w.client_config.ca_bundle.clone());
            Ok(bundle.map(|b| b.0) == Some(ca.into_bytes()))
        }
    };
    let outcome: anyhow::Result<()> = async {
        eventually(Duration::from_secs(30), "the mounted CA registered", || {
            bundle_is(first.ca_cert.clone())
        })
        .await?;
        let old_ca = dir.path().join("old-ca.crt");
        std::fs::write(&old_ca, &first.ca_cert)?;
        eventually(
            Duration::from_secs(30),
            "the mounted certificate served",
            || async { handshake(port, &old_ca).map(|()| true) },
        )
        .await?;

        // cert-manager renews: new files, picked up without a restart.
        let second = write_certificate(dir.path())?;
        eventually(Duration::from_secs(30), "the renewed CA registered", || {
            bundle_is(second.ca_cert.clone())
        })
        .await?;
        let new_ca = dir.path().join("ca.crt");
        eventually(
            Duration::from_secs(30),
            "the renewed certificate served",
            || async { handshake(port, &new_ca).map(|()| true) },
        )
        .await?;
        ensure!(
            handshake(port, &old_ca).is_err(),
            "the old certificate is still served"
        );
        Ok(())
    }
    .await;
    // While it serves, liveness and readiness hold; once its tasks end, liveness fails
    // naming the webhook server (what the operator's /healthz answers).
    let serving = (health.live(), health.ready());
    let _ = stop.send(true);
    let _ = server.await;
    let ended = health.live();
    // A configuration pointing at a stopped server would refuse every labelled write.
    let _ = configurations.delete(name, &DeleteParams::default()).await;
    let mutating: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(client);
    let _ = mutating.delete(name, &DeleteParams::default()).await;
    outcome?;
    ensure!(
        serving == (Ok(()), Ok(())),
        "a serving webhook is not healthy: {serving:?}"
    );
    let dead = ended.err().unwrap_or_default();
    ensure!(
        dead.iter().any(|part| part == "webhook server"),
        "a stopped webhook server left liveness passing: {dead:?}"
    );
    Ok(())
}
