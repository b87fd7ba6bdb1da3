//! The `Clair` controller on the real control plane, with a real PostgreSQL started by the
//! harness and the real Clair binaries: a Clair with an external database reaches
//! Available with everything it owns; database failures are told apart and never leak a
//! password; a managed database keeps its data claims; the configs the operator renders
//! start real `clair` processes, and the updater command runs against the database.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use clair_operator::api::{Clair, Indexer, Matcher, Notifier, Phase};
use clair_testenv::{Process, clair_binaries};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Secret};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::support::clair::{
    LONG, PASSWORD, apply_json, available_clair, condition, create_clair, external_databases,
    external_inputs, external_spec, notifier_dropin, patch_spec, phase_is, secret_text, wait_clair,
};
use crate::support::{
    FIELD_MANAGER, TestEnv, eventually, operator_requests, operator_writes, request_line,
};

pub async fn a_clair_with_an_external_database_owns_its_services_and_routing(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("clair-external").await?;
    external_inputs(env, &client, &ns).await?;
    let mut spec = external_spec();
    spec["indexer"] = json!({"autoscaling": {"minReplicas": 1, "maxReplicas": 3}});
    create_clair(&client, &ns, "clair", spec).await?;
    let clair = wait_clair(
        &client,
        &ns,
        "clair",
        "clair Available",
        phase_is(Phase::Available),
    )
    .await?;

    // The conditions say what was measured.
    let database = condition(&clair, "DatabaseReady").context("no DatabaseReady")?;
    ensure!(
        database.status == "True" && database.reason == "DatabaseReachable",
        "{database:?}"
    );
    let fit = condition(&clair, "ConnectionsFit").context("no ConnectionsFit")?;
    ensure!(
        fit.status == "True" && fit.message.contains("127.0.0.1:"),
        "the test server has max_connections=50: {fit:?}"
    );
    for service in ["IndexerReady", "MatcherReady", "NotifierReady"] {
        let c = condition(&clair, service).with_context(|| format!("no {service}"))?;
        ensure!(c.status == "True", "{c:?}");
    }

    // The generated config: full URLs, the connection strings, a PSK that matches its Secret.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let config_secret = secrets.get("clair-config").await?;
    ensure!(
        config_secret
            .labels()
            .get("clair.projectquay.io/validate-config")
            == Some(&"true".to_string()),
        "the generated config is labelled for the validating webhook"
    );
    let config: Value = serde_json::from_str(&secret_text(&config_secret, "config.yaml")?)?;
    ensure!(
        config["matcher"]["indexer_addr"] == json!(format!("http://clair-indexer.{ns}.svc:6060")),
        "{config}"
    );
    ensure!(
        config["notifier"]["matcher_addr"] == json!(format!("http://clair-matcher.{ns}.svc:6060")),
        "{config}"
    );
    ensure!(
        config["indexer"]["connstring"]
            .as_str()
            .is_some_and(|c| c.contains("_indexer")),
        "{config}"
    );
    let psk = secret_text(&secrets.get("clair-psk").await?, "key")?;
    ensure!(
        config["auth"]["psk"]["key"] == json!(psk),
        "PSK in config and Secret differ"
    );

    // The three services, each with the generated root and the user's drop-in.
    let indexers: Api<Indexer> = Api::namespaced(client.clone(), &ns);
    let indexer = indexers.get("clair-indexer").await?;
    let config_spec = &indexer.spec.service.config;
    ensure!(
        config_spec.root.secret.as_ref().map(|r| r.name.as_str()) == Some("clair-config")
            && config_spec.dropins.len() == 1,
        "{config_spec:?}"
    );
    ensure!(
        indexer
            .spec
            .service
            .autoscaling
            .as_ref()
            .map(|a| a.max_replicas)
            == Some(3),
        "the indexer's overrides are passed on"
    );
    ensure!(
        indexer
            .owner_references()
            .iter()
            .any(|o| o.kind == "Clair" && o.controller == Some(true)),
        "the indexer is owned by the Clair"
    );
    let status = clair.status.clone().unwrap_or_default();
    ensure!(
        status.indexer.as_ref().and_then(|c| c.url.clone())
            == Some(format!("http://clair-indexer.{ns}.svc:6060")),
        "{status:?}"
    );

    // The printer columns.
    let table = env.kubectl_ok(&ns, &["get", "clair", "clair"])?;
    ensure!(
        table.contains("Available") && table.contains("True"),
        "{table}"
    );

    // Switching the notifier off deletes it.
    patch_spec(
        &client,
        &ns,
        "clair",
        json!({"notifier": {"enabled": false}}),
    )
    .await?;
    let notifiers: Api<Notifier> = Api::namespaced(client.clone(), &ns);
    eventually(LONG, "the notifier deleted", || {
        let notifiers = notifiers.clone();
        async move { Ok(notifiers.get_opt("clair-notifier").await?.is_none()) }
    })
    .await?;
    wait_clair(
        &client,
        &ns,
        "clair",
        "NotifierReady ServiceDisabled",
        |c| condition(c, "NotifierReady").is_some_and(|c| c.reason == "ServiceDisabled"),
    )
    .await?;

    // Routing: an Ingress by path, then an HTTPRoute once the Gateway API is installed.
    patch_spec(
        &client,
        &ns,
        "clair",
        json!({"routing": {"kind": "Ingress", "host": "clair.example.com", "tlsSecretName": "clair-tls"}}),
    )
    .await?;
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &ns);
    eventually(LONG, "the Ingress", || {
        let ingresses = ingresses.clone();
        async move {
            let Some(ingress) = ingresses.get_opt("clair").await? else {
                return Ok(false);
            };
            let rule = &ingress
                .spec
                .clone()
                .unwrap_or_default()
                .rules
                .unwrap_or_default()[0];
            let paths: Vec<String> = rule
                .http
                .as_ref()
                .map(|h| h.paths.iter().filter_map(|p| p.path.clone()).collect())
                .unwrap_or_default();
            ensure!(paths == ["/indexer/", "/matcher/"], "paths {paths:?}");
            Ok(true)
        }
    })
    .await?;
    let clair = wait_clair(&client, &ns, "clair", "status.url", |c| {
        c.status.as_ref().and_then(|s| s.url.clone()).as_deref()
            == Some("https://clair.example.com")
    })
    .await?;
    ensure!(
        condition(&clair, "RoutingReady").is_some_and(|c| c.reason == "RoutingApplied"),
        "{:?}",
        condition(&clair, "RoutingReady")
    );

    patch_spec(
        &client,
        &ns,
        "clair",
        json!({"routing": {"kind": "HTTPRoute", "gateway": {"name": "public"}}}),
    )
    .await?;
    // Not served yet (this test is the only one that installs it): the condition says so.
    wait_clair(
        &client,
        &ns,
        "clair",
        "RoutingReady RoutingUnsupported",
        |c| {
            condition(c, "RoutingReady")
                .is_some_and(|c| c.status == "False" && c.reason == "RoutingUnsupported")
        },
    )
    .await?;
    // Gateway API v1.1, whose HTTPRoute has no `timeouts`: the route is left without Quay's
    // request timeout (the apiserver would prune it, and the operator see its own route drift).
    crate::support::install_gateway_api(env, clair_testenv::GATEWAY_API_BEFORE_TIMEOUTS)?;
    // Picked up without a restart: the operator watches CRDs.
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute"),
        "httproutes",
    );
    let http_routes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    eventually(LONG, "the HTTPRoute, and the Ingress gone", || {
        let http_routes = http_routes.clone();
        let ingresses = ingresses.clone();
        async move {
            let Some(route) = http_routes.get_opt("clair").await? else {
                return Ok(false);
            };
            ensure!(
                route.data["spec"]["parentRefs"][0]["name"] == "public",
                "{:?}",
                route.data
            );
            Ok(ingresses.get_opt("clair").await?.is_none())
        }
    })
    .await?;
    let rule_timeouts = |route: &DynamicObject| -> Vec<Value> {
        let rules = route.data["spec"]["rules"].as_array().cloned();
        rules
            .unwrap_or_default()
            .iter()
            .map(|r| r["timeouts"]["request"].clone())
            .collect()
    };
    let route = http_routes.get("clair").await?;
    ensure!(
        rule_timeouts(&route).iter().all(Value::is_null),
        "timeouts on a v1.1 HTTPRoute: {:?}",
        route.data
    );
    // Each reconcile after finds its route as it applied it: unchanged, never reverted.
    let applies = |outcome: &'static str| -> anyhow::Result<f64> {
        let samples = crate::metrics::scrape(env)?;
        Ok(crate::metrics::total(
            &samples,
            "clair_operator_applies_total",
            &[("kind", "HTTPRoute"), ("outcome", outcome)],
        ))
    };
    let (unchanged, reverted) = (applies("unchanged")?, applies("reverted")?);
    let clairs: Api<Clair> = Api::namespaced(client.clone(), &ns);
    for round in 0..3 {
        // A change of the Clair's metadata only: each is a reconcile that changes nothing.
        let nudge = json!({"metadata": {"annotations": {"test/nudge": round.to_string()}}});
        clairs
            .patch("clair", &PatchParams::default(), &Patch::Merge(&nudge))
            .await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eventually(LONG, "two more reconciles of the routed Clair", || async {
        Ok(applies("unchanged")? + applies("reverted")? >= unchanged + 2.0)
    })
    .await?;
    ensure!(
        applies("reverted")? == reverted,
        "the operator reverted its own HTTPRoute on Gateway API v1.1 ({} reverts)",
        applies("reverted")? - reverted
    );
    let clair = clairs.get("clair").await?;
    ensure!(
        condition(&clair, "Contested").is_none(),
        "{:?}",
        condition(&clair, "Contested")
    );

    // Upgraded to a release whose HTTPRoute keeps `timeouts`: Quay's 600 s on every rule,
    // without a restart (the CRD's change is heard).
    crate::support::install_gateway_api(env, clair_testenv::GATEWAY_API)?;
    eventually(LONG, "timeouts.request 600s on every rule", || {
        let http_routes = http_routes.clone();
        async move {
            let route = http_routes.get("clair").await?;
            let timeouts = rule_timeouts(&route);
            Ok(!timeouts.is_empty() && timeouts.iter().all(|t| t == "600s"))
        }
    })
    .await?;

    // On OpenShift, Auto picks Routes: one per path, the HTTPRoute deleted.
    crate::support::install_open_crd(&client, "route.openshift.io", "Route", "routes", None)
        .await?;
    patch_spec(
        &client,
        &ns,
        "clair",
        json!({"routing": {"kind": "Auto", "host": "clair.example.com", "gateway": null}}),
    )
    .await?;
    let routes: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("route.openshift.io", "v1", "Route"),
            "routes",
        ),
    );
    eventually(LONG, "two Routes, and the HTTPRoute gone", || {
        let routes = routes.clone();
        let http_routes = http_routes.clone();
        async move {
            let mut paths: Vec<String> = routes
                .list(&Default::default())
                .await?
                .iter()
                .filter_map(|r| r.data["spec"]["path"].as_str().map(String::from))
                .collect();
            paths.sort();
            ensure!(paths.len() <= 2, "routes for {paths:?}");
            Ok(paths == ["/indexer", "/matcher"] && http_routes.get_opt("clair").await?.is_none())
        }
    })
    .await?;
    Ok(())
}

