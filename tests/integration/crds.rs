//! The foundation: the CRDs install, valid resources are accepted as written, invalid ones are
//! refused by the apiserver with the field named, and kubectl's explain, scale and get read
//! what the schema declares. Also that the control plane runs pods on kwok nodes at all.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use clair_operator::api::{Clair, Indexer, Matcher, Notifier};
use clair_operator::crdgen;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::support::{FIELD_MANAGER, TestEnv, condition_true, eventually};

pub async fn crds_are_established(env: &TestEnv) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(env.client().await?);
    for crd in crdgen::all() {
        let served = api.get(&crd.name_any()).await?;
        ensure!(
            condition_true(&served, "Established") && condition_true(&served, "NamesAccepted"),
            "{} is not Established with its names accepted: {:?}",
            crd.name_any(),
            served.status
        );
        ensure!(
            served.spec.names.short_names == crd.spec.names.short_names,
            "short names of {} differ",
            crd.name_any()
        );
    }
    // The three services serve the scale subresource; Clair does not.
    for (crd, scalable) in [
        (Indexer::crd(), true),
        (Matcher::crd(), true),
        (Notifier::crd(), true),
        (Clair::crd(), false),
    ] {
        let served = api.get(&crd.name_any()).await?;
        let subresources = served.spec.versions[0]
            .subresources
            .clone()
            .unwrap_or_default();
        ensure!(
            subresources.status.is_some(),
            "{} lacks status",
            crd.name_any()
        );
        ensure!(
            subresources.scale.is_some() == scalable,
            "{}: scale subresource present = {}",
            crd.name_any(),
            subresources.scale.is_some()
        );
    }
    Ok(())
}

pub async fn deployments_become_available_on_kwok_nodes(env: &TestEnv) -> anyhow::Result<()> {
    let ns = env.namespace("kwok").await?;
    let api: Api<Deployment> = Api::namespaced(env.client().await?, &ns);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "pause"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "pause"}},
            "template": {
                "metadata": {"labels": {"app": "pause"}},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
            }
        }
    }))?;
    api.create(&PostParams::default(), &deployment).await?;
    eventually(Duration::from_secs(60), "2 available replicas", || {
        let api = api.clone();
        async move {
            let d = api.get("pause").await?;
            Ok(d.status.and_then(|s| s.available_replicas) == Some(2))
        }
    })
    .await
}

pub async fn valid_resources_are_accepted(env: &TestEnv) -> anyhow::Result<()> {
    let ns = env.namespace("valid").await?;
    for file in ["services.yaml", "clair.yaml"] {
        let path = format!("{}/examples/{file}", env!("CARGO_MANIFEST_DIR"));
        env.kubectl_ok(&ns, &["apply", "--server-side", "-f", &path])?;
    }
    let client = env.client().await?;

    let indexer = Api::<Indexer>::namespaced(client.clone(), &ns)
        .get("indexer")
        .await?;
    let spec = &indexer.spec.service;
    ensure!(
        spec.replicas == 2,
        "indexer replicas read back as {}",
        spec.replicas
    );
    ensure!(
        spec.config.root.config_map.as_ref().map(|k| k.key.as_str()) == Some("config.yaml"),
        "indexer root config read back as {:?}",
        spec.config.root
    );
    ensure!(
        spec.pod
            .scratch
            .as_ref()
            .and_then(|s| s.size.as_ref())
            .map(|q| q.0.as_str())
            == Some("20Gi"),
        "scratch size read back as {:?}",
        spec.pod.scratch
    );

    let matcher = Api::<Matcher>::namespaced(client.clone(), &ns)
        .get("matcher")
        .await?;
    let autoscaling = matcher
        .spec
        .service
        .autoscaling
        .context("matcher autoscaling lost")?;
    ensure!(autoscaling.min_replicas == Some(2) && autoscaling.max_replicas == 6);
    ensure!(autoscaling.target_cpu_utilization_percentage == Some(70));
    ensure!(
        matcher.spec.service.config.dropins.len() == 1,
        "matcher drop-in lost"
    );

    // replicas was left out: the schema's default applies.
    let notifier = Api::<Notifier>::namespaced(client.clone(), &ns)
        .get("notifier")
        .await?;
    ensure!(
        notifier.spec.service.replicas == 1,
        "notifier replicas defaulted to {}",
        notifier.spec.service.replicas
    );

    let clair = Api::<Clair>::namespaced(client, &ns).get("clair").await?;
    let external = clair
        .spec
        .database
        .external
        .context("external database lost")?;
    ensure!(external.notifier.map(|k| k.key) == Some("notifier".to_string()));
    ensure!(
        clair.spec.matcher.and_then(|m| m.replicas) == Some(2),
        "the matcher's replicas lost"
    );
    ensure!(
        clair
            .spec
            .indexer
            .and_then(|i| i.autoscaling)
            .is_some_and(|a| a.max_replicas == 6),
        "the indexer's autoscaling lost"
    );
    ensure!(
        clair.spec.updaters.and_then(|u| u.schedule).as_deref() == Some("0 */6 * * *"),
        "updater schedule lost"
    );
    Ok(())
}

