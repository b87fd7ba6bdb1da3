//! A `Clair` on a real node, end to end, wired to a Quay (`spec.quay`): in a namespace that
//! enforces Pod Security `restricted`, its pods start from Clair's image (non-numeric user
//! and all), pass their real probes and reach each other by Service DNS; the updater
//! CronJob's pod imports vulnerability data into the matcher's database; a manifest indexed
//! as Quay indexes it (through the routing host and the ingress stand-in, over TLS, signed
//! with the key of Secret `clair-quay`, the ETag checked) gets a vulnerability report naming
//! exactly the known vulnerability (and none for the fixed version); then the updater's next
//! operation adds a vulnerability, the notifier's deliveries to a Quay with the wrong key
//! fail and `NotificationsDelivered` says so, and once Quay has the Secret's key the
//! notification is delivered once, paged through the endpoint to exactly the new
//! vulnerability, and deleted.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use clair_operator::api::Phase;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::fixtures::{
    FIXED_VERSION, FixtureServer, Layer, NEW_VULNERABILITY, PACKAGE, VULNERABILITY,
    VULNERABLE_VERSION, agent_within, alpine_layer, digest, psk_token, send,
};
use crate::quay::{self, Quay};
use crate::support::clair::{
    apply_json, condition, create_clair, external_databases, external_spec, phase_is, secret_text,
    wait_clair_within,
};
use crate::support::{FIELD_MANAGER, TestEnv, eventually};

/// Real pods: images unpacked, Clair's migrations, probes' periods.
pub const START: Duration = Duration::from_secs(420);

/// A namespace whose pods must meet Pod Security `restricted`.
pub async fn restricted_namespace(env: &TestEnv, prefix: &str) -> anyhow::Result<String> {
    let ns = env.namespace(prefix).await?;
    let api: Api<Namespace> = Api::all(env.client().await?);
    api.patch(
        &ns,
        &PatchParams::apply(FIELD_MANAGER),
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            }},
        })),
    )
    .await?;
    Ok(ns)
}

/// The indexer's settings of an air-gapped cluster: its RHEL mapping files from a local
/// URL (Clair fetches them from the Internet otherwise, and every index fails without them).
pub fn airgapped_indexer(server: &FixtureServer) -> String {
    format!(
        "indexer:\n  airgap: true\n  scanner:\n    repo:\n      rhel-repository-scanner:\n        repo2cpe_mapping_url: {}\n    package:\n      rhel_containerscanner:\n        name2repos_mapping_url: {}\n",
        server.url("repo2cpe.json"),
        server.url("name2repos.json"),
    )
}

/// The drop-in users of an air-gapped cluster add: the notifier's delivery, and the
/// indexer's settings of [`airgapped_indexer`].
pub async fn airgapped_dropin(
    client: &Client,
    ns: &str,
    server: &FixtureServer,
) -> anyhow::Result<()> {
    let text = format!(
        "{}notifier:\n  webhook:\n    target: {}\n    callback: http://clair-notifier.{ns}.svc:6060/notifier/api/v1/notification/\n",
        airgapped_indexer(server),
        server.url("notify"),
    );
    apply_json::<ConfigMap>(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "delivery"}, "data": {"notifier.yaml": text}}),
    )
    .await
}

/// Waits until the namespace's Deployments (not Jobs) have `expected` pods, all Running
/// and Ready, each run as the numeric user the operator set for Clair's `nobody`.
pub async fn pods_serve_as_nobody(
    client: &Client,
    ns: &str,
    expected: usize,
) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(120),
        &format!("{expected} Clair pods Running and Ready as 65534"),
        || async move {
            let serving = pods_running_as_nobody(client, ns).await?;
            ensure!(serving == expected, "{serving} Clair pods serve");
            Ok(true)
        },
    )
    .await
}

