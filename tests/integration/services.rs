//! The service controllers on a real control plane with kwok nodes: resources reach
//! Available with their pods Ready, config changes roll and invalid ones do not, scaling
//! passes through Scaling, failing pods degrade, drift is reverted, deletion cleans up, and
//! an idle operator makes no writes.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use anyhow::{Context, ensure};
use clair_operator::api::service::ClairService;
use clair_operator::api::{DEFAULT_IMAGE, Indexer, Matcher, Notifier, Phase};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceQuota, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::support::{
    FIELD_MANAGER, TestEnv, eventually, operator_requests, operator_writes, request_line,
};

pub(crate) const CONFIG: &str = "http_listen_addr: \":6060\"\nlog_level: info\nindexer:\n  connstring: host=db\nmatcher:\n  connstring: host=db\n  indexer_addr: http://indexer:6060\nnotifier:\n  connstring: host=db\n  indexer_addr: http://indexer:6060\n  matcher_addr: http://matcher:6060\n";
const LONG: Duration = Duration::from_secs(90);

fn selector(name: &str) -> String {
    format!("app.kubernetes.io/instance={name}")
}

pub(crate) async fn config_map(
    env: &TestEnv,
    ns: &str,
    name: &str,
    text: &str,
) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(env.client().await?, ns);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"config.yaml": text}});
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await?;
    Ok(())
}

async fn indexer(
    env: &TestEnv,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<()> {
    let api: Api<Indexer> = Api::namespaced(env.client().await?, ns);
    let mut full = json!({"config": {"root": {"configMap": {"name": "clair-config", "key": "config.yaml"}}}, "replicas": 1});
    json_patch::merge(&mut full, &spec);
    let object: Indexer = serde_json::from_value(json!({
        "apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Indexer",
        "metadata": {"name": name}, "spec": full
    }))?;
    api.create(&PostParams::default(), &object).await?;
    Ok(())
}

/// Waits until the resource is in `phase` with `ready` ready replicas.
async fn wait_for<K>(
    env: &TestEnv,
    ns: &str,
    name: &str,
    phase: Phase,
    ready: i32,
) -> anyhow::Result<K>
where
    K: ClairService
        + Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(env.client().await?, ns);
    eventually(LONG, &format!("{name} {phase} with {ready} ready"), || {
        let api = api.clone();
        async move {
            let object = api.get(name).await?;
            let status = object.service_status().cloned().unwrap_or_default();
            anyhow::ensure!(
                status.phase == Some(phase) && status.ready_replicas == ready,
                "phase {:?}, {} ready, conditions {:?}",
                status.phase,
                status.ready_replicas,
                status
                    .conditions
                    .iter()
                    .map(|c| format!("{}={} {}", c.type_, c.status, c.reason))
                    .collect::<Vec<_>>()
            );
            Ok(true)
        }
    })
    .await?;
    Ok(api.get(name).await?)
}

fn condition(
    status: &clair_operator::api::ServiceStatus,
    type_: &str,
) -> anyhow::Result<(String, String, String)> {
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .with_context(|| format!("no {type_} condition"))?;
    Ok((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until an Event about `name` has a note starting with each of `prefixes`.
async fn wait_for_events(
    env: &TestEnv,
    ns: &str,
    name: &str,
    prefixes: &[&str],
) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(30),
        &format!("events {prefixes:?} about {name}"),
        || async move {
            let notes = event_notes(env, ns, name).await?;
            let missing: Vec<&&str> = prefixes
                .iter()
                .filter(|p| !notes.iter().any(|n| n.starts_with(**p)))
                .collect();
            anyhow::ensure!(missing.is_empty(), "missing {missing:?} among {notes:?}");
            Ok(true)
        },
    )
    .await
}

/// A ResourceQuota named `hold` admitting no pod beyond those running in `ns`, once the
/// quota controller has counted them (before that, admission refuses every pod anyway).
async fn hold_new_pods(env: &TestEnv, ns: &str) -> anyhow::Result<Api<ResourceQuota>> {
    let pods: Api<Pod> = Api::namespaced(env.client().await?, ns);
    let running = pods.list(&ListParams::default()).await?.items.len();
    let quotas: Api<ResourceQuota> = Api::namespaced(env.client().await?, ns);
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "hold"},
        "spec": {"hard": {"pods": running.to_string()}}});
    quotas
        .create(&PostParams::default(), &serde_json::from_value(quota)?)
        .await?;
    eventually(LONG, "the quota counted", || {
        let quotas = quotas.clone();
        async move {
            let used = quotas.get("hold").await?.status.and_then(|s| s.used);
            Ok(used.is_some_and(|u| u.contains_key("pods")))
        }
    })
    .await?;
    Ok(quotas)
}

pub(crate) async fn event_notes(
    env: &TestEnv,
    ns: &str,
    name: &str,
) -> anyhow::Result<Vec<String>> {
    let api: Api<Event> = Api::namespaced(env.client().await?, ns);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.note)
        .collect())
}