/// An object the apiserver must refuse, and what its message must say.
struct Invalid {
    case: &'static str,
    resource: ApiResource,
    spec: Value,
    expect: &'static [&'static str],
}

fn service_spec(extra: Value) -> Value {
    let mut spec = json!({"config": {"root": {"configMap": {"name": "c", "key": "config.yaml"}}}});
    merge(&mut spec, extra);
    spec
}

fn clair_spec(extra: Value) -> Value {
    let mut spec = json!({"database": {"external": {
        "indexer": {"name": "db", "key": "indexer"},
        "matcher": {"name": "db", "key": "matcher"},
        "notifier": {"name": "db", "key": "notifier"}
    }}});
    merge(&mut spec, extra);
    spec
}

/// JSON Merge Patch, enough for building test objects.
fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(&k);
                } else {
                    merge(t.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p,
    }
}

pub async fn invalid_resources_are_rejected_with_the_field_named(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let ns = env.namespace("invalid").await?;
    let client = env.client().await?;
    let indexer = ApiResource::erase::<Indexer>(&());
    let notifier = ApiResource::erase::<Notifier>(&());
    let clair = ApiResource::erase::<Clair>(&());
    let cases = [
        Invalid {
            case: "replicas of the wrong type",
            resource: indexer.clone(),
            spec: service_spec(json!({"replicas": "three"})),
            expect: &["spec.replicas", "integer"],
        },
        Invalid {
            case: "negative replicas",
            resource: indexer.clone(),
            spec: service_spec(json!({"replicas": -1})),
            expect: &["spec.replicas", "greater than or equal to 0"],
        },
        Invalid {
            case: "no config",
            resource: notifier.clone(),
            spec: json!({"replicas": 1}),
            expect: &["spec.config", "Required value"],
        },
        Invalid {
            case: "root config in both a ConfigMap and a Secret",
            resource: indexer.clone(),
            spec: service_spec(
                json!({"config": {"root": {"secret": {"name": "s", "key": "config.yaml"}}}}),
            ),
            expect: &["spec.config.root", "set exactly one of configMap or secret"],
        },
        Invalid {
            case: "a volume named like the operator's own",
            resource: indexer.clone(),
            spec: service_spec(json!({"pod": {"volumes": [{"name": "config", "emptyDir": {}}]}})),
            expect: &["spec.pod.volumes", "the operator's own; pick another name"],
        },
        Invalid {
            case: "a mount over the operator's CA folder",
            resource: indexer.clone(),
            spec: service_spec(
                json!({"pod": {"volumeMounts": [{"name": "x", "mountPath": "/var/run/certs"}]}}),
            ),
            expect: &["spec.pod.volumeMounts", "extra CAs go in caBundle"],
        },
        Invalid {
            case: "root config key Clair would refuse",
            resource: indexer.clone(),
            spec: service_spec(json!({"config": {"root": {"configMap": {"key": "config.yml"}}}})),
            expect: &["spec.config.root", "must end in .yaml or .json"],
        },
        Invalid {
            case: "drop-in key Clair would ignore",
            resource: notifier.clone(),
            spec: service_spec(
                json!({"config": {"dropins": [{"secret": {"name": "s", "key": "extra.txt"}}]}}),
            ),
            expect: &["spec.config.dropins", "drop-in key must end in"],
        },
        Invalid {
            case: "minReplicas above maxReplicas",
            resource: indexer.clone(),
            spec: service_spec(json!({"autoscaling": {"minReplicas": 5, "maxReplicas": 2}})),
            expect: &[
                "spec.autoscaling.minReplicas",
                "minReplicas must not exceed maxReplicas",
            ],
        },
        Invalid {
            case: "engine KEDA without its Prometheus",
            resource: indexer.clone(),
            spec: service_spec(json!({"autoscaling": {"engine": "KEDA", "maxReplicas": 2}})),
            expect: &[
                "spec.autoscaling.keda",
                "engine KEDA needs keda.prometheusAddress",
            ],
        },
        Invalid {
            case: "engine KEDA with a CPU target",
            resource: indexer.clone(),
            spec: service_spec(json!({"autoscaling": {"engine": "KEDA", "maxReplicas": 2,
                "targetCPUUtilizationPercentage": 70,
                "keda": {"prometheusAddress": "http://prometheus:9090"}}})),
            expect: &["spec.autoscaling.engine", "belong to engine HPA"],
        },
        Invalid {
            case: "KEDA triggers under engine HPA",
            resource: indexer.clone(),
            spec: service_spec(json!({"autoscaling": {"maxReplicas": 2,
                "keda": {"prometheusAddress": "http://prometheus:9090"}}})),
            expect: &["spec.autoscaling.keda", "read only with engine: KEDA"],
        },
        Invalid {
            case: "a Prometheus address that is not a URL",
            resource: indexer.clone(),
            spec: service_spec(json!({"autoscaling": {"engine": "KEDA", "maxReplicas": 2,
                "keda": {"prometheusAddress": "prometheus:9090"}}})),
            expect: &["spec.autoscaling.keda.prometheusAddress", "should match"],
        },
        Invalid {
            case: "an autoscaled matcher running its own updaters",
            resource: clair.clone(),
            spec: clair_spec(json!({"matcher": {"autoscaling": {"maxReplicas": 3}}})),
            expect: &[
                "spec.updaters",
                "an autoscaled matcher needs updaters.mode: CronJob",
            ],
        },
        Invalid {
            case: "no database",
            resource: clair.clone(),
            spec: json!({"indexer": {"replicas": 1}}),
            expect: &["spec.database", "Required value"],
        },
        Invalid {
            case: "managed and external database at once",
            resource: clair.clone(),
            spec: clair_spec(json!({"database": {"managed": {}}})),
            expect: &[
                "spec.database",
                "set exactly one of database.managed or database.external",
            ],
        },
        Invalid {
            case: "external database without the enabled notifier's connection string",
            resource: clair.clone(),
            spec: clair_spec(json!({"database": {"external": {"notifier": null}}})),
            expect: &[
                "spec.database.external",
                "database.external.notifier is required",
            ],
        },
        Invalid {
            case: "HTTPRoute without a gateway",
            resource: clair.clone(),
            spec: clair_spec(
                json!({"routing": {"kind": "HTTPRoute", "host": "clair.example.com"}}),
            ),
            expect: &["spec.routing.gateway", "routing.gateway is required"],
        },
        Invalid {
            case: "unknown routing kind",
            resource: clair.clone(),
            spec: clair_spec(json!({"routing": {"kind": "Nginx"}})),
            expect: &["spec.routing.kind", "supported values"],
        },
        Invalid {
            case: "updater CronJob without a schedule",
            resource: clair.clone(),
            spec: clair_spec(json!({"updaters": {"mode": "CronJob"}})),
            expect: &["spec.updaters.schedule", "updaters.schedule is required"],
        },
        Invalid {
            case: "an export without its claim",
            resource: clair.clone(),
            spec: clair_spec(json!({"updaters": {"mode": "Export", "schedule": "@daily"}})),
            expect: &[
                "spec.updaters.export",
                "updaters.export is set exactly when",
            ],
        },
        Invalid {
            case: "an export that also imports",
            resource: clair.clone(),
            spec: clair_spec(json!({"updaters": {"mode": "Export", "schedule": "@daily",
                "export": {"claimName": "carry", "path": "updates.json.zst"},
                "import": {"url": "https://example.invalid/updates"}}})),
            expect: &["spec.updaters.import", "exclude each other"],
        },
        Invalid {
            case: "a Clair-wide volume named like the operator's own",
            resource: clair.clone(),
            spec: clair_spec(json!({"pod": {"volumes": [{"name": "export", "emptyDir": {}}]}})),
            expect: &["spec.pod.volumes", "the operator's own"],
        },
    ];
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &case.resource);
        let mut object = DynamicObject::new(&format!("invalid-{i}"), &case.resource);
        object.data = json!({"spec": case.spec});
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => failures.push(format!("{}: accepted", case.case)),
            Err(kube::Error::Api(status)) => {
                let missing: Vec<_> = case
                    .expect
                    .iter()
                    .filter(|e| !status.message.contains(**e))
                    .collect();
                if status.code != 422 || !missing.is_empty() {
                    failures.push(format!(
                        "{}: got {} {:?}, missing {missing:?}",
                        case.case, status.code, status.message
                    ));
                }
            }
            Err(e) => failures.push(format!("{}: {e}", case.case)),
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