pub async fn database_failures_are_told_apart_and_nothing_rolls(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("clair-dbfail").await?;
    let prefix = external_inputs(env, &client, &ns).await?;
    let port = env.postgres.port;
    let indexer = format!("{prefix}_indexer");
    // A listener in a network the test operator's checks may not reach: never dialled.
    let refused = std::net::TcpListener::bind((crate::support::REFUSED_DATABASE_HOST, 0))?;
    refused.set_nonblocking(true)?;
    let refused_port = refused.local_addr()?.port();
    let cases = [
        (
            "wrong-password",
            format!(
                "host=127.0.0.1 port={port} user={indexer} password=not-the-password dbname={indexer} sslmode=disable"
            ),
            "DatabaseAuthFailed",
            "not-the-password",
        ),
        (
            "missing-database",
            format!(
                "postgresql://{indexer}:{PASSWORD}@127.0.0.1:{port}/no_such_database?sslmode=disable"
            ),
            "DatabaseMissing",
            PASSWORD,
        ),
        (
            "unreachable",
            // A port nothing listens on (the probe's retries are bounded).
            format!(
                "host=127.0.0.1 port=1 user={indexer} password={PASSWORD} dbname={indexer} connect_timeout=2"
            ),
            "DatabaseUnreachable",
            PASSWORD,
        ),
        (
            // The server's certificate is self-signed: verify-full refuses it.
            "unverified",
            format!(
                "postgresql://{indexer}:{PASSWORD}@localhost:{port}/{indexer}?sslmode=verify-full"
            ),
            "DatabaseUnreachable",
            PASSWORD,
        ),
        (
            "refused-network",
            format!(
                "host={} port={refused_port} user={indexer} password={PASSWORD} dbname={indexer}",
                crate::support::REFUSED_DATABASE_HOST
            ),
            "DatabaseMisconfigured",
            PASSWORD,
        ),
    ];
    for (name, connstring, _, _) in &cases {
        apply_json::<Secret>(
            &client,
            &ns,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("db-{name}")}, "stringData": {"indexer": connstring}}),
        )
        .await?;
        let mut spec = external_spec();
        spec["database"]["external"]["indexer"] =
            json!({"name": format!("db-{name}"), "key": "indexer"});
        create_clair(&client, &ns, name, spec).await?;
    }
    for (name, _, reason, secret) in &cases {
        let clair = wait_clair(
            &client,
            &ns,
            name,
            &format!("{name}: DatabaseReady {reason}"),
            |c| {
                condition(c, "DatabaseReady")
                    .is_some_and(|d| d.status == "False" && d.reason == *reason)
            },
        )
        .await?;
        let database = condition(&clair, "DatabaseReady").context("DatabaseReady")?;
        ensure!(
            database.message.starts_with("the Clair database: indexer:"),
            "the message names the service: {}",
            database.message
        );
        ensure!(
            !database.message.contains(secret),
            "the message leaks the password: {}",
            database.message
        );
        ensure!(
            clair.status.as_ref().and_then(|s| s.phase) == Some(Phase::ConfigValid),
            "{name}: {:?}",
            clair.status
        );
        // Nothing was rolled: no services, no generated config.
        let indexers: Api<Indexer> = Api::namespaced(client.clone(), &ns);
        ensure!(
            indexers
                .get_opt(&format!("{name}-indexer"))
                .await?
                .is_none(),
            "{name}: an indexer was created while its database fails"
        );
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        ensure!(secrets.get_opt(&format!("{name}-config")).await?.is_none());
    }
    let dialled = refused.accept();
    ensure!(
        dialled
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "a check dialled a network the operator refuses: {dialled:?}"
    );
    // What the tenant is told to fix.
    for (name, fix) in [
        ("refused-network", "--database-networks"),
        ("unverified", "certificate"),
    ] {
        let clair = Api::<Clair>::namespaced(client.clone(), &ns)
            .get(name)
            .await?;
        let message = &condition(&clair, "DatabaseReady")
            .context("DatabaseReady")?
            .message;
        ensure!(message.contains(fix), "{name}: says {fix:?}: {message}");
    }

    // TLS as the string asks: sslmode=require encrypts without verifying, and connects.
    let secret = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("databases")
        .await?;
    let mut data = serde_json::Map::new();
    for service in ["indexer", "matcher", "notifier"] {
        let text = secret_text(&secret, service)?.replace("sslmode=disable", "sslmode=require");
        data.insert(service.to_string(), json!(text));
    }
    apply_json::<Secret>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "databases"}, "stringData": data}),
    )
    .await?;
    create_clair(&client, &ns, "tls", external_spec()).await?;
    wait_clair(&client, &ns, "tls", "DatabaseReady over TLS", |c| {
        condition(c, "DatabaseReady").is_some_and(|d| d.status == "True")
    })
    .await?;
    // The server logs each connection, and whether it was encrypted.
    let log = std::fs::read_to_string(env.plane.dir().join("logs/postgres.log"))?;
    let wanted = format!("connection authorized: user={indexer} database={indexer} ");
    ensure!(
        log.lines()
            .any(|l| l.contains(&wanted) && l.contains("SSL enabled")),
        "no encrypted connection of {indexer} in the server log"
    );

    // Events and `kubectl describe` carry no password either.
    let described = env.kubectl_ok(&ns, &["describe", "clairs"])?;
    ensure!(
        !described.contains(PASSWORD) && !described.contains("not-the-password"),
        "kubectl describe shows a password"
    );
    // Nor does the operator's log (debug level for the operator's own modules).
    ensure!(
        !operator_log_contains(env, PASSWORD)? && !operator_log_contains(env, "not-the-password")?,
        "the operator logged a password"
    );
    Ok(())
}

