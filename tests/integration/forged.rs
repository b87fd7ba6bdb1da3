//! Forged admission reviews (docs/security.md, "The webhook's callers"): a review written by
//! hand, claiming a cluster administrator in another tenant's namespace, POSTed straight to
//! the webhook. The suite's operator answers the apiserver alone (its client certificate):
//! such a caller gets no answer at all. A webhook that answers anyone (no client CA, as the
//! default install paths run it) answers, but with nothing it read: no Secret value, no
//! ConfigMap content, not even whether they exist.

use std::time::Duration;

use anyhow::{Context, ensure};
use clair_operator::webhook::register::{Settings, Target};
use clair_operator::webhook::{CONFIGURATION_NAME, TEMPLATE_CONFIG_PATH, VALIDATE_RESOURCE_PATH};
use clair_testenv::forged;
use clair_testenv::https::{self, Answer, Identity};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::Api;

use crate::support::{TestEnv, eventually};

/// Planted in the victim's Secret and in its ConfigMap's (invalid) config.
const MARKER: &str = "Vict1mMarker";

/// A victim namespace: Secret `victim` holding [`MARKER`], ConfigMap `victim-config` whose
/// config is invalid because of it (an unredacted error would quote it).
async fn victim(env: &TestEnv) -> anyhow::Result<String> {
    let ns = env.namespace("victim").await?;
    let objects = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: victim\nstringData:\n  value: {MARKER}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: victim-config\ndata:\n  config.yaml: \"log_level: {MARKER}\\n\"\n"
    );
    let applied = env.kubectl_run(&ns, &["apply", "--server-side", "-f", "-"], Some(&objects))?;
    ensure!(applied.success, "{}", applied.stderr);
    Ok(ns)
}

/// The suite operator's webhook: its loopback address and the CA it serves under.
pub async fn suite_webhook(env: &TestEnv) -> anyhow::Result<(std::net::SocketAddr, String)> {
    crate::webhook::webhook_registered(env).await?;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(env.client().await?);
    let configuration = api.get(CONFIGURATION_NAME).await?;
    let config = &configuration
        .webhooks
        .unwrap_or_default()
        .first()
        .context("a webhook")?
        .client_config
        .clone();
    let url = config
        .url
        .clone()
        .context("the suite's webhook is called by URL")?;
    let address = url
        .trim_start_matches("https://")
        .split('/')
        .next()
        .context("an address")?
        .parse()?;
    let ca = String::from_utf8(config.ca_bundle.clone().context("a caBundle")?.0)?;
    Ok((address, ca))
}

/// A client certificate named as the apiserver's, from a CA of the attacker's own.
fn impostor() -> anyhow::Result<(String, String)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "not the cluster's");
    ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client
        .distinguished_name
        .push(DnType::CommonName, clair_testenv::WEBHOOK_CLIENT_NAME);
    client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    Ok((client.signed_by(&key, &issuer)?.pem(), key.serialize_pem()))
}

pub async fn a_webhook_that_trusts_the_apiserver_alone_answers_no_one_else(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let ns = victim(env).await?;
    let (address, ca) = suite_webhook(env).await?;
    let (cert, key) = impostor()?;
    let reviews = [
        (
            TEMPLATE_CONFIG_PATH,
            forged::template_review(&ns, "victim", "value"),
        ),
        (
            VALIDATE_RESOURCE_PATH,
            forged::resource_review(&ns, "victim-config"),
        ),
    ];
    for (path, review) in &reviews {
        for identity in [
            None,
            Some(Identity {
                cert: &cert,
                key: &key,
            }),
        ] {
            let shown = if identity.is_some() {
                "an impostor's certificate"
            } else {
                "no certificate"
            };
            let answer = https::post(address, "127.0.0.1", &ca, identity, path, review).await?;
            ensure!(
                matches!(answer, Answer::Refused(_)),
                "a forged review to {path} with {shown} was answered: {answer:?}"
            );
        }
    }
    // The apiserver's own calls still get the full checks, reads included: a dry run of the
    // same Indexer by an administrator is warned about the ConfigMap's invalid config.
    let indexer = "apiVersion: clair.projectquay.io/v1alpha1\nkind: Indexer\nmetadata:\n  name: checked\nspec:\n  config:\n    root:\n      configMap: {name: victim-config, key: config.yaml}\n";
    let mut last = String::new();
    eventually(
        Duration::from_secs(30),
        "the apiserver's call answered with reads",
        || {
            let outcome = env.kubectl_run(
                &ns,
                &["apply", "--server-side", "--dry-run=server", "-f", "-"],
                Some(indexer),
            );
            let ok = outcome
                .as_ref()
                .is_ok_and(|o| o.success && o.stderr.contains("log_level"));
            if let Ok(o) = &outcome {
                last = o.stderr.clone();
            }
            async move { Ok(ok) }
        },
    )
    .await
    .with_context(|| format!("last kubectl output: {last}"))
}