pub async fn kubectl_explain_shows_descriptions(env: &TestEnv) -> anyhow::Result<()> {
    let expectations = [
        (
            "clair.spec.database",
            &[
                "PostgreSQL databases of the three services",
                "managed",
                "external",
            ][..],
        ),
        (
            "clair.spec.database.external.notifier",
            &["required while the notifier is enabled"],
        ),
        (
            "indexer.spec.config.root",
            &["The root config", "configMap", "secret"],
        ),
        ("matcher.spec.autoscaling.maxReplicas", &["max_connections"]),
        ("notifier.status.phase", &["runbooks"]),
    ];
    for (field, wanted) in expectations {
        // The apiserver rebuilds its OpenAPI document when any CRD changes (other tests
        // install some), and kubectl explain fails while it does: retry briefly.
        let mut out = String::new();
        eventually(
            Duration::from_secs(30),
            &format!("kubectl explain {field}"),
            || {
                let result = env.kubectl_ok("default", &["explain", field]);
                if let Ok(text) = &result {
                    out = text.clone();
                }
                async move { result.map(|_| true) }
            },
        )
        .await?;
        for w in wanted {
            ensure!(
                out.contains(w),
                "kubectl explain {field} lacks {w:?}:\n{out}"
            );
        }
    }
    Ok(())
}