fn operator_log_contains(env: &TestEnv, text: &str) -> anyhow::Result<bool> {
    let log = std::fs::read_to_string(env.plane.dir().join("logs/operator.log"))?;
    Ok(log.contains(text))
}

pub async fn a_managed_database_keeps_its_claims_when_the_clair_is_deleted(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("clair-managed").await?;
    notifier_dropin(&client, &ns, "http://quay.example.com/notify").await?;
    // A volume for the claim to bind to (there is no provisioner on this cluster).
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let volume: PersistentVolume = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("{ns}-data")},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "claimRef": {"namespace": ns, "name": "data-clair-database-0"},
                 "hostPath": {"path": format!("/tmp/{ns}")}}
    }))?;
    volumes
        .patch(
            &volume.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&volume),
        )
        .await?;
    create_clair(
        &client,
        &ns,
        "clair",
        json!({
            "database": {"managed": {"storage": {"size": "1Gi", "storageClassName": ""}, "maxConnections": 100}},
            "dropins": [{"configMap": {"name": "delivery", "key": "notifier.yaml"}}],
            "updaters": {"mode": "CronJob", "schedule": "0 */6 * * *"},
        }),
    )
    .await?;
    let clair = wait_clair(
        &client,
        &ns,
        "clair",
        "clair Available",
        phase_is(Phase::Available),
    )
    .await?;
    let fit = condition(&clair, "ConnectionsFit").context("ConnectionsFit")?;
    ensure!(fit.message.contains("of 97 usable"), "{fit:?}");

    // The engine, its bootstrap and generated passwords; the services use them.
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let set = sets.get("clair-database").await?;
    let set_spec = set.spec.clone().unwrap_or_default();
    ensure!(
        set_spec
            .persistent_volume_claim_retention_policy
            .and_then(|p| p.when_deleted)
            .as_deref()
            == Some("Retain")
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let passwords = secrets.get("clair-database").await?;
    let matcher_password = secret_text(&passwords, "matcher-password")?;
    ensure!(matcher_password.len() >= 32, "a generated password");
    let config: Value = serde_json::from_str(&secret_text(
        &secrets.get("clair-config").await?,
        "config.yaml",
    )?)?;
    let matcher = config["matcher"]["connstring"].as_str().unwrap_or_default();
    ensure!(
        matcher.contains(&format!("clair-database.{ns}.svc"))
            && matcher.contains(&matcher_password),
        "{matcher}"
    );
    ensure!(
        config["matcher"]["disable_updaters"] == json!(true),
        "{config}"
    );

    // The engine's first-start script, run as the postgres image runs it (against the test
    // server instead of the pod), makes roles and databases the generated strings open.
    let bootstrap = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("clair-database-bootstrap")
        .await?;
    let script = bootstrap
        .data
        .as_ref()
        .and_then(|d| d.values().next().cloned())
        .context("the bootstrap script")?;
    let mut command = tokio::process::Command::new("bash");
    command
        .arg("-c")
        .arg(&script)
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", env.postgres.bin_dir().display()),
        )
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", env.postgres.port.to_string())
        .env("PGPASSWORD", env.postgres.superuser_password())
        .env("POSTGRES_USER", "postgres")
        .env("CLAIR_ROLES", "indexer matcher notifier");
    for service in ["indexer", "matcher", "notifier"] {
        command.env(
            format!("{}_PASSWORD", service.to_uppercase()),
            secret_text(&passwords, &format!("{service}-password"))?,
        );
    }
    let output = command.output().await?;
    ensure!(
        output.status.success(),
        "the bootstrap script failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    for service in ["indexer", "matcher", "notifier"] {
        let text = config[service]["connstring"]
            .as_str()
            .context("connstring")?
            .replace(
                &format!("host='clair-database.{ns}.svc'"),
                "host='127.0.0.1'",
            )
            .replace("port='5432'", &format!("port='{}'", env.postgres.port));
        clair_operator::database::probe::probe(
            &text,
            Default::default(),
            &crate::support::platform().databases,
        )
        .await
        .map_err(|f| anyhow::anyhow!("{service}: {}", f.message))?;
    }
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), &ns);
    ensure!(
        cronjobs.get_opt("clair-updaters").await?.is_some(),
        "the updater CronJob"
    );
    // The passwords are generated once: a second reconcile keeps them.
    patch_spec(&client, &ns, "clair", json!({"matcher": {"replicas": 2}})).await?;
    let matchers: Api<Matcher> = Api::namespaced(client.clone(), &ns);
    eventually(LONG, "the matcher at 2 replicas", || {
        let matchers = matchers.clone();
        async move { Ok(matchers.get("clair-matcher").await?.spec.service.replicas == 2) }
    })
    .await?;
    ensure!(
        secret_text(&secrets.get("clair-database").await?, "matcher-password")? == matcher_password
    );

    // An autoscaler that could outgrow the engine's connections is a warning, not a phase.
    patch_spec(
        &client,
        &ns,
        "clair",
        json!({"indexer": {"autoscaling": {"minReplicas": 1, "maxReplicas": 30}}}),
    )
    .await?;
    // The indexer's new spec rolls first (the Clair is briefly Deploying); once it has, the
    // Clair is Ready with the warning standing.
    let clair = wait_clair(
        &client,
        &ns,
        "clair",
        "ConnectionsFit False while Ready",
        |c| {
            condition(c, "ConnectionsFit").is_some_and(|f| f.status == "False")
                && condition(c, "Ready").is_some_and(|r| r.status == "True")
        },
    )
    .await?;
    let fit = condition(&clair, "ConnectionsFit").context("ConnectionsFit")?;
    ensure!(
        fit.reason == "ConnectionsExceedLimit"
            && fit.message.contains("indexer 4×30 (default pool)"),
        "{fit:?}"
    );

    // One engine per service instead of the shared one would leave the data behind: the
    // apiserver refuses the switch on an existing Clair.
    let switched = patch_spec(
        &client,
        &ns,
        "clair",
        json!({"database": {"managed": {"perService": true}}}),
    )
    .await;
    let refusal = format!(
        "{:#}",
        switched
            .err()
            .context("the perService switch was accepted")?
    );
    ensure!(refusal.contains("perService cannot change"), "{refusal}");
    // Nor can the engine that runs it, and instances are CloudNativePG's alone.
    for (spec, refused_as) in [
        (
            json!({"database": {"managed": {"engine": "CloudNativePG"}}}),
            "engine cannot change",
        ),
        (
            json!({"database": {"managed": {"instances": 3}}}),
            "instances needs engine CloudNativePG",
        ),
    ] {
        let refusal = patch_spec(&client, &ns, "clair", spec.clone())
            .await
            .err()
            .with_context(|| format!("{spec} was accepted"))?;
        let refusal = format!("{refusal:#}");
        ensure!(refusal.contains(refused_as), "{refusal}");
    }
    // Nor can it go external and come back with another layout.
    let swapped = patch_spec(
        &client,
        &ns,
        "clair",
        json!({"database": {"managed": null, "external": {
            "indexer": {"name": "x", "key": "y"}, "matcher": {"name": "x", "key": "y"},
            "notifier": {"name": "x", "key": "y"}}}}),
    )
    .await;
    let refusal = format!(
        "{:#}",
        swapped.err().context("the swap to external was accepted")?
    );
    ensure!(refusal.contains("cannot be swapped"), "{refusal}");

    // Deleting the Clair deletes what it owns, except the data claim.
    let clairs: Api<Clair> = Api::namespaced(client.clone(), &ns);
    clairs.delete("clair", &DeleteParams::foreground()).await?;
    eventually(LONG, "the StatefulSet and the Clair gone", || {
        let sets = sets.clone();
        let clairs = clairs.clone();
        async move {
            Ok(sets.get_opt("clair-database").await?.is_none()
                && clairs.get_opt("clair").await?.is_none())
        }
    })
    .await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        claims.get_opt("data-clair-database-0").await?.is_some(),
        "the data claim was deleted with the Clair"
    );
    // The passwords the kept data's roles have are kept with it, for a new Clair of the
    // same name.
    ensure!(
        secret_text(&secrets.get("clair-database").await?, "matcher-password")? == matcher_password,
        "the database passwords were deleted with the Clair"
    );
    ensure!(
        !operator_log_contains(env, &matcher_password)?,
        "the operator logged a generated password"
    );
    volumes
        .delete(&volume.name_any(), &DeleteParams::default())
        .await?;
    Ok(())
}