/// A webhook server as the install paths run it by default (no client CA), of the test's
/// own, acting with `client`. Not registered with the apiserver: only the test calls it.
struct OpenWebhook {
    address: std::net::SocketAddr,
    ca: String,
    stop: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<Result<(), clair_operator::webhook::register::Error>>,
    _dir: tempfile::TempDir,
}

impl OpenWebhook {
    fn start(client: kube::Client, name: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let bundle = clair_operator::webhook::certs::issue(
            &["127.0.0.1".to_string()],
            None,
            time::OffsetDateTime::now_utc(),
        )?;
        std::fs::write(dir.path().join("tls.crt"), &bundle.cert)?;
        std::fs::write(dir.path().join("tls.key"), &bundle.key)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let settings = Settings {
            name: name.to_string(),
            listen: address,
            target: Target::Url(format!("https://{address}")),
            hosts: vec!["127.0.0.1".to_string()],
            namespace: "clair-operator".to_string(),
            recheck: Duration::from_secs(60),
            mounted: Some(dir.path().to_path_buf()),
            register: false,
            platform: crate::support::platform(),
            namespaces: Vec::new(),
            callers: Default::default(),
        };
        let (stop, server) = crate::support::spawn_webhook(client, settings, 7);
        Ok(Self {
            address,
            ca: bundle.ca_cert,
            stop,
            server,
            _dir: dir,
        })
    }

    /// The answer to `review` at `path` from `sender`, once the server listens (10 s).
    async fn post(
        &self,
        sender: https::Sender,
        path: &str,
        review: &str,
    ) -> anyhow::Result<String> {
        self.post_counted(
            sender,
            path,
            review,
            &std::sync::atomic::AtomicUsize::new(0),
        )
        .await
    }