/// Every pod of the namespace's Deployments (not Jobs) Running and Ready, each container
/// run as the numeric user the operator set for Clair's `nobody`; how many there are.
async fn pods_running_as_nobody(client: &Client, ns: &str) -> anyhow::Result<usize> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods.list(&ListParams::default()).await?;
    let mut serving = 0;
    for pod in &list.items {
        let owner = pod
            .owner_references()
            .first()
            .map(|o| o.kind.as_str())
            .unwrap_or_default();
        if owner != "ReplicaSet" {
            continue;
        }
        let status = pod.status.as_ref().context("pod status")?;
        ensure!(
            status.phase.as_deref() == Some("Running"),
            "pod {} is {:?}: {:?}",
            pod.name_any(),
            status.phase,
            status.container_statuses
        );
        let ready = status
            .conditions
            .as_ref()
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        ensure!(ready, "pod {} is not Ready", pod.name_any());
        let security = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .context("pod security context")?;
        ensure!(
            security.run_as_user == Some(65534) && security.run_as_non_root == Some(true),
            "pod {} runs as {:?}",
            pod.name_any(),
            security.run_as_user
        );
        serving += 1;
    }
    Ok(serving)
}

/// The operator's validating webhook, which the apiserver calls through the operator's
/// Service in the cluster, refuses a labelled ConfigMap with an invalid config and names
/// the field.
fn webhook_refuses_an_invalid_config(env: &TestEnv, ns: &str) -> anyhow::Result<()> {
    let manifest = r#"{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bad-config",
                     "labels": {"clair.projectquay.io/validate-config": "true"},
                     "annotations": {"clair.projectquay.io/config": "config.yaml"}},
        "data": {"config.yaml": "http_listen_addr: :6060\nlog_level: loud\n"}}"#;
    let outcome = env.kubectl_run(ns, &["apply", "-f", "-"], Some(manifest))?;
    ensure!(
        !outcome.success && outcome.stderr.contains("log_level"),
        "the in-cluster webhook did not refuse an invalid config: {} {}",
        outcome.stdout,
        outcome.stderr
    );
    Ok(())
}

/// `result`, with the namespace's pods and Events and the operator's log added to an error.
pub fn dump_on_error<T>(env: &TestEnv, ns: &str, result: anyhow::Result<T>) -> anyhow::Result<T> {
    result.map_err(|e| {
        let pods = env
            .kubectl_ok(ns, &["get", "pods", "-o", "wide"])
            .unwrap_or_default();
        let events = env
            .kubectl_ok(ns, &["get", "events", "--sort-by=.lastTimestamp"])
            .unwrap_or_default();
        let operator = env
            .kubectl_ok(
                "clair-operator",
                &["logs", "deployment/clair-operator", "--tail=30"],
            )
            .unwrap_or_default();
        e.context(format!(
            "pods:\n{pods}\nevents:\n{events}\noperator log:\n{operator}"
        ))
    })
}