/// One line of `clairctl export-updaters` output (claircore's jsonblob format): a made-up
/// vulnerability from a made-up updater.
const EXPORT: &str = r#"{"Updater":"clair-operator-test","Fingerprint":"fp-1","Date":"2026-11-29T00:00:00Z","Ref":"6f1c3a52-8d2e-4b8f-9a51-2c0d4e7b9a10","Kind":"vulnerability","Vuln":{"updater":"clair-operator-test","name":"CVE-0000-0001","description":"made up for the operator's tests","issued":"2026-11-29T00:00:00Z","links":"","severity":"High","normalized_severity":"High","package":{"name":"openssl","version":"","kind":"binary"},"dist":{"did":"debian","name":"Debian GNU/Linux","version_id":"12"},"repo":{"name":""},"fixed_in_version":"3.0.99"}}
"#;

/// Serves `body` with 200 to every request on a loopback port; returns the URL.
async fn serve(body: String) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/export.json", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    Ok(url)
}

/// A free loopback port.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn ready(port: u16) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = "GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response).await;
    response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200")
}

pub async fn the_rendered_configs_run_real_clair_services_and_updaters(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let bin = tokio::task::spawn_blocking(clair_binaries).await??;
    let client = env.client().await?;
    let ns = env.namespace("clair-real").await?;
    external_databases(env, &client, &ns).await?;
    let webhook_port = free_port()?;
    notifier_dropin(
        &client,
        &ns,
        &format!("http://127.0.0.1:{webhook_port}/notify"),
    )
    .await?;
    // Fetching vulnerability data needs the Internet, which tests do not use: the
    // CronJob imports an export (one made-up vulnerability) from a loopback URL, the
    // air-gapped set-up.
    let export_url = serve(EXPORT.to_string()).await?;
    let mut spec = external_spec();
    spec["updaters"] =
        json!({"mode": "CronJob", "schedule": "0 */6 * * *", "import": {"url": export_url}});
    create_clair(&client, &ns, "clair", spec).await?;
    wait_clair(
        &client,
        &ns,
        "clair",
        "clair Available",
        phase_is(Phase::Available),
    )
    .await?;

    // Each service's config snapshot: the exact file its pods are given.
    let dir = tempfile::tempdir()?;
    let log_dir = dir.path();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let ports: Vec<(u16, u16)> = (0..3)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<anyhow::Result<_>>()?;
    let indexer_url = format!("http://127.0.0.1:{}", ports[0].0);
    let matcher_url = format!("http://127.0.0.1:{}", ports[1].0);
    let mut processes = Vec::new();
    for (index, mode) in ["indexer", "matcher", "notifier"].iter().enumerate() {
        let name = format!("clair-{mode}");
        let hash = child_config_hash(&client, &ns, mode).await?;
        let snapshot = secrets
            .get(&format!("{name}-config-{}", &hash[..10]))
            .await
            .with_context(|| format!("{name}'s config snapshot"))?;
        let mut config: Value = serde_json::from_str(&secret_text(&snapshot, "config.json")?)?;
        // Only the addresses change: loopback ports instead of the pod's, loopback URLs
        // instead of cluster DNS names. The connection strings, PSK and the rest are
        // exactly what the operator rendered.
        config["http_listen_addr"] = json!(format!("127.0.0.1:{}", ports[index].0));
        config["introspection_addr"] = json!(format!("127.0.0.1:{}", ports[index].1));
        for section in ["matcher", "notifier"] {
            if config[section].get("indexer_addr").is_some() {
                config[section]["indexer_addr"] = json!(indexer_url);
            }
        }
        if config["notifier"].get("matcher_addr").is_some() {
            config["notifier"]["matcher_addr"] = json!(matcher_url);
        }
        let path = dir.path().join(format!("{mode}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&config)?)?;
        let mut command = Command::new(bin.join("clair"));
        command.arg("-conf").arg(&path).arg("-mode").arg(mode);
        processes.push(Process::spawn_command(
            &format!("clair-{mode}"),
            command,
            log_dir,
        )?);
    }
    for (index, mode) in ["indexer", "matcher", "notifier"].iter().enumerate() {
        let introspection = ports[index].1;
        let process = &mut processes[index];
        let started = std::time::Instant::now();
        loop {
            if ready(introspection).await {
                break;
            }
            if let Err(e) = process.check_running() {
                bail!("clair in {mode} mode exited: {e}");
            }
            if started.elapsed() > LONG {
                bail!(
                    "clair in {mode} mode never answered /readyz; log:\n{}",
                    process.tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    // The updater CronJob's command, with its projected config laid out as the pod sees it.
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), &ns);
    let cron = cronjobs.get("clair-updaters").await?;
    let pod = cron
        .spec
        .and_then(|s| s.job_template.spec)
        .and_then(|s| s.template.spec)
        .context("the CronJob's pod")?;
    let command = pod.containers[0].command.clone().context("command")?;
    ensure!(command[0] == "/bin/sh" && command[1] == "-c", "{command:?}");
    let config_dir = dir.path().join("config");
    project_config(&client, &ns, &pod, &config_dir).await?;
    let script = command[2].replace("/config/", &format!("{}/", config_dir.display()));
    let output = tokio::process::Command::new("/bin/bash")
        .arg("-c")
        .arg(&script)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output()
        .await?;
    ensure!(
        output.status.success(),
        "the updater command failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    // The made-up vulnerability is in the matcher's database.
    let found = env.postgres.sql_in(
        &format!("{}_matcher", ns.replace('-', "_")),
        "SELECT name FROM vuln WHERE updater = 'clair-operator-test'",
    )?;
    ensure!(
        found == "CVE-0000-0001",
        "the import did not land: {found:?}"
    );
    drop(processes);
    Ok(())
}

/// The running config hash of the Clair's service `mode`.
async fn child_config_hash(client: &Client, ns: &str, mode: &str) -> anyhow::Result<String> {
    let name = format!("clair-{mode}");
    let hash = match mode {
        "indexer" => Api::<Indexer>::namespaced(client.clone(), ns)
            .get(&name)
            .await?
            .status
            .and_then(|s| s.config_hash),
        "matcher" => Api::<Matcher>::namespaced(client.clone(), ns)
            .get(&name)
            .await?
            .status
            .and_then(|s| s.config_hash),
        _ => Api::<Notifier>::namespaced(client.clone(), ns)
            .get(&name)
            .await?
            .status
            .and_then(|s| s.config_hash),
    };
    hash.with_context(|| format!("{name} has no config hash"))
}

/// Writes the CronJob's projected config volume into `dir` as the kubelet would.
async fn project_config(
    client: &Client,
    ns: &str,
    pod: &k8s_openapi::api::core::v1::PodSpec,
    dir: &Path,
) -> anyhow::Result<()> {
    let volume = pod
        .volumes
        .as_ref()
        .and_then(|v| v.iter().find(|v| v.name == "config"))
        .and_then(|v| v.projected.clone())
        .context("the projected config volume")?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for source in volume.sources.unwrap_or_default() {
        if let Some(secret) = source.secret {
            let object = secrets.get(&secret.name).await?;
            for item in secret.items.unwrap_or_default() {
                write(dir, &item.path, &secret_text(&object, &item.key)?)?;
            }
        }
        if let Some(map) = source.config_map {
            let object = maps.get(&map.name).await?;
            for item in map.items.unwrap_or_default() {
                let text = object
                    .data
                    .as_ref()
                    .and_then(|d| d.get(&item.key))
                    .context("ConfigMap key")?;
                write(dir, &item.path, text)?;
            }
        }
    }
    Ok(())
}

fn write(dir: &Path, path: &str, text: &str) -> anyhow::Result<()> {
    let path = dir.join(path);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)?;
    Ok(())
}

/// A pre-upgrade Job for `version` that the Job controller fails: its pod can never be
/// scheduled and its deadline is one second. Made before the operator makes its own (kwok
/// completes every Job pod it runs), so the operator finds a failed step.
async fn failing_pre_job(
    client: &Client,
    ns: &str,
    clair: &Clair,
    version: &str,
) -> anyhow::Result<String> {
    let name = format!("clair-upgrade-pre-{}", version.replace('.', "-"));
    let owner = clair.controller_owner_ref(&()).context("owner reference")?;
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "ownerReferences": [owner], "labels": {
            "app.kubernetes.io/name": "clair", "app.kubernetes.io/instance": "clair",
            "app.kubernetes.io/component": "upgrade", "app.kubernetes.io/managed-by": "clair-operator",
            "app.kubernetes.io/part-of": "clair"}},
        "spec": {"activeDeadlineSeconds": 1, "backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "nodeSelector": {"no-such-node": "true"},
            "containers": [{"name": "upgrade", "image": "quay.io/projectquay/clair:4.10.0",
                            "command": ["clairctl", "admin", "pre", version]}]}}}
    }))?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    jobs.create(&Default::default(), &job).await?;
    eventually(LONG, &format!("Job {name} Failed"), || {
        let jobs = jobs.clone();
        let name = name.clone();
        async move {
            Ok(jobs
                .get(&name)
                .await?
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Failed" && c.status == "True")))
        }
    })
    .await?;
    Ok(name)
}