pub async fn services_reach_available_with_their_pods_ready(env: &TestEnv) -> anyhow::Result<()> {
    let ns = env.namespace("services").await?;
    let path = format!("{}/examples/services.yaml", env!("CARGO_MANIFEST_DIR"));
    env.kubectl_ok(&ns, &["apply", "--server-side", "-f", &path])?;
    let indexer: Indexer = wait_for(env, &ns, "indexer", Phase::Available, 2).await?;
    let _: Matcher = wait_for(env, &ns, "matcher", Phase::Available, 2).await?;
    let _: Notifier = wait_for(env, &ns, "notifier", Phase::Available, 1).await?;

    let client = env.client().await?;
    let status = indexer.status.clone().context("status")?;
    ensure!(
        status.url.as_deref() == Some(&*format!("http://indexer.{ns}.svc:6060")),
        "url {:?}",
        status.url
    );
    ensure!(status.observed_generation == indexer.meta().generation);
    for (type_, want) in [
        ("Ready", "True"),
        ("ConfigValid", "True"),
        ("Progressing", "False"),
        ("Degraded", "False"),
    ] {
        let (got, reason, message) = condition(&status, type_)?;
        ensure!(got == want, "{type_} is {got} ({reason}: {message})");
        ensure!(
            message.contains("docs/runbooks/"),
            "{type_} message names no runbook"
        );
    }
    // The selector published for the scale subresource selects the service's pods.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let selected = pods
        .list(&ListParams::default().labels(status.selector.as_deref().context("selector")?))
        .await?;
    ensure!(
        selected.items.len() == 2,
        "{} pods selected",
        selected.items.len()
    );

    let deployment = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get("indexer")
        .await?;
    let template = deployment.spec.context("spec")?.template;
    let hash = template
        .metadata
        .and_then(|m| m.annotations)
        .and_then(|a| a.get("clair.projectquay.io/config-hash").cloned());
    ensure!(
        hash == status.config_hash,
        "template hash {hash:?}, status {:?}",
        status.config_hash
    );
    let container = &template.spec.context("pod spec")?.containers[0];
    ensure!(container.image.as_deref() == Some(DEFAULT_IMAGE));
    ensure!(container.env.as_ref().is_some_and(|e| {
        e.iter()
            .any(|v| v.name == "CLAIR_MODE" && v.value.as_deref() == Some("indexer"))
    }));

    let service = Api::<Service>::namespaced(client.clone(), &ns)
        .get("matcher")
        .await?;
    let ports: Vec<i32> = service
        .spec
        .and_then(|s| s.ports)
        .unwrap_or_default()
        .iter()
        .map(|p| p.port)
        .collect();
    ensure!(ports == [6060, 8089], "matcher service ports {ports:?}");
    Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns)
        .get("notifier")
        .await?;
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), &ns);
    ensure!(
        hpas.get_opt("matcher").await?.is_some(),
        "the matcher autoscales"
    );
    ensure!(
        hpas.get_opt("indexer").await?.is_none(),
        "the indexer does not"
    );

    // Every transition is an Event, visible in kubectl describe.
    wait_for_events(env, &ns, "indexer", &["Pending → "]).await?;
    let described = env.kubectl_ok(&ns, &["describe", "indexer", "indexer"])?;
    ensure!(
        described.contains("Pending → ") && described.contains("Ready"),
        "describe:\n{described}"
    );
    Ok(())
}

async fn pod_names(env: &TestEnv, ns: &str, name: &str) -> anyhow::Result<BTreeSet<String>> {
    let pods: Api<Pod> = Api::namespaced(env.client().await?, ns);
    Ok(pods
        .list(&ListParams::default().labels(&selector(name)))
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect())
}

async fn replica_sets(env: &TestEnv, ns: &str, name: &str) -> anyhow::Result<usize> {
    let api: Api<ReplicaSet> = Api::namespaced(env.client().await?, ns);
    Ok(api
        .list(&ListParams::default().labels(&selector(name)))
        .await?
        .items
        .len())
}