pub async fn kubectl_scale_changes_spec_replicas(env: &TestEnv) -> anyhow::Result<()> {
    let ns = env.namespace("scale").await?;
    let api: Api<Indexer> = Api::namespaced(env.client().await?, &ns);
    let indexer: Indexer = serde_json::from_value(json!({
        "apiVersion": "clair.projectquay.io/v1alpha1",
        "kind": "Indexer",
        "metadata": {"name": "scaled"},
        "spec": service_spec(json!({}))
    }))?;
    api.create(&PostParams::default(), &indexer).await?;
    // The operator publishes the selector the scale subresource reads (the resource stays
    // Pending: its ConfigMap does not exist).
    eventually(Duration::from_secs(30), "status.selector", || {
        let api = api.clone();
        async move {
            Ok(api
                .get("scaled")
                .await?
                .status
                .and_then(|s| s.selector)
                .is_some())
        }
    })
    .await?;
    let out = env.kubectl_ok(&ns, &["scale", "indexer", "scaled", "--replicas", "3"])?;
    ensure!(out.contains("scaled"), "kubectl scale said: {out}");
    let after = api.get("scaled").await?;
    ensure!(
        after.spec.service.replicas == 3,
        "spec.replicas is {} after kubectl scale",
        after.spec.service.replicas
    );
    let scale = api.get_scale("scaled").await?;
    let scale_status = scale.status.context("scale has no status")?;
    ensure!(scale.spec.and_then(|s| s.replicas) == Some(3));
    ensure!(
        scale_status.replicas == 0,
        "scale status replicas {}",
        scale_status.replicas
    );
    let selector = scale_status.selector.unwrap_or_default();
    ensure!(
        selector.contains("app.kubernetes.io/instance=scaled")
            && selector.contains("app.kubernetes.io/component=indexer"),
        "scale selector {selector:?}"
    );
    // The short name works too.
    let out = env.kubectl_ok(&ns, &["scale", "cidx", "scaled", "--replicas", "0"])?;
    ensure!(out.contains("scaled"));
    ensure!(api.get("scaled").await?.spec.service.replicas == 0);
    Ok(())
}