fn indexer_image(indexer: &Indexer) -> String {
    indexer.spec.service.image.clone().unwrap_or_default()
}

pub async fn an_image_upgrade_runs_clairctl_admin_pre_and_post_around_the_roll(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("clair-upgrade").await?;
    external_inputs(env, &client, &ns).await?;
    let mut spec = external_spec();
    spec["image"] = json!("quay.io/projectquay/clair:4.8.0");
    create_clair(&client, &ns, "clair", spec).await?;
    let clair = wait_clair(
        &client,
        &ns,
        "clair",
        "clair Available",
        phase_is(Phase::Available),
    )
    .await?;
    ensure!(
        clair
            .status
            .as_ref()
            .and_then(|s| s.version.clone())
            .as_deref()
            == Some("v4.8.0"),
        "{:?}",
        clair.status
    );
    let indexers: Api<Indexer> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);

    // A new version: the pre step first, the services untouched. A pod quota that the
    // three service pods fill holds the pre Job's pod back, so the step lasts until the
    // quota goes (kwok would otherwise complete it within a second).
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> =
        Api::namespaced(client.clone(), &ns);
    let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "hold"},
        "spec": {"hard": {"pods": "3"}}
    }))?;
    quotas.create(&Default::default(), &quota).await?;
    eventually(LONG, "the quota counting the service pods", || {
        let quotas = quotas.clone();
        async move {
            let used = quotas.get("hold").await?.status.and_then(|s| s.used);
            Ok(used
                .and_then(|u| u.get("pods").cloned())
                .is_some_and(|q| q.0 == "3"))
        }
    })
    .await?;
    patch_spec(
        &client,
        &ns,
        "clair",
        json!({"image": "quay.io/projectquay/clair:4.9.0"}),
    )
    .await?;
    let clair = wait_clair(&client, &ns, "clair", "Upgrading, preparing", |c| {
        c.status.as_ref().and_then(|s| s.phase) == Some(Phase::Upgrading)
            && condition(c, "Upgrading").is_some_and(|u| u.reason == "UpgradePreparing")
    })
    .await?;
    ensure!(
        condition(&clair, "Ready").is_some_and(|r| r.status == "True"),
        "the services keep serving during an upgrade"
    );
    let pre = jobs.get("clair-upgrade-pre-v4-9-0").await?;
    let command = pre
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers[0].command.clone())
        .unwrap_or_default();
    ensure!(
        command[command.len() - 3..] == ["admin", "pre", "v4.9.0"],
        "{command:?}"
    );
    ensure!(
        indexer_image(&indexers.get("clair-indexer").await?).ends_with(":4.8.0"),
        "the indexer rolled before the pre step finished"
    );

    // The pre step runs and succeeds (kwok completes Job pods), the services roll, the post
    // step runs, then the Jobs are deleted: faster than a test can watch each step, so the
    // order is read from the apiserver's audit log of the operator's writes.
    let since = std::time::SystemTime::now();
    quotas.delete("hold", &DeleteParams::default()).await?;
    wait_clair(&client, &ns, "clair", "Available on v4.9.0", |c| {
        c.status.as_ref().is_some_and(|s| {
            s.phase == Some(Phase::Available) && s.version.as_deref() == Some("v4.9.0")
        })
    })
    .await?;
    eventually(LONG, "the upgrade Jobs cleaned up", || {
        let jobs = jobs.clone();
        async move {
            Ok(jobs.get_opt("clair-upgrade-pre-v4-9-0").await?.is_none()
                && jobs.get_opt("clair-upgrade-post-v4-9-0").await?.is_none())
        }
    })
    .await?;
    ensure!(
        indexer_image(&indexers.get("clair-indexer").await?).ends_with(":4.9.0"),
        "the indexer did not roll"
    );
    let writes = operator_writes(env, &ns, since)?;
    let first = |wanted: &str| {
        writes
            .iter()
            .position(|w| w == wanted)
            .with_context(|| format!("no `{wanted}` among the operator's writes: {writes:?}"))
    };
    let roll = first("patch deployments clair-indexer")?;
    let post = first("create jobs clair-upgrade-post-v4-9-0")?;
    let cleanup = first("delete jobs clair-upgrade-pre-v4-9-0")?;
    ensure!(
        roll < post && post < cleanup,
        "the indexer's Deployment rolls, then the post Job, then clean-up: {writes:?}"
    );

    // A failed pre step stops the roll with a condition; the services stay where they are.
    let clairs: Api<Clair> = Api::namespaced(client.clone(), &ns);
    failing_pre_job(&client, &ns, &clairs.get("clair").await?, "v4.10.0").await?;
    patch_spec(
        &client,
        &ns,
        "clair",
        json!({"image": "quay.io/projectquay/clair:4.10.0"}),
    )
    .await?;
    let clair = wait_clair(&client, &ns, "clair", "Degraded by UpgradeFailed", |c| {
        c.status.as_ref().and_then(|s| s.phase) == Some(Phase::Degraded)
            && condition(c, "Degraded").is_some_and(|d| d.reason == "UpgradeFailed")
    })
    .await?;
    let upgrading = condition(&clair, "Upgrading").context("Upgrading")?;
    ensure!(
        upgrading
            .message
            .contains("kubectl logs job/clair-upgrade-pre-v4-10-0"),
        "{upgrading:?}"
    );
    ensure!(
        indexer_image(&indexers.get("clair-indexer").await?).ends_with(":4.9.0"),
        "the indexer rolled although the pre step failed"
    );
    Ok(())
}