/// A run of the updater CronJob's Job template that fails at once (its own name, never
/// restarted): `UpdatersReady` turns False naming the Job and its reason.
async fn an_updater_failure_is_reported(client: &Client, ns: &str) -> anyhow::Result<()> {
    let cronjob = Api::<CronJob>::namespaced(client.clone(), ns)
        .get("clair-updaters")
        .await?;
    let template = cronjob
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .context("the CronJob's job template")?;
    let mut spec = template.spec.context("the job template's spec")?;
    spec.backoff_limit = Some(0);
    let pod = spec.template.spec.as_mut().context("the pod spec")?;
    pod.restart_policy = Some("Never".to_string());
    pod.containers[0].command = Some(vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        "echo this run is broken on purpose; exit 3".to_string(),
    ]);
    pod.containers[0].args = None;
    let job = Job {
        metadata: kube::api::ObjectMeta {
            name: Some("updaters-broken".to_string()),
            labels: template.metadata.and_then(|m| m.labels),
            owner_references: Some(vec![
                cronjob
                    .controller_owner_ref(&())
                    .context("an owner reference")?,
            ]),
            ..Default::default()
        },
        spec: Some(spec),
        ..Default::default()
    };
    Api::<Job>::namespaced(client.clone(), ns)
        .create(&Default::default(), &job)
        .await?;
    let clair = wait_clair_within(
        Duration::from_secs(240),
        client,
        ns,
        "clair",
        "UpdatersReady=False (UpdaterFailed)",
        |c| {
            condition(c, "UpdatersReady")
                .is_some_and(|u| u.status == "False" && u.reason == "UpdaterFailed")
        },
    )
    .await?;
    let message = &condition(&clair, "UpdatersReady")
        .context("UpdatersReady")?
        .message;
    ensure!(
        message.contains("updaters-broken") && message.contains("BackoffLimitExceeded"),
        "the condition names the Job and its reason: {message}"
    );
    let updaters = clair
        .status
        .and_then(|s| s.updaters)
        .context("status.updaters")?;
    ensure!(updaters.failed_runs == 1, "failed runs: {updaters:?}");
    Ok(())
}

/// After a successful run: `UpdatersReady=True`, and the operator's age metric of the data
/// (scraped from its pod) is fresh.
async fn an_updater_success_is_reported(
    env: &TestEnv,
    client: &Client,
    ns: &str,
) -> anyhow::Result<()> {
    let clair = wait_clair_within(
        Duration::from_secs(360),
        client,
        ns,
        "clair",
        "UpdatersReady=True (UpdatersSucceeded)",
        |c| {
            condition(c, "UpdatersReady")
                .is_some_and(|u| u.status == "True" && u.reason == "UpdatersSucceeded")
        },
    )
    .await?;
    ensure!(
        clair
            .status
            .and_then(|s| s.updaters)
            .is_some_and(|u| u.last_success_time.is_some()),
        "status.updaters.lastSuccessTime is set"
    );
    let pods = Api::<Pod>::namespaced(client.clone(), "clair-operator")
        .list(&ListParams::default().labels("app.kubernetes.io/name=clair-operator"))
        .await?;
    // Two replicas: the leader runs the controllers and reports the Clairs.
    let ips: Vec<String> = pods
        .items
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    ensure!(!ips.is_empty(), "no operator pod has an IP");
    let series = format!(
        "clair_operator_updater_last_success_age_seconds{{kind=\"Clair\",namespace=\"{ns}\",name=\"clair\"}}"
    );
    // Scraped as Prometheus scrapes them: over TLS, with a token of the reader role.
    let token = env.scraper_token()?;
    eventually(Duration::from_secs(60), "a fresh age of the data", || {
        let (ips, series, token) = (ips.clone(), series.clone(), token.clone());
        async move {
            for ip in ips {
                let (token, url) = (token.clone(), format!("https://{ip}:8080/metrics"));
                let (status, text) = tokio::task::spawn_blocking(move || {
                    clair_testenv::scrape::get(&url, Some(&token), "text/plain")
                })
                .await??;
                ensure!(status == 200, "GET /metrics of {ip}: {status}");
                if let Some(age) = text.lines().find_map(|l| l.strip_prefix(&series)) {
                    return Ok(age.trim().parse::<f64>()? < 600.0);
                }
            }
            anyhow::bail!("no operator replica reports the age series")
        }
    })
    .await
}

/// Waits up to `within` until the Clair `clair` in `ns` is Available (`what` says how, for
/// the failure); on failure the namespace's state is printed with it.
pub async fn until_available(
    env: &TestEnv,
    client: &Client,
    ns: &str,
    within: Duration,
    what: &str,
) -> anyhow::Result<()> {
    let available = wait_clair_within(
        within,
        client,
        ns,
        "clair",
        what,
        phase_is(Phase::Available),
    )
    .await;
    dump_on_error(env, ns, available).map(|_| ())
}