pub async fn a_config_change_rolls_and_an_invalid_one_does_not(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let ns = env.namespace("config").await?;
    config_map(env, &ns, "clair-config", CONFIG).await?;
    indexer(env, &ns, "idx", json!({})).await?;
    let first: Indexer = wait_for(env, &ns, "idx", Phase::Available, 1).await?;
    let first_hash = first.status.and_then(|s| s.config_hash).context("hash")?;
    ensure!(replica_sets(env, &ns, "idx").await? == 1);

    // A valid change rolls a new ReplicaSet and the old snapshot goes once Available.
    config_map(
        env,
        &ns,
        "clair-config",
        &CONFIG.replace("log_level: info", "log_level: debug"),
    )
    .await?;
    let api: Api<Indexer> = Api::namespaced(env.client().await?, &ns);
    eventually(LONG, "a new config hash, Available", || {
        let api = api.clone();
        let first_hash = first_hash.clone();
        async move {
            let status = api.get("idx").await?.status.unwrap_or_default();
            Ok(status.config_hash.is_some_and(|h| h != first_hash)
                && status.phase == Some(Phase::Available)
                && status.ready_replicas == 1)
        }
    })
    .await?;
    ensure!(
        replica_sets(env, &ns, "idx").await? == 2,
        "a config change rolls a new ReplicaSet"
    );
    let secrets: Api<Secret> = Api::namespaced(env.client().await?, &ns);
    eventually(LONG, "one config snapshot left", || {
        let secrets = secrets.clone();
        async move {
            Ok(secrets
                .list(&ListParams::default().labels(&selector("idx")))
                .await?
                .items
                .len()
                == 1)
        }
    })
    .await?;
    let good = api.get("idx").await?.status.unwrap_or_default();
    let pods_before = pod_names(env, &ns, "idx").await?;

    // Invalid changes (the ConfigMap is unlabelled: the webhook does not see it, the
    // controller catches it): ConfigValid goes False naming the field; nothing rolls.
    for (invalid, named) in [
        (
            format!("{CONFIG}indexr:\n  connstring: typo\n"),
            "indexr: unknown key",
        ),
        (
            format!("{CONFIG}trace:\n  name: [unclosed\n"),
            "unclosed bracket",
        ),
        (
            format!("{CONFIG}auth:\n  psk:\n    iss: [quay]\n"),
            "auth.psk.key: required",
        ),
        (
            format!("{CONFIG}auth:\n  psk:\n    key: \"not base64!\"\n    iss: [quay]\n"),
            "auth.psk.key: not standard padded base64",
        ),
    ] {
        config_map(env, &ns, "clair-config", &invalid).await?;
        eventually(LONG, &format!("ConfigValid=False naming {named}"), || {
            let api = api.clone();
            async move {
                let status = api.get("idx").await?.status.unwrap_or_default();
                Ok(status.conditions.iter().any(|c| {
                    c.type_ == "ConfigValid" && c.status == "False" && c.message.contains(named)
                }))
            }
        })
        .await?;
        let bad = api.get("idx").await?.status.context("status")?;
        let (_, reason, message) = condition(&bad, "ConfigValid")?;
        ensure!(reason == "ConfigInvalid", "{reason}: {message}");
        ensure!(bad.phase == Some(Phase::Degraded), "phase {:?}", bad.phase);
        ensure!(
            bad.config_hash == good.config_hash,
            "the running config hash moved under {named}"
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        replica_sets(env, &ns, "idx").await? == 2,
        "an invalid config rolled a ReplicaSet"
    );
    ensure!(
        pod_names(env, &ns, "idx").await? == pods_before,
        "pods changed under an invalid config"
    );
    let template_hash = Api::<Deployment>::namespaced(env.client().await?, &ns)
        .get("idx")
        .await?
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.annotations)
        .and_then(|a| a.get("clair.projectquay.io/config-hash").cloned());
    ensure!(
        template_hash == good.config_hash,
        "the pod template changed"
    );

    // A missing ConfigMap holds a new resource in Pending and names what is missing.
    indexer(
        env,
        &ns,
        "orphan",
        json!({"config": {"root": {"configMap": {"name": "nope"}}}}),
    )
    .await?;
    eventually(LONG, "orphan Pending with ConfigMissing", || {
        let api = api.clone();
        async move {
            let status = api.get("orphan").await?.status.unwrap_or_default();
            Ok(status.phase == Some(Phase::Pending)
                && status.conditions.iter().any(|c| {
                    c.reason == "ConfigMissing"
                        && c.message.contains("ConfigMap nope does not exist")
                }))
        }
    })
    .await?;
    ensure!(
        Api::<Deployment>::namespaced(env.client().await?, &ns)
            .get_opt("orphan")
            .await?
            .is_none()
    );

    // Fixing the config brings it back. CONFIG is not the running config (that is the
    // `log_level: debug` one), so this rolls: wait for the roll to end (one pod left) before
    // taking the pods that must then stay.
    config_map(env, &ns, "clair-config", CONFIG).await?;
    wait_for::<Indexer>(env, &ns, "idx", Phase::Available, 1).await?;
    eventually(LONG, "the roll back finished: one pod", || async {
        Ok(pod_names(env, &ns, "idx").await?.len() == 1)
    })
    .await?;
    let fixed: Indexer = wait_for(env, &ns, "idx", Phase::Available, 1).await?;
    let running_hash = fixed.status.and_then(|s| s.config_hash);
    let pods_running = pod_names(env, &ns, "idx").await?;

    // The referenced ConfigMap deleted under a running service: it says so, and keeps running
    // on the config it has (the snapshot is its own).
    Api::<ConfigMap>::namespaced(env.client().await?, &ns)
        .delete("clair-config", &Default::default())
        .await?;
    eventually(LONG, "ConfigMissing on the running idx", || {
        let api = api.clone();
        async move {
            let status = api.get("idx").await?.status.unwrap_or_default();
            Ok(status.conditions.iter().any(|c| {
                c.type_ == "ConfigValid"
                    && c.status == "False"
                    && c.reason == "ConfigMissing"
                    && c.message.contains("ConfigMap clair-config does not exist")
            }))
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let missing = api.get("idx").await?.status.context("status")?;
    ensure!(
        missing.phase == Some(Phase::Degraded),
        "phase {:?}",
        missing.phase
    );
    ensure!(
        missing.config_hash == running_hash,
        "the running config hash moved"
    );
    let pods_missing = pod_names(env, &ns, "idx").await?;
    ensure!(
        pods_missing == pods_running,
        "pods changed when the ConfigMap went: {pods_running:?} then {pods_missing:?}"
    );
    ensure!(
        Api::<Secret>::namespaced(env.client().await?, &ns)
            .list(&ListParams::default().labels(&selector("idx")))
            .await?
            .items
            .len()
            == 1,
        "the running config's snapshot went with the ConfigMap"
    );
    config_map(env, &ns, "clair-config", CONFIG).await?;
    wait_for::<Indexer>(env, &ns, "idx", Phase::Available, 1).await?;
    ensure!(
        pod_names(env, &ns, "idx").await? == pods_running,
        "the same config, restored, rolled the pods"
    );
    Ok(())
}

pub async fn scaling_by_kubectl_and_by_the_autoscaler_pass_through_scaling(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let ns = env.namespace("scaling").await?;
    config_map(env, &ns, "clair-config", CONFIG).await?;
    indexer(env, &ns, "byhand", json!({})).await?;
    wait_for::<Indexer>(env, &ns, "byhand", Phase::Available, 1).await?;
    env.kubectl_ok(&ns, &["scale", "indexer", "byhand", "--replicas", "3"])?;
    wait_for::<Indexer>(env, &ns, "byhand", Phase::Available, 3).await?;
    wait_for_events(
        env,
        &ns,
        "byhand",
        &["Available → Scaling", "Scaling → Available"],
    )
    .await?;

    // Turning autoscaling on keeps the running count: the autoscaler takes it from there.
    let api: Api<Indexer> = Api::namespaced(env.client().await?, &ns);
    api.patch(
        "byhand",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"autoscaling": {"minReplicas": 2, "maxReplicas": 5}}})),
    )
    .await?;
    let deployments: Api<Deployment> = Api::namespaced(env.client().await?, &ns);
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(env.client().await?, &ns);
    eventually(LONG, "the autoscaler created", || {
        let hpas = hpas.clone();
        async move { Ok(hpas.get_opt("byhand").await?.is_some()) }
    })
    .await?;
    for _ in 0..10 {
        let replicas = deployments
            .get("byhand")
            .await?
            .spec
            .and_then(|s| s.replicas);
        ensure!(
            replicas == Some(3),
            "enabling autoscaling moved the Deployment to {replicas:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The autoscaler holds at least minReplicas, even without metrics.
    indexer(
        env,
        &ns,
        "auto",
        json!({"autoscaling": {"minReplicas": 2, "maxReplicas": 4}}),
    )
    .await?;
    wait_for::<Indexer>(env, &ns, "auto", Phase::Available, 2).await?;
    // kwok makes a pod ready at once, so the autoscaler's third pod could be ready before
    // the operator looks: a quota of the pods running holds it back until Scaling is seen.
    let quota = hold_new_pods(env, &ns).await?;
    api.patch(
        "auto",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"autoscaling": {"minReplicas": 3}}})),
    )
    .await?;
    wait_for_events(env, &ns, "auto", &["Available → Scaling"]).await?;
    quota.delete("hold", &DeleteParams::default()).await?;
    wait_for::<Indexer>(env, &ns, "auto", Phase::Available, 3).await?;

    // The tuning metrics follow: one scale-up, its time to ready, pinned at minReplicas.
    let auto = [
        ("kind", "Indexer"),
        ("namespace", ns.as_str()),
        ("name", "auto"),
    ];
    let with = |extra: (&'static str, &'static str)| {
        let mut labels = auto.to_vec();
        labels.push(extra);
        labels
    };
    eventually(LONG, "the tuning metrics of the scale-up", || async {
        let samples = crate::metrics::scrape(env)?;
        let value =
            |name: &str, labels: &[(&str, &str)]| crate::metrics::total(&samples, name, labels);
        Ok(value(
            "clair_operator_autoscaler_replicas",
            &with(("state", "min")),
        ) == 3.0
            && value(
                "clair_operator_autoscaler_replicas",
                &with(("state", "desired")),
            ) == 3.0
            && value("clair_operator_autoscaler_scale_ups_total", &auto) >= 1.0
            && value(
                "clair_operator_autoscaler_pinned_seconds_total",
                &with(("state", "min")),
            ) > 0.0
            && !crate::metrics::find(
                &samples,
                "clair_operator_autoscaler_last_scale_up_ready_seconds",
                &auto,
            )
            .is_empty())
    })
    .await?;
    // Lowering maxReplicas below the count scales down at once: a scale-down, and a
    // reversal (within ten minutes of the scale-up).
    api.patch(
        "auto",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"autoscaling": {"minReplicas": 1, "maxReplicas": 2}}})),
    )
    .await?;
    wait_for::<Indexer>(env, &ns, "auto", Phase::Available, 2).await?;
    eventually(LONG, "the tuning metrics of the scale-down", || async {
        let samples = crate::metrics::scrape(env)?;
        let value =
            |name: &str, labels: &[(&str, &str)]| crate::metrics::total(&samples, name, labels);
        Ok(
            value("clair_operator_autoscaler_scale_downs_total", &auto) >= 1.0
                && value("clair_operator_autoscaler_reversals_total", &auto) >= 1.0
                && value(
                    "clair_operator_autoscaler_replicas",
                    &with(("state", "max")),
                ) == 2.0
                && value(
                    "clair_operator_autoscaler_pinned_seconds_total",
                    &with(("state", "max")),
                ) > 0.0,
        )
    })
    .await?;

    // Without autoscaling the autoscaler goes and spec.replicas governs again.
    api.patch(
        "auto",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"autoscaling": null, "replicas": 1}})),
    )
    .await?;
    wait_for::<Indexer>(env, &ns, "auto", Phase::Available, 1).await?;
    eventually(LONG, "the autoscaler deleted", || {
        let hpas = hpas.clone();
        async move { Ok(hpas.get_opt("auto").await?.is_none()) }
    })
    .await?;
    eventually(LONG, "the autoscaler's series gone", || async {
        let samples = crate::metrics::scrape(env)?;
        Ok(crate::metrics::find(&samples, "clair_operator_autoscaler_replicas", &auto).is_empty())
    })
    .await
}

