//! A Clair version upgrade on a real node: `clairctl admin pre` and `post` run in real Job
//! pods with the rendered config against the real database, the services roll to the new
//! image and become Ready by their probes, and the scan made before still answers.
//!
//! Only Clair v4.9.0 is served by the module proxy here, so the "older" image is the same
//! binaries tagged 4.8.0 (see docs/decisions.md): this proves the mechanics, not a schema
//! migration between versions.

use anyhow::{Context, ensure};
use clair_operator::api::{Clair, Phase};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::fixtures::{FixtureServer, PACKAGE, VULNERABILITY, VULNERABLE_VERSION, alpine_layer};
use crate::scan::{
    START, airgapped_dropin, dump_on_error, index, quay_token, restricted_namespace,
    run_updaters_now, service_url, vulnerabilities_of, vulnerability_report,
};
use crate::support::TestEnv;
use crate::support::clair::{
    create_clair, external_databases, external_spec, patch_spec, phase_is, wait_clair_within,
};

const OLDER: &str = "quay.io/projectquay/clair:4.8.0";
const PINNED: &str = "quay.io/projectquay/clair:4.9.0";

pub async fn an_upgrade_runs_clairctl_admin_in_real_jobs_and_the_scan_still_answers(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = restricted_namespace(env, "upgrade").await?;
    external_databases(env, &client, &ns).await?;
    let layer = alpine_layer(VULNERABLE_VERSION)?;
    let server = FixtureServer::for_scans(&[("vulnerable", &layer)]).await?;
    airgapped_dropin(&client, &ns, &server).await?;
    let mut spec = external_spec();
    spec["image"] = json!(OLDER);
    spec["updaters"] = crate::scan::updaters_importing(&server);
    create_clair(&client, &ns, "clair", spec).await?;
    let available = |what: &'static str| {
        wait_clair_within(
            START,
            &client,
            &ns,
            "clair",
            what,
            phase_is(Phase::Available),
        )
    };
    let clair = dump_on_error(env, &ns, available("clair Available on 4.8.0").await)?;
    let version = clair.status.and_then(|s| s.version);
    ensure!(version.as_deref() == Some("v4.8.0"), "version {version:?}");

    // A scan on the older version.
    run_updaters_now(env, &client, &ns).await?;
    let token = quay_token(&client, &ns).await?;
    let report = index(&client, &ns, &token, &server.layer("vulnerable")?).await?;

    // The upgrade.
    patch_spec(&client, &ns, "clair", json!({"image": PINNED})).await?;
    let clair: Clair = dump_on_error(
        env,
        &ns,
        wait_clair_within(
            START,
            &client,
            &ns,
            "clair",
            "clair Available on 4.9.0",
            |c| {
                phase_is(Phase::Available)(c)
                    && c.status.as_ref().and_then(|s| s.version.as_deref()) == Some("v4.9.0")
            },
        )
        .await,
    )?;
    ensure!(clair.status.is_some());

    // Both steps ran to completion in real pods (their Jobs are cleaned up afterwards; the
    // Job controller's Events stay).
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let completed: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Job")
                && e.reason.as_deref() == Some("Completed")
        })
        .filter_map(|e| e.involved_object.name)
        .collect();
    for step in ["pre", "post"] {
        ensure!(
            completed
                .iter()
                .any(|name| name.starts_with(&format!("clair-upgrade-{step}-"))),
            "no completed `clairctl admin {step}` Job: {completed:?}"
        );
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    for mode in ["indexer", "matcher", "notifier"] {
        let deployment = deployments.get(&format!("clair-{mode}")).await?;
        let image = deployment
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers.first().and_then(|c| c.image.clone()))
            .context("the Deployment's image")?;
        ensure!(image == PINNED, "{mode} runs {image}");
    }

    // The scan made before the upgrade still answers, from the new pods.
    let matcher = service_url(&client, &ns, "clair-matcher").await?;
    let vulnerabilities = vulnerability_report(&matcher, &token, &report).await?;
    let names = vulnerabilities_of(&vulnerabilities, PACKAGE);
    ensure!(
        names == [VULNERABILITY],
        "after the upgrade the report names {names:?}: {vulnerabilities}"
    );
    Ok(())
}