pub async fn printer_columns_show_phase_and_readiness(env: &TestEnv) -> anyhow::Result<()> {
    let ns = env.namespace("columns").await?;
    let path = format!("{}/examples/clair.yaml", env!("CARGO_MANIFEST_DIR"));
    env.kubectl_ok(&ns, &["apply", "--server-side", "-f", &path])?;
    let api: Api<Clair> = Api::namespaced(env.client().await?, &ns);
    // The operator reconciles this Clair too and would write its own status over the one
    // below: held by a finalizer of the test's and deleted, it is left alone (the operator
    // does nothing for a resource being deleted).
    const HOLD: &str = "tests.clair.projectquay.io/hold";
    api.patch(
        "clair",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [HOLD]}})),
    )
    .await?;
    api.delete("clair", &Default::default()).await?;
    // A reconcile that began before the delete may still write: the status is set until it
    // holds.
    let status = json!({
        "apiVersion": Clair::api_version(&()),
        "kind": Clair::kind(&()),
        "status": {
            "phase": "Available",
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "AllServicesAvailable",
                "message": "every service is available", "lastTransitionTime": "2026-01-01T00:00:00Z"
            }],
            "indexer": {"name": "clair-indexer", "readyReplicas": 2}
        }
    });
    eventually(Duration::from_secs(20), "the test's status kept", || {
        let api = api.clone();
        let status = status.clone();
        async move {
            api.patch_status(
                "clair",
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(status),
            )
            .await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let phase = api.get("clair").await?.status.and_then(|s| s.phase);
            Ok(phase == Some(clair_operator::api::Phase::Available))
        }
    })
    .await?;
    let out = env.kubectl_ok(&ns, &["get", "clair", "clair"])?;
    let mut lines = out.lines();
    let header: Vec<&str> = lines
        .next()
        .context("no header")?
        .split_whitespace()
        .collect();
    let row: Vec<&str> = lines.next().context("no row")?.split_whitespace().collect();
    ensure!(
        header == ["NAME", "PHASE", "READY", "AGE"],
        "header {header:?}"
    );
    ensure!(row[..3] == ["clair", "Available", "True"], "row {row:?}");

    let wide = env.kubectl_ok(&ns, &["get", "clr", "-o", "wide"])?;
    let header = wide.lines().next().unwrap_or_default();
    for column in ["IMAGE", "INDEXERS", "MATCHERS", "NOTIFIERS"] {
        if !header.contains(column) {
            bail!("wide output lacks {column}: {wide}");
        }
    }
    ensure!(
        wide.lines().nth(1).is_some_and(|row| row.contains(" 2 ")),
        "wide row: {wide}"
    );
    api.patch(
        "clair",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    Ok(())
}