pub async fn failing_pods_degrade_and_recovery_restores_available(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let ns = env.namespace("degrade").await?;
    config_map(env, &ns, "clair-config", CONFIG).await?;
    indexer(env, &ns, "fragile", json!({"replicas": 2})).await?;
    wait_for::<Indexer>(env, &ns, "fragile", Phase::Available, 2).await?;
    let pods: Api<Pod> = Api::namespaced(env.client().await?, &ns);
    // What a kubelet reports when the readiness probe fails.
    for pod in pods
        .list(&ListParams::default().labels(&selector("fragile")))
        .await?
    {
        let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ReadinessProbeFailed"}, {"type": "ContainersReady", "status": "False"}]}});
        pods.patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await?;
    }
    let degraded: Indexer = wait_for(env, &ns, "fragile", Phase::Degraded, 0).await?;
    let (_, reason, _) = condition(degraded.status.as_ref().context("status")?, "Degraded")?;
    ensure!(
        reason == "BelowMinimumAvailable",
        "Degraded because {reason}"
    );
    // The Event is recorded after the status is written: give it a moment.
    let api: Api<Event> = Api::namespaced(env.client().await?, &ns);
    eventually(
        Duration::from_secs(10),
        "a BelowMinimumAvailable Warning event",
        || {
            let api = api.clone();
            async move {
                Ok(api
                    .list(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .any(|e| {
                        e.type_.as_deref() == Some("Warning")
                            && e.reason.as_deref() == Some("BelowMinimumAvailable")
                    }))
            }
        },
    )
    .await?;

    // New pods replace the failed ones and the service recovers.
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&selector("fragile")),
    )
    .await?;
    wait_for::<Indexer>(env, &ns, "fragile", Phase::Available, 2).await?;
    Ok(())
}