/// The updaters in the CronJob, importing the vulnerability data `server` serves.
pub fn updaters_importing(server: &FixtureServer) -> Value {
    json!({"mode": "CronJob", "schedule": "0 */6 * * *", "import": {"url": server.url("export.json")}})
}

/// Runs the updater CronJob now, as an SRE would (`kubectl create job --from`), and waits
/// for its pod to succeed.
pub async fn run_updaters_now(env: &TestEnv, client: &Client, ns: &str) -> anyhow::Result<()> {
    run_updaters_as(env, client, ns, "updaters-now").await
}

/// As [`run_updaters_now`], the Job named `job`.
pub async fn run_updaters_as(
    env: &TestEnv,
    client: &Client,
    ns: &str,
    job: &str,
) -> anyhow::Result<()> {
    env.kubectl_ok(ns, &["create", "job", job, "--from=cronjob/clair-updaters"])?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    eventually(
        Duration::from_secs(240),
        "the updater Job to succeed",
        || {
            let jobs = jobs.clone();
            async move {
                let job = jobs.get(job).await?;
                let status = job.status.unwrap_or_default();
                if status.failed.unwrap_or(0) > 0 {
                    bail!("the updater Job failed: {:?}", status.conditions);
                }
                Ok(status.succeeded.unwrap_or(0) > 0)
            }
        },
    )
    .await
    .map_err(|e| {
        let logs = env
            .kubectl_ok(ns, &["logs", &format!("job/{job}"), "--all-containers"])
            .unwrap_or_else(|e| format!("(no logs: {e})"));
        e.context(format!("updater logs:\n{logs}"))
    })
}

/// A token signed with the Clair's pre-shared key (Secret `clair-psk`) as Quay signs its
/// requests.
pub async fn quay_token(client: &Client, ns: &str) -> anyhow::Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let psk = secret_text(&secrets.get("clair-psk").await?, "key")?;
    psk_token(&psk, "quay")
}

/// `http://CLUSTER-IP:6060`: the Service as the host reaches it (through kube-proxy), once
/// it accepts connections.
pub async fn service_url(client: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let ip = services
        .get(name)
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .context("a Service without a cluster IP")?;
    // kube-proxy programs the Service's endpoints a moment after the pods turn Ready (under
    // load, seconds); until then the harness refuses the host's packets to the Service's
    // address, so an accepted connection is one to a pod. Each try is short: a connection
    // DNATed to a pod that is gone never answers.
    eventually(
        Duration::from_secs(60),
        &format!("Service {name} to accept connections"),
        || {
            let address = format!("{ip}:6060");
            async move {
                let attempt = tokio::net::TcpStream::connect(address);
                Ok(matches!(
                    tokio::time::timeout(Duration::from_secs(2), attempt).await,
                    Ok(Ok(_))
                ))
            }
        },
    )
    .await?;
    Ok(format!("http://{ip}:6060"))
}

/// Indexes a one-layer manifest through the Service `clair-indexer` of `ns` and returns its
/// report. An unexpected answer names the server that gave it and the pods behind the
/// Service's addresses.
pub async fn index(client: &Client, ns: &str, token: &str, layer: &Layer) -> anyhow::Result<Value> {
    let indexer = service_url(client, ns, "clair-indexer").await?;
    // The manifest digest is any unique digest: the layer's digest hashed with a salt.
    let manifest = digest(format!("{}manifest", layer.digest).as_bytes());
    let body = json!({
        "hash": manifest,
        "layers": [{"hash": layer.digest, "uri": layer.url, "headers": {}}],
    });
    let answer = send(
        &agent_within(Duration::from_secs(30)),
        "POST",
        format!("{indexer}/indexer/api/v1/index_report"),
        Some(token.to_string()),
        Some(body.to_string()),
    )
    .await?;
    if answer.status != 201 && answer.status != 200 {
        bail!(
            "index_report at {indexer} answered {} {:?} with headers {:?}; {}",
            answer.status,
            answer.body,
            answer.headers,
            behind_service(client, ns, "clair-indexer").await
        );
    }
    let report: Value = serde_json::from_str(&answer.body)?;
    ensure!(
        report["state"] == "IndexFinished" && report["success"] == true,
        "the index did not finish: {report}"
    );
    Ok(report)
}