/// Operator requests in `ns` since `since` that created or changed something (answered
/// below 400), as `VERB RESOURCE[/SUBRESOURCE] NAME`.
fn operator_changes(
    env: &TestEnv,
    ns: &str,
    since: std::time::SystemTime,
) -> anyhow::Result<Vec<String>> {
    Ok(operator_requests(env, ns, since)?
        .iter()
        .filter(|e| ["create", "update", "patch"].contains(&e["verb"].as_str().unwrap_or_default()))
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter(|e| e["responseStatus"]["code"].as_u64().unwrap_or(0) < 400)
        .map(request_line)
        .collect())
}

/// Lines of the operator's log at WARN or ERROR that name `text`.
fn operator_warnings(env: &TestEnv, text: &str) -> anyhow::Result<Vec<String>> {
    let log = std::fs::read_to_string(env.plane.dir().join("logs/operator.log"))?;
    Ok(log
        .lines()
        .filter(|l| (l.contains(" WARN ") || l.contains(" ERROR ")) && l.contains(text))
        .map(str::to_string)
        .collect())
}

/// Whether an Event about a Clair in `ns` is one `wanted` takes.
async fn clair_event(
    client: &kube::Client,
    ns: &str,
    wanted: impl Fn(&k8s_openapi::api::events::v1::Event) -> bool,
) -> anyhow::Result<bool> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    Ok(events
        .list(&Default::default())
        .await?
        .items
        .iter()
        .any(|e| {
            e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Clair") && wanted(e)
        }))
}

