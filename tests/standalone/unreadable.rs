//! Undecodable objects (reliability case 4). With no webhook to stop them, a tenant stores an
//! Indexer whose free-form `pod.volumes` holds no volume, and another Indexer is stored under
//! a looser schema (its image a number: the CRD loosened, the object written, the real CRD restored): the
//! operator cannot read either. Neither stops the others' reconciliation; each gets one
//! Warning Event naming the field, the `unreadable_resources` gauge counts them, what the
//! operator made for the readable one before stays as it was, and both are reconciled once
//! fixed. (A typed watch fails its whole list on one such object, so before this no Indexer
//! in the scope would ever have been reconciled again.)

use std::time::Duration;

use anyhow::{Context, ensure};
use clair_operator::api::{Indexer, Phase};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::support::{TestEnv, eventually};

const LONG: Duration = Duration::from_secs(120);
const CONFIG: &str = "indexer:\n  connstring: host=db\n";
const CRD: &str = "indexers.clair.projectquay.io";

fn indexer(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: clair.projectquay.io/v1alpha1\nkind: Indexer\nmetadata:\n  name: {name}\n\
         spec:\n  config:\n    root:\n      configMap: {{name: cfg, key: config.yaml}}\n{extra}"
    )
}

/// The `SpecUnreadable` Events on `name`.
async fn unreadable_events(events: &Api<Event>, name: &str) -> anyhow::Result<Vec<Event>> {
    Ok(events
        .list(&ListParams::default().fields(&format!("regarding.name={name}")))
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("SpecUnreadable"))
        .collect())
}

fn gauge(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with("clair_operator_unreadable_resources{kind=\"Indexer\"}"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

const IMAGE_SCHEMA: &str =
    "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/image";

async fn replace_image_schema(
    crds: &Api<CustomResourceDefinition>,
    schema: serde_json::Value,
) -> anyhow::Result<()> {
    let patch = json!([{"op": "replace", "path": IMAGE_SCHEMA, "value": schema}]);
    crds.patch(
        CRD,
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(patch)?),
    )
    .await?;
    Ok(())
}

async fn available(api: &Api<Indexer>, name: &str) -> anyhow::Result<bool> {
    Ok(api
        .get(name)
        .await?
        .status
        .is_some_and(|s| s.phase == Some(Phase::Available)))
}

pub async fn unreadable_objects_are_named_and_stop_nothing_else(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    crate::operator::install(env, "base")?;
    let ns = env.namespace("unreadable").await?;
    let apply = ["apply", "--server-side", "-f", "-"];
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  config.yaml: |\n    {}\n",
        CONFIG.trim_end().replace('\n', "\n    ")
    );
    env.kubectl_run(&ns, &apply, Some(&cm))?;
    // Stored before the operator starts: its first list holds it.
    let hostile = indexer(
        "hostile",
        "  pod:\n    volumes:\n      - {name: v, secret: not-a-volume-source}\n",
    );
    let stored = env.kubectl_run(&ns, &apply, Some(&hostile))?;
    ensure!(
        stored.success,
        "the CRD refused the object: {}",
        stored.stderr
    );

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let original = serde_json::to_value(crds.get(CRD).await?)?;
    let original = original
        .pointer(IMAGE_SCHEMA)
        .context("no image schema")?
        .clone();
    let args = ["--no-webhook", "--no-leader-election", "--namespaces", &ns];
    let mut operator = crate::operator::start(env, "operator-unreadable", &args)?;
    let outcome = async {
        let indexers: Api<Indexer> = Api::namespaced(client.clone(), &ns);
        // Unreadable objects do not decode here either: read and patch them raw.
        let raw: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &ApiResource::erase::<Indexer>(&()));
        let events: Api<Event> = Api::namespaced(client.clone(), &ns);
        env.kubectl_run(&ns, &apply, Some(&indexer("good", "")))?;
        eventually(LONG, "the readable Indexer Available", || {
            available(&indexers, "good")
        })
        .await?;
        eventually(LONG, "a SpecUnreadable Event naming the field", || async {
            Ok(unreadable_events(&events, "hostile")
                .await?
                .iter()
                .any(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.contains("spec.pod.volumes[0].secret: invalid type"))
                }))
        })
        .await?;
        eventually(LONG, "unreadable_resources{kind=Indexer} 1", || async {
            Ok(gauge(&operator.metrics()?) == Some(1.0))
        })
        .await?;
        ensure!(
            raw.get("hostile").await?.data.get("status").is_none(),
            "an unreadable Indexer got a status"
        );
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        ensure!(deployments.get_opt("hostile").await?.is_none());

        // An object stored under a looser schema: the image as a number (replicas cannot be
        // loosened: the scale subresource reads it as an integer).
        replace_image_schema(&crds, json!({"x-kubernetes-int-or-string": true})).await?;
        let loose = json!({"spec": {"image": 5}});
        eventually(LONG, "the looser schema takes a number", || async {
            raw.patch("good", &PatchParams::default(), &Patch::Merge(&loose))
                .await?;
            Ok(true)
        })
        .await?;
        replace_image_schema(&crds, original.clone()).await?;
        eventually(LONG, "a SpecUnreadable Event naming spec.image", || async {
            Ok(unreadable_events(&events, "good").await?.iter().any(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("spec.image: invalid type"))
            }))
        })
        .await?;
        eventually(LONG, "unreadable_resources{kind=Indexer} 2", || async {
            Ok(gauge(&operator.metrics()?) == Some(2.0))
        })
        .await?;
        // Left as it was: the readable version's Deployment, one replica.
        let kept = deployments.get("good").await?;
        ensure!(
            kept.spec.and_then(|s| s.replicas) == Some(1),
            "the Deployment of an unreadable Indexer changed"
        );
        // Said once per generation (however often the watch lists again).
        ensure!(
            unreadable_events(&events, "hostile").await?.len() == 1,
            "the unreadable Indexer was reported again with nothing changed"
        );

        // Both fixed: both reconciled, nothing unreadable.
        raw.patch(
            "good",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"image": null, "replicas": 2}})),
        )
        .await?;
        raw.patch(
            "hostile",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"pod": {"volumes": null}}})),
        )
        .await?;
        eventually(
            LONG,
            "both Available, two pods for the fixed one",
            || async {
                let scaled =
                    deployments.get("good").await?.spec.and_then(|s| s.replicas) == Some(2);
                Ok(scaled
                    && available(&indexers, "good").await?
                    && available(&indexers, "hostile").await?)
            },
        )
        .await?;
        eventually(LONG, "unreadable_resources{kind=Indexer} 0", || async {
            Ok(gauge(&operator.metrics()?) == Some(0.0))
        })
        .await?;
        Ok(operator.check_running()?)
    }
    .await;
    // The real schema whatever happened: later tests need it.
    let restored = replace_image_schema(&crds, original).await;
    let outcome = outcome.and(restored);
    outcome.with_context(|| {
        operator
            .log()
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .join("\n")
    })
}