/// What a Service sends to, for a failure's message: each address of its EndpointSlices and
/// every pod in the cluster that holds that address (two would be a reused pod address).
pub async fn behind_service(client: &Client, ns: &str, name: &str) -> String {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::all(client.clone());
    let listed = futures::future::join(
        slices.list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}"))),
        pods.list(&ListParams::default()),
    )
    .await;
    let (slices, pods) = match listed {
        (Ok(slices), Ok(pods)) => (slices, pods),
        (Err(e), _) | (_, Err(e)) => return format!("the Service {name}'s endpoints unread: {e}"),
    };
    let addresses: Vec<String> = slices
        .items
        .iter()
        .flat_map(|slice| &slice.endpoints)
        .flat_map(|endpoint| endpoint.addresses.clone())
        .collect();
    let holders = |address: &String| -> Vec<String> {
        pods.items
            .iter()
            .filter(|pod| {
                pod.status
                    .as_ref()
                    .and_then(|s| s.pod_ip.as_ref())
                    .is_some_and(|ip| ip == address)
            })
            .map(|pod| {
                format!(
                    "{}/{} ({}{})",
                    pod.namespace().unwrap_or_default(),
                    pod.name_any(),
                    pod.status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default(),
                    if pod.metadata.deletion_timestamp.is_some() {
                        ", terminating"
                    } else {
                        ""
                    }
                )
            })
            .collect()
    };
    let described: Vec<String> = addresses
        .iter()
        .map(|address| format!("{address} held by {:?}", holders(address)))
        .collect();
    format!("the Service {name} sends to {described:?}")
}

/// The matcher's vulnerability report for the manifest of `index_report`; waits while the
/// matcher answers 202 (no vulnerability data yet).
pub async fn vulnerability_report(
    matcher: &str,
    token: &str,
    index_report: &Value,
) -> anyhow::Result<Value> {
    let agent = agent_within(Duration::from_secs(30));
    vulnerability_report_with(&agent, matcher, token, index_report).await
}

/// As [`vulnerability_report`], asked with `agent` at `base`.
pub async fn vulnerability_report_with(
    agent: &ureq::Agent,
    base: &str,
    token: &str,
    index_report: &Value,
) -> anyhow::Result<Value> {
    let manifest = index_report["manifest_hash"]
        .as_str()
        .context("the index report names no manifest")?;
    let url = format!("{base}/matcher/api/v1/vulnerability_report/{manifest}");
    for _ in 0..60 {
        let answer = send(agent, "GET", url.clone(), Some(token.to_string()), None).await?;
        let (status, text) = (answer.status, answer.body);
        match status {
            200 => return Ok(serde_json::from_str(&text)?),
            202 => tokio::time::sleep(Duration::from_secs(2)).await,
            _ => bail!("vulnerability_report answered {status}: {text}"),
        }
    }
    bail!("the matcher kept answering 202 for {manifest}")
}