pub async fn a_resource_or_namespace_being_deleted_gets_nothing_applied(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = available_clair(env, &client, "clair-deleting", external_spec()).await?;

    // A Clair held by someone else's finalizer stays, being deleted, with its children.
    let clairs: Api<Clair> = Api::namespaced(client.clone(), &ns);
    clairs
        .patch(
            "clair",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["clair-operator-tests/hold"]}})),
        )
        .await?;
    // Reconciles already under way (each finishes within a second or two here) may still
    // write; what follows the deletion may not.
    tokio::time::sleep(Duration::from_secs(3)).await;
    clairs.delete("clair", &DeleteParams::background()).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let since = std::time::SystemTime::now();
    // Its indexer disappears: the operator must not make it again for a Clair on its way out.
    let indexers: Api<Indexer> = Api::namespaced(client.clone(), &ns);
    indexers
        .delete("clair-indexer", &DeleteParams::default())
        .await?;
    eventually(LONG, "the indexer to be gone", || async {
        Ok(indexers.get_opt("clair-indexer").await?.is_none())
    })
    .await?;
    // The matcher changes: a reconcile is triggered (and would re-apply, were it allowed).
    let matchers: Api<Matcher> = Api::namespaced(client.clone(), &ns);
    matchers
        .patch(
            "clair-matcher",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    ensure!(
        indexers.get_opt("clair-indexer").await?.is_none(),
        "the indexer of a Clair being deleted was made again"
    );
    let changes = operator_changes(env, &ns, since)?;
    ensure!(
        changes.iter().all(|c| !c.contains("clairs")),
        "the operator wrote to the Clair being deleted: {changes:?}"
    );
    ensure!(
        changes.iter().all(|c| !c.contains("indexers")),
        "the operator wrote an indexer for the Clair being deleted: {changes:?}"
    );
    clairs
        .patch(
            "clair",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;

    // A second Clair, then its whole namespace deleted: nothing is made again while the
    // namespace terminates, and no refusal is logged as a warning.
    let ns2 = available_clair(env, &client, "clair-ns-deleting", external_spec()).await?;
    // The Event of its becoming Available follows the status that says so: wait for it, so
    // what is counted below is what follows the deletion.
    eventually(LONG, "the Clair's Event of becoming Available", || {
        clair_event(&client, &ns2, |e| {
            e.action
                .as_deref()
                .is_some_and(|a| a.ends_with("ToAvailable"))
        })
    })
    .await?;
    let since = std::time::SystemTime::now();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces.delete(&ns2, &DeleteParams::default()).await?;
    eventually(
        Duration::from_secs(180),
        "the namespace to be gone",
        || async { Ok(namespaces.get_opt(&ns2).await?.is_none()) },
    )
    .await?;
    let changes = operator_changes(env, &ns2, since)?;
    // Status writes of resources whose pods go are fine; no object is made or changed.
    ensure!(
        changes
            .iter()
            .all(|c| c.split(' ').nth(1).is_some_and(|r| r.ends_with("/status"))),
        "the operator created or changed objects in a terminating namespace: {changes:?}"
    );
    let warnings = operator_warnings(env, &ns2)?;
    ensure!(
        warnings.is_empty(),
        "the operator warned about a namespace being deleted: {warnings:?}"
    );
    Ok(())
}

/// An `Indexer` someone made under the name a Clair's would have is left as it is (a
/// Warning Event on the Clair says so), and the Clair makes its own once that one is gone
/// (retried with a backoff: nothing the Clair watches tells it). The operator's cache
/// of every Indexer shows it, so it is read and judged before anything is written.
pub async fn someone_elses_indexer_of_a_clairs_name_is_not_taken_over(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("clair-theirs").await?;
    external_inputs(env, &client, &ns).await?;
    let theirs = json!({"apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Indexer",
        "metadata": {"name": "clair-indexer"},
        "spec": {"config": {"root": {"configMap": {"name": "theirs", "key": "config.yaml"}}}}});
    apply_json::<Indexer>(&client, &ns, theirs).await?;
    create_clair(&client, &ns, "clair", external_spec()).await?;
    eventually(
        LONG,
        "a Warning Event on the Clair naming the Indexer",
        || {
            clair_event(&client, &ns, |e| {
                e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| {
                        n.contains("Indexer clair-indexer exists and is not this resource's")
                    })
            })
        },
    )
    .await?;
    let indexers: Api<Indexer> = Api::namespaced(client.clone(), &ns);
    let indexer = indexers.get("clair-indexer").await?;
    ensure!(
        indexer.owner_references().is_empty()
            && indexer
                .spec
                .service
                .config
                .root
                .config_map
                .as_ref()
                .map(|r| r.name.as_str())
                == Some("theirs"),
        "someone else's Indexer was taken over: {:?}",
        indexer.metadata
    );
    indexers
        .delete("clair-indexer", &DeleteParams::default())
        .await?;
    eventually(LONG, "the Clair's own Indexer", || {
        let indexers = indexers.clone();
        async move {
            Ok(indexers.get_opt("clair-indexer").await?.is_some_and(|i| {
                i.owner_references()
                    .iter()
                    .any(|o| o.kind == "Clair" && o.controller == Some(true))
            }))
        }
    })
    .await?;
    Ok(())
}

/// Where the cluster does not serve CloudNativePG, a Clair asking for it waits, says what
/// to install, and nothing of its database is written.
pub async fn a_clair_on_cloudnative_pg_waits_where_it_is_not_served(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("clair-cnpg").await?;
    create_clair(
        &client,
        &ns,
        "clair",
        json!({"database": {"managed": {"engine": "CloudNativePG"}}}),
    )
    .await?;
    let clair = wait_clair(
        &client,
        &ns,
        "clair",
        "DatabaseReady False, saying to install CloudNativePG",
        |c| {
            condition(c, "DatabaseReady").is_some_and(|d| {
                d.status == "False"
                    && d.reason == "DatabaseMisconfigured"
                    && d.message.contains("install CloudNativePG")
            })
        },
    )
    .await?;
    ensure!(
        clair.status.as_ref().and_then(|s| s.phase) != Some(Phase::Available),
        "{:?}",
        clair.status
    );
    let stateful_sets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
        Api::namespaced(client.clone(), &ns);
    ensure!(
        stateful_sets
            .list(&Default::default())
            .await?
            .items
            .is_empty(),
        "a built-in engine was written for a Clair on CloudNativePG"
    );
    Ok(())
}