pub async fn drift_is_reverted_and_deletion_removes_everything(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let ns = env.namespace("drift").await?;
    config_map(env, &ns, "clair-config", CONFIG).await?;
    indexer(env, &ns, "steady", json!({})).await?;
    wait_for::<Indexer>(env, &ns, "steady", Phase::Available, 1).await?;
    let client = env.client().await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    env.kubectl_ok(
        &ns,
        &[
            "set",
            "image",
            "deployment/steady",
            "clair=quay.io/someone/else:1",
        ],
    )?;
    eventually(LONG, "the image reverted", || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get("steady").await?;
            Ok(d.spec
                .and_then(|s| s.template.spec)
                .is_some_and(|p| p.containers[0].image.as_deref() == Some(DEFAULT_IMAGE)))
        }
    })
    .await?;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    services.delete("steady", &DeleteParams::default()).await?;
    eventually(LONG, "the Service recreated", || {
        let services = services.clone();
        async move {
            Ok(services
                .get_opt("steady")
                .await?
                .is_some_and(|s| s.metadata.deletion_timestamp.is_none()))
        }
    })
    .await?;

    Api::<Indexer>::namespaced(client.clone(), &ns)
        .delete("steady", &DeleteParams::default())
        .await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    eventually(LONG, "every owned object garbage-collected", || {
        let (deployments, services, secrets, budgets) = (
            deployments.clone(),
            services.clone(),
            secrets.clone(),
            budgets.clone(),
        );
        async move {
            let lp = ListParams::default().labels(&selector("steady"));
            Ok(deployments.list(&lp).await?.items.is_empty()
                && services.list(&lp).await?.items.is_empty()
                && secrets.list(&lp).await?.items.is_empty()
                && budgets.list(&lp).await?.items.is_empty())
        }
    })
    .await
}