    /// [`Self::post`], counting in `attempts` each time the review is sent (a connection
    /// refused or an answer not come within 10 s is sent again).
    async fn post_counted(
        &self,
        sender: https::Sender,
        path: &str,
        review: &str,
        attempts: &std::sync::atomic::AtomicUsize,
    ) -> anyhow::Result<String> {
        let mut answer = Answer::Refused(String::new());
        for _ in 0..50 {
            attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            answer = https::post_as(
                sender,
                self.address,
                "127.0.0.1",
                &self.ca,
                None,
                path,
                review,
            )
            .await?;
            if matches!(answer, Answer::Response(..)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        match answer {
            Answer::Response(200, body) => Ok(body),
            other => anyhow::bail!("the open webhook did not answer {path}: {other:?}"),
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
    }
}

pub async fn a_webhook_open_to_anyone_answers_from_the_request_alone(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let ns = victim(env).await?;
    let webhook = OpenWebhook::start(env.client().await?, "clair-operator-open-test")?;
    let outcome = async {
        let post = |path: &'static str, review: String| {
            let webhook = &webhook;
            async move { webhook.post(https::Sender::default(), path, &review).await }
        };
        // The template: admitted with its seal, and nothing of the Secret it names.
        let answer = post(
            TEMPLATE_CONFIG_PATH,
            forged::template_review(&ns, "victim", "value"),
        )
        .await?;
        let patch = forged::patch_of(&answer);
        ensure!(
            !answer.contains(MARKER) && !patch.contains(MARKER),
            "the templating webhook answered a forged review with the Secret's value: {patch}"
        );
        ensure!(
            patch.contains("template-seal") && !patch.contains("/data"),
            "the answer's patch should hold the seal alone: {patch} (answer {answer})"
        );
        // The resource: neither the ConfigMap's content nor whether it exists.
        for config_map in ["victim-config", "no-such-config"] {
            let answer = post(
                VALIDATE_RESOURCE_PATH,
                forged::resource_review(&ns, config_map),
            )
            .await?;
            ensure!(
                !answer.contains(MARKER)
                    && !answer.contains("log_level")
                    && !answer.contains("does not exist"),
                "the resource webhook told a forged review about ConfigMap {config_map}: {answer}"
            );
            let review: serde_json::Value = serde_json::from_str(&answer)?;
            ensure!(
                review["response"]["allowed"] == true,
                "the request itself is fine: {answer}"
            );
        }
        Ok(())
    }
    .await;
    webhook.stop().await;
    outcome
}

/// A client acting as `user` in group `system:masters` (so every access review it makes
/// is its own, told apart in the audit log).
async fn impersonating(env: &TestEnv, user: &str) -> anyhow::Result<kube::Client> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let mut kubeconfig = Kubeconfig::read_from(env.plane.admin_kubeconfig())?;
    for named in &mut kubeconfig.auth_infos {
        if let Some(auth) = named.auth_info.as_mut() {
            auth.impersonate = Some(user.to_string());
            auth.impersonate_groups = Some(vec!["system:masters".to_string()]);
        }
    }
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Issue 54 point 6: a forged review naming more Secrets than the CRDs admit is refused
/// from the request alone, with no access review made for it; a body declared over the
/// largest review is refused unread; and while one address floods the webhook with such
/// reviews, another's reviews (each making its 16 access reviews) are answered.
pub async fn a_forged_flood_is_refused_before_any_access_review(
    env: &TestEnv,
) -> anyhow::Result<()> {
    const USER: &str = "clair-operator-tests:forged-bounds";
    let ns = victim(env).await?;
    let since = std::time::SystemTime::now();
    let webhook = OpenWebhook::start(
        impersonating(env, USER).await?,
        "clair-operator-bounds-test",
    )?;
    let outcome = async {
        let over = forged::resource_review_naming(&ns, 10_000);
        let answer = webhook
            .post(https::Sender::default(), VALIDATE_RESOURCE_PATH, &over)
            .await?;
        let review: serde_json::Value = serde_json::from_str(&answer)?;
        let message = review["response"]["status"]["message"].as_str().unwrap_or_default();
        ensure!(
            review["response"]["allowed"] == false
                && message.contains("spec.config.dropins: 10000 items, over the CRD's maxItems of 16"),
            "a review naming 10,000 Secrets was not refused for the CRD's bound: {answer}"
        );
        // Declared over 6 MiB, sent none of it: answered at once, unread.
        let declared = https::Sender {
            declared: Some(7 * 1024 * 1024),
            ..Default::default()
        };
        let answer = https::post_as(declared, webhook.address, "127.0.0.1", &webhook.ca, None,
            VALIDATE_RESOURCE_PATH, "").await?;
        ensure!(
            matches!(answer, Answer::Response(413, _)),
            "a body declared at 7 MiB was not refused unread: {answer:?}"
        );
        // The flood, from 127.0.0.2: 16 callers, 10 reviews each. Meanwhile 127.0.0.1 sends
        // reviews within the bounds, each naming 16 Secrets.
        let attacker = https::Sender {
            from: Some("127.0.0.2".parse()?),
            ..Default::default()
        };
        let flood = futures::future::join_all((0..16).map(|_| async {
            let mut refused = 0;
            for _ in 0..10 {
                if let Ok(answer) = webhook.post(attacker, VALIDATE_RESOURCE_PATH, &over).await
                    && answer.contains("maxItems")
                {
                    refused += 1;
                }
            }
            refused
        }));
        let within = forged::resource_review_naming(&ns, 16);
        let attempts = std::sync::atomic::AtomicUsize::new(0);
        let legitimate = async {
            let mut answered = Vec::new();
            for _ in 0..5 {
                let start = std::time::Instant::now();
                let answer = webhook
                    .post_counted(https::Sender::default(), VALIDATE_RESOURCE_PATH, &within, &attempts)
                    .await?;
                ensure!(
                    answer.contains("\"allowed\":true"),
                    "a review within the bounds, of a caller claiming system:masters, was refused: {answer}"
                );
                answered.push(start.elapsed());
            }
            Ok::<_, anyhow::Error>(answered)
        };
        let (refused, answered) = tokio::join!(flood, legitimate);
        let answered = answered?;
        let refused: usize = refused.iter().sum();
        println!(
            "forged flood: {refused} of 160 refused for the CRD's bound; reviews within it answered in {answered:?}"
        );
        ensure!(refused == 160, "only {refused} of the 160 forged reviews were refused for the bound");
        // Access reviews: 16 for each review within the bounds, none for the others. A review
        // whose answer did not come within the client's 10 s on a loaded machine is sent
        // again, its first attempt's reviews made too (once seen: 90 for 5 reviews): at most
        // 16 for each attempt, exactly 80 when none was sent again.
        let attempts = attempts.load(std::sync::atomic::Ordering::Relaxed);
        let reviews = crate::support::audited_since(env, since, |entry| {
            entry["impersonatedUser"]["username"] == USER
                && entry["objectRef"]["resource"] == "subjectaccessreviews"
        })?;
        ensure!(
            reviews.len() >= 5 * 16 && reviews.len() <= attempts * 16,
            "{} access reviews made, where the 5 reviews within the bounds ({attempts} attempts) make 80 to {} and the 161 over them none",
            reviews.len(),
            attempts * 16
        );
        Ok(())
    }
    .await;
    webhook.stop().await;
    outcome
}

/// Slow clients (issue 31 point 5): connections from one address that send nothing, or
/// half a request, hold only their share of the server and only for a few seconds; the
/// apiserver's calls are answered meanwhile; a large review the apiserver can send (a 2.5 MiB
/// resource) is read and answered, not refused with a 413 that the fail-open resource
/// webhook would wave through.
pub async fn the_webhook_answers_the_apiserver_while_slow_clients_hold_connections(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ns = env.namespace("slow").await?;
    let (address, _) = suite_webhook(env).await?;
    // From another loopback address than the apiserver's (127.0.0.1).
    let attacker: std::net::IpAddr = "127.0.0.2".parse()?;
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..200 {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind((attacker, 0).into())?;
        let mut stream = socket.connect(address).await?;
        if i % 2 == 0 {
            // Half a TLS record: a handshake that never finishes.
            let _ = stream.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).await;
        }
        held.push(stream);
    }
    // Over the per-address bound, the server closes at once (once it has accepted them).
    tokio::time::sleep(Duration::from_secs(1)).await;
    for stream in &mut held {
        let mut byte = [0u8; 1];
        // Closed: an end of stream, or a reset where the server dropped unread bytes.
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(20), stream.read(&mut byte)).await
        {
            refused += 1;
        }
    }
    // The bound is 32 connections a peer (docs/security.md).
    ensure!(
        refused >= 200 - 32,
        "of 200 connections from one address only {refused} were closed at once (the bound is 32)"
    );
    // The apiserver is still answered: an invalid labelled config is refused, naming the field.
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  labels:\n    clair.projectquay.io/validate-config: \"true\"\n  annotations:\n    clair.projectquay.io/config: config.yaml\ndata:\n  config.yaml: |\n    matcher:\n      period: 1d\n";
    let answered = env.kubectl_run(&ns, &["apply", "--server-side", "-f", "-"], Some(bad))?;
    ensure!(
        !answered.success && answered.stderr.contains("matcher.period"),
        "with slow clients holding connections the webhook did not answer the apiserver: {}",
        answered.stderr
    );
    // The slow ones are cut off after the handshake deadline (5 s).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let mut still_open = 0;
    for stream in &mut held {
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(20), stream.read(&mut byte)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {}
            _ => still_open += 1,
        }
    }
    ensure!(
        still_open == 0,
        "{still_open} slow connections still open after the handshake deadline"
    );
    drop(held);
    // A 2.5 MiB Indexer with an image outside the allow-list, within the CRD's bounds (an
    // affinity's values, Kubernetes' own type, are unbounded) so that the apiserver sends it
    // on: read by the webhook and refused for the image.
    let values: Vec<String> = (0..2500)
        .map(|i| format!("{i}{}", "x".repeat(1000)))
        .collect();
    let indexer = serde_json::json!({
        "apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Indexer",
        "metadata": {"name": "large"},
        "spec": {"image": "evil.example/clair:1",
                 "config": {"root": {"configMap": {"name": "cfg", "key": "config.yaml"}}},
                 "pod": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                     "nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "filler", "operator": "In", "values": values}]}]}}}}},
    })
    .to_string();
    ensure!(
        indexer.len() > 2_500_000,
        "the Indexer is {} bytes",
        indexer.len()
    );
    let large = env.kubectl_run(
        &ns,
        &["create", "--dry-run=server", "-f", "-"],
        Some(&indexer),
    )?;
    ensure!(
        !large.success && large.stderr.contains("--allowed-images"),
        "a 2.5 MiB Indexer with a forbidden image got through: {}",
        large.stderr.chars().take(2000).collect::<String>()
    );
    Ok(())
}
