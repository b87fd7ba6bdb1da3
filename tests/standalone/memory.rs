//! Memory a tenant controls, in total (issue 31 point 3): what was tried and took the
//! operator from ~55 MB to 319 MB (six templates of 50 references, the Secrets then grown to
//! 1 MB) and to 240 MB (thirty Indexers with 1.4 MiB of `pod.env`). Now a render holds at
//! most 1 MiB of values, four at once, and the CRDs bound every list and map a spec holds:
//! the operator's peak resident memory stays under [`PEAK_BOUND`] through both, and another
//! tenant's Clair becomes Available meanwhile.

use std::time::Duration;

use anyhow::{Context, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::operator::fleet_namespace;
use crate::support::clair::{create_clair, external_spec, phase_is, wait_clair};
use crate::support::{TestEnv, eventually};

/// The stated bound on the operator's peak RSS through both attacks.
const PEAK_BOUND: u64 = 128 * 1024 * 1024;
const REFERENCED: usize = 50;
const TEMPLATES: usize = 6;
const GROWN_BYTES: usize = 1_000_000;
const INDEXERS: usize = 30;
const MIB: f64 = 1024.0 * 1024.0;

pub async fn what_tenants_make_the_operator_hold_is_bounded_in_total(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let (client, other) = fleet_namespace(env, "memory-other").await?;
    let mut operator = crate::operator::start_with_webhook(env, "operator-memory", &[])?;
    let result = async {
        let tenant = env.namespace("memory-tenant").await?;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &tenant);
        let put = |name: String, value: String| {
            let secrets = secrets.clone();
            async move {
                let secret: Secret = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name}, "stringData": {"v": value},
                }))?;
                secrets
                    .patch(
                        &name,
                        &PatchParams::apply("memory-test").force(),
                        &Patch::Apply(&secret),
                    )
                    .await?;
                anyhow::Ok(())
            }
        };
        futures::stream::iter(0..REFERENCED)
            .map(|i| put(format!("s{i}"), "small".to_string()))
            .buffer_unordered(8)
            .try_collect::<Vec<_>>()
            .await?;
        let references: String = (0..REFERENCED)
            .map(|i| format!("  v{i}: secret://s{i}/v\n"))
            .collect();
        let baseline = operator.peak_rss()?;
        // Sealed by the webhook (which may still be starting), rendered by the controller.
        for t in 0..TEMPLATES {
            let template: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("template-{t}"),
                             "labels": {"clair.projectquay.io/template-config": "true"},
                             "annotations": {"clair.projectquay.io/template-input": "config.yaml.in",
                                             "clair.projectquay.io/template-output": "config.yaml"}},
                "stringData": {"config.yaml.in": format!("values:\n{references}")},
            }))?;
            // Until the webhook is registered and seals it (an unsealed one is never rendered).
            eventually(Duration::from_secs(60), "a template sealed", || {
                let secrets = secrets.clone();
                let template = template.clone();
                async move {
                    let name = template.metadata.name.clone().unwrap_or_default();
                    let Ok(created) = secrets.create(&PostParams::default(), &template).await else {
                        return Ok(false);
                    };
                    let sealed = created.metadata.annotations.is_some_and(|a| {
                        a.contains_key(clair_operator::templating::seal::SEAL)
                    });
                    if !sealed {
                        secrets.delete(&name, &Default::default()).await?;
                    }
                    Ok(sealed)
                }
            })
            .await?;
        }
        eventually(Duration::from_secs(60), "the templates rendered", || {
            let secrets = secrets.clone();
            async move {
                let rendered = secrets.get("template-0").await?.data.is_some_and(|d| d.contains_key("config.yaml"));
                Ok(rendered)
            }
        })
        .await?;
        // Every referenced Secret grows to 1 MB: a render would read 50 MB.
        let grown = "x".repeat(GROWN_BYTES);
        futures::stream::iter(0..REFERENCED)
            .map(|i| put(format!("s{i}"), grown.clone()))
            .buffer_unordered(4)
            .try_collect::<Vec<_>>()
            .await?;
        // The re-render controller reacts to every change; give it time to.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let after_templates = operator.peak_rss()?;

        // The largest Indexers the CRD admits, thirty of them; one larger is refused.
        let indexer = |name: &str, env_count: usize, value_bytes: usize| {
            let env: Vec<serde_json::Value> = (0..env_count)
                .map(|i| serde_json::json!({"name": format!("E{i}"), "value": "x".repeat(value_bytes)}))
                .collect();
            let annotations: serde_json::Map<String, serde_json::Value> = (0..32)
                .map(|i| (format!("example.com/a{i}"), serde_json::Value::String("y".repeat(2048))))
                .collect();
            serde_json::json!({
                "apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Indexer",
                "metadata": {"name": name},
                "spec": {"config": {"root": {"configMap": {"name": "cfg", "key": "config.yaml"}}},
                         "pod": {"env": env, "annotations": annotations}},
            })
            .to_string()
        };
        let refused = env.kubectl_run(&tenant, &["create", "-f", "-"], Some(&indexer("huge", 1400, 1000)))?;
        ensure!(
            !refused.success && refused.stderr.contains("spec.pod.env"),
            "an Indexer with 1.4 MB of env was admitted: {}",
            refused.stderr.chars().take(500).collect::<String>()
        );
        for i in 0..INDEXERS {
            let created = env.kubectl_run(&tenant, &["create", "-f", "-"], Some(&indexer(&format!("largest-{i}"), 32, 2048)))?;
            ensure!(created.success, "the largest admitted Indexer: {}", created.stderr);
        }

        // Another tenant is served meanwhile.
        create_clair(&client, &other, "clair", external_spec()).await?;
        wait_clair(&client, &other, "clair", "another tenant's Clair Available", phase_is(clair_operator::api::Phase::Available)).await?;
        operator.check_running()?;
        let peak = operator.peak_rss()?;
        println!(
            "| operator peak RSS | MiB |\n|---|---|\n| started, webhook serving | {:.1} |\n\
             | {TEMPLATES} templates of {REFERENCED} references, grown to 1 MB each | {:.1} |\n\
             | and {INDEXERS} of the largest Indexers the CRD admits, another Clair Available | {:.1} |",
            baseline as f64 / MIB,
            after_templates as f64 / MIB,
            peak as f64 / MIB
        );
        ensure!(
            peak < PEAK_BOUND,
            "the operator's peak RSS reached {:.1} MiB (bound {:.0} MiB)",
            peak as f64 / MIB,
            PEAK_BOUND as f64 / MIB
        );
        // The over-budget renders were refused, naming the limit.
        let events = env.kubectl_ok(&tenant, &["get", "events", "--field-selector", "reason=TemplateNotRendered", "-o", "name"])?;
        ensure!(!events.trim().is_empty(), "no TemplateNotRendered Event for the grown templates");
        Ok(())
    }
    .await;
    let log = operator.log();
    drop(operator);
    crate::operator::remove_webhook_configurations(&client).await?;
    result.with_context(|| {
        format!(
            "operator log (tail):\n{}",
            log.lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        )
    })
}