pub async fn twenty_available_resources_make_no_writes_when_idle(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let _counting = crate::support::CLUSTER_WIDE_CHANGES.read().await;
    let ns = env.namespace("idle").await?;
    let start = SystemTime::now();
    config_map(env, &ns, "clair-config", CONFIG).await?;
    for i in 0..20 {
        indexer(env, &ns, &format!("idle-{i}"), json!({})).await?;
    }
    for i in 0..20 {
        wait_for::<Indexer>(env, &ns, &format!("idle-{i}"), Phase::Available, 1).await?;
    }
    let setup = operator_writes(env, &ns, start)?;
    ensure!(
        setup.len() >= 20 * 4,
        "the audit log shows only {} operator writes during setup",
        setup.len()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_from = SystemTime::now();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let idle = operator_writes(env, &ns, idle_from)?;
    eprintln!(
        "operator writes in {ns}: {} during setup, {} in the 30 s idle window",
        setup.len(),
        idle.len()
    );
    ensure!(idle.is_empty(), "writes while idle: {idle:?}");
    Ok(())
}

/// A service's reconciles judge its Deployment from the watch that triggers them (issue 27):
/// reconciled again and again, an Available Indexer reads its Deployment at most right
/// after writing it (before the write's own event is here), and a scale the deployment
/// controller carries out is still seen, only from the watch.
pub async fn reconciles_judge_the_deployment_from_the_watch(env: &TestEnv) -> anyhow::Result<()> {
    let ns = env.namespace("watched-deployment").await?;
    config_map(env, &ns, "clair-config", CONFIG).await?;
    indexer(env, &ns, "watched", json!({})).await?;
    wait_for::<Indexer>(env, &ns, "watched", Phase::Available, 1).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let since = SystemTime::now();
    let reconciled = indexer_reconciles(env)?;
    let api: Api<Indexer> = Api::namespaced(env.client().await?, &ns);
    // Five reconciles: each annotation is an event of the Indexer's own watch. Each read its
    // Deployment before.
    for i in 0..5 {
        api.patch(
            "watched",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test/touched": i.to_string()}}})),
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // (Other tests' Indexers reconcile too: this says only that reconciles ran.)
    let touches = indexer_reconciles(env)? - reconciled;
    ensure!(
        touches >= 5.0,
        "{touches} Indexer reconciles for five touches"
    );
    // A scale: the operator writes the Deployment once; the deployment controller's status
    // updates (a pod more, then ready) come only through the watch.
    api.patch(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await?;
    wait_for::<Indexer>(env, &ns, "watched", Phase::Available, 2).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests: Vec<String> = operator_requests(env, &ns, since)?
        .iter()
        .filter(|e| e["stage"] == "ResponseComplete")
        .map(request_line)
        .collect();
    let at = |wanted: &str| -> Vec<usize> {
        (requests.iter().enumerate())
            .filter(|(_, r)| r.as_str() == wanted)
            .map(|(i, _)| i)
            .collect()
    };
    let (reads, writes) = (
        at("get deployments watched"),
        at("patch deployments watched"),
    );
    eprintln!("operator requests in {ns}: {requests:?}");
    // One write (one refused, its UID precondition failing, would show as a second), not
    // read before: the watch shows the Deployment the operator's, holding what it applied.
    ensure!(
        writes.len() == 1,
        "{} writes of the Deployment: {requests:?}",
        writes.len()
    );
    ensure!(
        reads.iter().all(|&read| read > writes[0]),
        "the Deployment was read before the operator changed it: {requests:?}"
    );
    let (reads, writes) = (reads.len(), writes.len());
    // Before, every reconcile read it (five touches, the scale's several): now only one in
    // the moment between the write and its event (a status write and the budget's each wake
    // the resource).
    ensure!(
        reads <= 2,
        "{reads} reads of the Deployment for {writes} write: the reconciles should judge it \
         from the watch: {requests:?}"
    );
    Ok(())
}

/// Indexer reconciles the operator counted, over the cluster.
fn indexer_reconciles(env: &TestEnv) -> anyhow::Result<f64> {
    let text = crate::metrics::metrics_text(env)?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("clair_operator_reconciles_total{") && l.contains("kind=\"Indexer\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

const SERVICE_MONITOR_CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
  "spec": {
    "group": "monitoring.coreos.com",
    "names": {"kind": "ServiceMonitor", "plural": "servicemonitors", "singular": "servicemonitor", "listKind": "ServiceMonitorList"},
    "scope": "Namespaced",
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
  }
}"#;

pub async fn a_service_monitor_appears_once_the_cluster_serves_them(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let ns = env.namespace("monitoring").await?;
    config_map(env, &ns, "clair-config", CONFIG).await?;
    indexer(env, &ns, "watched", json!({})).await?;
    wait_for::<Indexer>(env, &ns, "watched", Phase::Available, 1).await?;
    // Until the operator has seen the new API (this test's monitor appears), no other test
    // counts writes.
    let _changing = crate::support::CLUSTER_WIDE_CHANGES.write().await;
    // Installed after the operator started: the capability is re-checked, no restart.
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_str(SERVICE_MONITOR_CRD)?;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(env.client().await?);
    crds.patch(
        &crd.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let resource = clair_operator::render::service::service_monitor_resource();
    let monitors: Api<kube::api::DynamicObject> =
        Api::namespaced_with(env.client().await?, &ns, &resource);
    // Poke the resource now and then so a reconcile runs after the capability re-check.
    let indexers: Api<Indexer> = Api::namespaced(env.client().await?, &ns);
    eventually(Duration::from_secs(150), "a ServiceMonitor", || {
        let (monitors, indexers) = (monitors.clone(), indexers.clone());
        async move {
            let stamp = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)?
                .as_secs()
                / 10;
            indexers
                .patch(
                    "watched",
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"annotations": {"test/poke": stamp.to_string()}}}),
                    ),
                )
                .await?;
            Ok(monitors.get_opt("watched").await?.is_some())
        }
    })
    .await?;
    let monitor = monitors.get("watched").await?;
    ensure!(
        monitor.data["spec"]["endpoints"][0]["port"] == "introspection",
        "{:?}",
        monitor.data
    );
    ensure!(
        monitor
            .owner_references()
            .iter()
            .any(|o| o.kind == "Indexer" && o.name == "watched")
    );
    Ok(())
}

/// Reliability case 3: a second writer setting an owned Deployment's image every second. The
/// operator changes it back at once the first time, then after a growing wait: bounded
/// writes, a `Contested` condition naming the object and the writer, reverts counted in
/// `applies_total`; once the writer stops, the operator's image holds.
pub async fn a_second_writer_is_fought_with_a_growing_wait_and_loses(
    env: &TestEnv,
) -> anyhow::Result<()> {
    const FIGHT: Duration = Duration::from_secs(40);
    // Its quiet window counts writes: no API may appear meanwhile (a new ServiceMonitor
    // API rightly makes the operator write this Indexer's monitor).
    let _counting = crate::support::CLUSTER_WIDE_CHANGES.read().await;
    let ns = env.namespace("fight").await?;
    config_map(env, &ns, "clair-config", CONFIG).await?;
    indexer(env, &ns, "fought", json!({})).await?;
    wait_for::<Indexer>(env, &ns, "fought", Phase::Available, 1).await?;
    let client = env.client().await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let image = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers[0].image.clone())
    };
    let reverted_before = reverts(env)?;
    let started = SystemTime::now();
    let mut writes_by_fighter = 0;
    let fight_started = std::time::Instant::now();
    let fighter = PatchParams {
        field_manager: Some("fighter".to_string()),
        ..Default::default()
    };
    let theirs = json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "quay.io/someone/else:1"}]);
    while fight_started.elapsed() < FIGHT {
        let current = deployments.get("fought").await?;
        if image(&current).as_deref() != Some("quay.io/someone/else:1") {
            deployments
                .patch(
                    "fought",
                    &fighter,
                    &Patch::<()>::Json(serde_json::from_value(theirs.clone())?),
                )
                .await?;
            writes_by_fighter += 1;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let patches: Vec<String> = operator_writes(env, &ns, started)?
        .into_iter()
        .filter(|w| w == "patch deployments fought")
        .collect();
    let reverted = reverts(env)? - reverted_before;
    println!(
        "second writer: {writes_by_fighter} changes in {} s, {} reverts by the operator",
        FIGHT.as_secs(),
        patches.len()
    );
    // 1, 2, 4, 8, 16 s apart (jitter only lengthens): at most 6 in 40 s, never one per change.
    ensure!(
        (2..=6).contains(&patches.len()),
        "{} operator patches of the Deployment while it was fought over",
        patches.len()
    );
    ensure!(
        reverted >= patches.len() as f64,
        "applies_total{{outcome=\"reverted\"}} rose by {reverted}, the audit log has {} reverts",
        patches.len()
    );
    let indexers: Api<Indexer> = Api::namespaced(client.clone(), &ns);
    let status = indexers.get("fought").await?.status.context("status")?;
    let (state, reason, message) = condition(&status, "Contested")?;
    ensure!(
        state == "True"
            && reason == "FieldContested"
            && message.contains("Deployment fought")
            && message.contains("\"fighter\""),
        "{state} {reason}: {message}"
    );
    // The writer stopped: within the longest wait so far, the operator's image is back.
    eventually(
        Duration::from_secs(120),
        "the operator's image back",
        || {
            let deployments = deployments.clone();
            async move {
                let d = deployments.get("fought").await?;
                Ok(image(&d).as_deref() == Some(DEFAULT_IMAGE))
            }
        },
    )
    .await?;
    // And then quiet, the condition still up: nothing in it moves with time, so no status
    // write feeds a reconcile that writes again.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let quiet = SystemTime::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let writes = operator_writes(env, &ns, quiet)?;
    ensure!(
        writes.is_empty(),
        "the operator wrote while the fight was over: {writes:?}"
    );
    Ok(())
}

/// `applies_total{outcome="reverted"}` summed over kinds, from the operator's metrics.
fn reverts(env: &TestEnv) -> anyhow::Result<f64> {
    Ok(crate::metrics::metrics_text(env)?
        .lines()
        .filter(|l| {
            l.starts_with("clair_operator_applies_total{") && l.contains("outcome=\"reverted\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// `spec.tracing` becomes Clair's `trace` section in the snapshot the pods run: the headers
/// Secret is waited for while missing, refused while a value is no header value (never
/// quoted), and an endpoint Clair cannot export to is refused by the webhook.
pub async fn tracing_renders_the_trace_section_once_its_headers_secret_is_good(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let ns = env.namespace("tracing").await?;
    let client = env.client().await?;
    config_map(env, &ns, "clair-config", CONFIG).await?;
    let refused = indexer(
        env,
        &ns,
        "no-port",
        json!({"tracing": {"endpoint": "http://collector.observability"}}),
    )
    .await
    .err()
    .context("an endpoint without a port was admitted")?;
    ensure!(
        format!("{refused:#}").contains("spec.tracing.endpoint"),
        "the refusal names the field: {refused:#}"
    );

    let tracing = json!({"tracing": {
        "endpoint": "http://collector.observability:4318",
        "headersSecret": "otlp-headers",
    }});
    indexer(env, &ns, "idx", tracing).await?;
    let api: Api<Indexer> = Api::namespaced(client.clone(), &ns);
    let config_valid = |reason: &'static str| {
        let api = api.clone();
        async move {
            let status = api.get("idx").await?.status.unwrap_or_default();
            anyhow::Ok(
                condition(&status, "ConfigValid")
                    .ok()
                    .filter(|(_, r, _)| r == reason)
                    .map(|(_, _, message)| message),
            )
        }
    };
    eventually(LONG, "ConfigMissing naming the headers Secret", || async {
        Ok(config_valid("ConfigMissing").await?.is_some_and(|m| {
            m.contains("otlp-headers") && m.contains("spec.tracing.headersSecret")
        }))
    })
    .await?;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let headers = |data: serde_json::Value| {
        let secrets = secrets.clone();
        async move {
            let secret = json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "otlp-headers"}, "stringData": data});
            secrets
                .patch(
                    "otlp-headers",
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&secret),
                )
                .await
        }
    };
    // The apiserver lets only header-name characters into a key; a value may hold anything.
    headers(json!({"x-api-key": "hunter2\r\nX-Injected: 1"})).await?;
    eventually(
        LONG,
        "ConfigInvalid naming the key, not the value",
        || async {
            Ok(config_valid("ConfigInvalid").await?.is_some_and(|m| {
                m.contains("Secret otlp-headers")
                    && m.contains("x-api-key")
                    && !m.contains("hunter2")
            }))
        },
    )
    .await?;

    // `stringData` merges into `data`: the whole Secret is replaced to drop the bad key.
    secrets
        .delete("otlp-headers", &DeleteParams::default())
        .await?;
    headers(json!({"X-Scope-OrgID": "tenant-a"})).await?;
    let available: Indexer = wait_for(env, &ns, "idx", Phase::Available, 1).await?;
    let hash = available
        .status
        .and_then(|s| s.config_hash)
        .context("hash")?;
    let snapshot = secrets
        .list(&ListParams::default().labels(&selector("idx")))
        .await?
        .items
        .into_iter()
        .find(|s| s.name_any().ends_with(&hash[..10]))
        .context("the running snapshot")?;
    let config: serde_json::Value = serde_json::from_slice(
        &snapshot
            .data
            .and_then(|d| d.get("config.json").cloned())
            .context("config.json")?
            .0,
    )?;
    ensure!(
        config["trace"]
            == json!({"name": "otlp", "probability": 0.1, "otlp": {"http": {
                "endpoint": "collector.observability:4318", "insecure": true,
                "headers": {"x-scope-orgid": "tenant-a"}}}}),
        "the trace section the pods run: {}",
        config["trace"]
    );
    Ok(())
}