/// The names of the vulnerabilities the report gives for the package called `name`.
pub fn vulnerabilities_of(report: &Value, name: &str) -> Vec<String> {
    let packages = report["packages"].as_object().cloned().unwrap_or_default();
    let mut found = Vec::new();
    for (id, package) in packages {
        if package["name"] != name {
            continue;
        }
        for vuln_id in report["package_vulnerabilities"][&id]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let vuln_id = vuln_id.as_str().unwrap_or_default();
            if let Some(vuln) = report["vulnerabilities"].get(vuln_id) {
                found.push(vuln["name"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    found
}

pub async fn a_clair_on_a_real_node_finds_a_known_vulnerability(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = restricted_namespace(env, "scan").await?;
    webhook_refuses_an_invalid_config(env, &ns)?;
    external_databases(env, &client, &ns).await?;

    let vulnerable = alpine_layer(VULNERABLE_VERSION)?;
    let fixed = alpine_layer(FIXED_VERSION)?;
    let server =
        FixtureServer::for_scans(&[("vulnerable", &vulnerable), ("fixed", &fixed)]).await?;
    // The Clair is Quay's: its host routed by the ingress stand-in with TLS, its notifier
    // delivering to a receiver that does what Quay does (with a wrong key, for now).
    let quay = Quay::prepare(env, &client, &ns).await?;
    quay::dropin(&client, &ns, &server).await?;
    let mut spec = external_spec();
    spec["updaters"] = updaters_importing(&server);
    quay.wire(&mut spec);
    create_clair(&client, &ns, "clair", spec.clone()).await?;

    // Available because the pods really are: Running, Ready by their real probes.
    until_available(env, &client, &ns, START, "clair Available on the real node").await?;
    pods_serve_as_nobody(&client, &ns, 3).await?;

    // A failed updater run turns UpdatersReady False with the Job's reason; then the
    // updater CronJob's pod imports the vulnerability into the matcher's database, and
    // UpdatersReady turns True with fresh data.
    an_updater_failure_is_reported(&client, &ns).await?;
    run_updaters_now(env, &client, &ns).await?;
    an_updater_success_is_reported(env, &client, &ns).await?;
    let found = env.postgres.sql_in(
        &format!("{}_matcher", ns.replace('-', "_")),
        &format!("SELECT name FROM vuln WHERE name = '{VULNERABILITY}'"),
    )?;
    ensure!(found == VULNERABILITY, "the import did not land: {found:?}");
    quay::first_operation_processed(env, &ns).await?;

    // A real scan, as Quay runs one, with only what Secret clair-quay tells Quay: index
    // through the endpoint (the routing host, through the stand-in, over TLS), then ask the
    // matcher there (which fetches the index report from the indexer by its Service DNS name).
    let side = quay::Side::read(&client, &ns).await?;
    ensure!(
        side.endpoint == format!("https://{}", quay.host),
        "Quay's endpoint should be the routing host over TLS: {}",
        side.endpoint
    );
    let router = env
        .plane
        .addons()
        .context("the real node runs no ingress stand-in")?
        .router();
    router
        .serving(&client, &ns, "clair", Duration::from_secs(60))
        .await?;
    let token = side.token()?;
    let endpoint = side.endpoint.as_str();
    let state = format!("{endpoint}/indexer/api/v1/index_state");
    let unsigned = send(&quay.agent, "GET", state.clone(), None, None).await?;
    ensure!(
        unsigned.status == 401,
        "an unsigned request got {}, not 401",
        unsigned.status
    );
    // Plain HTTP to a TLS host is redirected, as ingress-nginx does.
    let plain = send(
        &quay.agent,
        "GET",
        format!("http://{}/indexer/api/v1/index_state", quay.host),
        None,
        None,
    )
    .await?;
    ensure!(
        plain.status == 308,
        "plain HTTP to the TLS host got {}, not 308",
        plain.status
    );
    // The ETag arrives as Clair sent it: the same through the stand-in as from the Service.
    let indexer = service_url(&client, &ns, "clair-indexer").await?;
    let direct = send(
        &agent_within(Duration::from_secs(30)),
        "GET",
        format!("{indexer}/indexer/api/v1/index_state"),
        Some(token.clone()),
        None,
    )
    .await?;
    let routed = send(&quay.agent, "GET", state, Some(token.clone()), None).await?;
    ensure!(
        routed.status == 200 && routed.etag.is_some() && routed.etag == direct.etag,
        "index_state's ETag through the stand-in {:?} ({}) should be the Service's {:?}",
        routed.etag,
        routed.status,
        direct.etag
    );

    let (report, _etag) =
        quay::index_as_quay(&quay.agent, endpoint, &token, &server.layer("vulnerable")?).await?;
    let vulnerabilities = vulnerability_report_with(&quay.agent, endpoint, &token, &report).await?;
    let names = vulnerabilities_of(&vulnerabilities, PACKAGE);
    ensure!(
        names == [VULNERABILITY],
        "busybox {VULNERABLE_VERSION} should have exactly {VULNERABILITY}: {names:?}; report: {vulnerabilities}"
    );
    let manifest = report["manifest_hash"]
        .as_str()
        .context("the index report names no manifest")?
        .to_string();

    let (fixed_report, _) =
        quay::index_as_quay(&quay.agent, endpoint, &token, &server.layer("fixed")?).await?;
    let vulnerabilities =
        vulnerability_report_with(&quay.agent, endpoint, &token, &fixed_report).await?;
    let packages = vulnerabilities["packages"]
        .as_object()
        .map_or(0, |p| p.len());
    ensure!(
        packages == 1,
        "the fixed layer's package was not found: {vulnerabilities}"
    );
    let names = vulnerabilities_of(&vulnerabilities, PACKAGE);
    ensure!(
        names.is_empty(),
        "busybox {FIXED_VERSION} is fixed, yet: {names:?}"
    );

    // Nothing waits to be delivered yet.
    quay::delivering(&client, &ns).await?;
    // The updater's next operation adds a vulnerability to the manifest indexed: the notifier
    // delivers, and the receiver, with a key that is not Clair's, refuses every attempt.
    quay::import_the_next_operation(&client, &ns, &mut spec, &server).await?;
    run_updaters_as(env, &client, &ns, "updaters-again").await?;
    let refused = quay::receiver_sees(
        &quay.receiver,
        Duration::from_secs(240),
        "a delivery refused for its key",
        |seen| seen.refused.iter().any(|(status, _)| *status == 401),
    )
    .await;
    quay::with_notifier_state(env, &ns, refused)?;
    let message = quay::deliveries_are(
        &client,
        &ns,
        "False",
        "DeliveriesFailing",
        Duration::from_secs(300),
    )
    .await?;
    ensure!(
        message.contains("1 notification(s) not delivered"),
        "the condition should count the one notification: {message}"
    );
    // Quay given the values of Secret clair-quay: the next attempt is accepted, paged through
    // the endpoint and deleted.
    quay.configure_from_secret(&client, &ns).await?;
    let seen = quay::receiver_sees(
        &quay.receiver,
        Duration::from_secs(180),
        "a notification paged and deleted",
        |seen| !seen.deleted.is_empty() || !seen.errors.is_empty(),
    )
    .await;
    let seen = quay::with_notifier_state(env, &ns, seen)?;
    let deleted_at = std::time::Instant::now();
    quay::exactly(&seen, &manifest, NEW_VULNERABILITY)?;
    let notification = &seen.deleted[0];
    let status = env.postgres.sql_in(
        &format!("{}_notifier", ns.replace('-', "_")),
        &format!("SELECT status FROM receipt WHERE notification_id = '{notification}'"),
    )?;
    ensure!(
        status.trim() == "deleted",
        "the notifier should record notification {notification} deleted: {status:?}"
    );
    quay::delivering(&client, &ns).await?;
    // No redelivery: a whole delivery interval later, still the one delivery.
    let interval = Duration::from_secs(65);
    tokio::time::sleep(interval.saturating_sub(deleted_at.elapsed())).await;
    let delivered = quay.receiver.seen().delivered;
    ensure!(
        delivered.len() == 1 && delivered[0] == *notification,
        "the notification should have been delivered once: {delivered:?}"
    );
    Ok(())
}
