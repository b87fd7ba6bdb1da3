//! A `Clair` with a managed database on a real node: the PostgreSQL image's entrypoint
//! initialises the data directory and runs the operator's bootstrap script (a role and a
//! database per service), the services connect and become Ready by their real probes, and
//! deleting the database pod loses nothing: the claim (a local volume) keeps the data, the
//! StatefulSet starts a new pod on it, an index report written before is still there, and
//! the operator rolls the services onto the new pod by itself.

use std::os::unix::fs::PermissionsExt;

use anyhow::{Context, ensure};
use clair_operator::api::Phase;
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::fixtures::{FixtureServer, VULNERABLE_VERSION, alpine_layer, request_within};
use crate::scan::{
    START, airgapped_dropin, dump_on_error, index, pods_serve_as_nobody, quay_token,
    restricted_namespace, service_url,
};
use crate::support::clair::{create_clair, phase_is, secret_text, wait_clair_within};
use crate::support::{FIELD_MANAGER, TestEnv};

/// A local volume `name` for `claim`, owned by `owner` (the image's postgres user): the
/// cluster has no provisioner.
pub async fn local_volume(
    env: &TestEnv,
    ns: &str,
    name: &str,
    claim: &str,
    owner: u32,
) -> anyhow::Result<()> {
    let path = env.plane.dir().join(format!("volumes/{name}"));
    std::fs::create_dir_all(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
    std::os::unix::fs::chown(&path, Some(owner), Some(owner))?;
    let volumes: Api<PersistentVolume> = Api::all(env.client().await?);
    volumes
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                         "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                         "claimRef": {"namespace": ns, "name": claim},
                         "hostPath": {"path": path, "type": "Directory"}},
            })),
        )
        .await?;
    Ok(())
}

pub async fn a_managed_database_initialises_and_keeps_its_data_across_a_pod_restart(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = restricted_namespace(env, "managed").await?;
    // The engine's claim, for the image's postgres user (999).
    local_volume(
        env,
        &ns,
        &format!("{ns}-data"),
        "data-clair-database-0",
        999,
    )
    .await?;
    let layer = alpine_layer(VULNERABLE_VERSION)?;
    let server = FixtureServer::for_scans(&[("vulnerable", &layer)]).await?;
    airgapped_dropin(&client, &ns, &server).await?;
    create_clair(
        &client,
        &ns,
        "clair",
        json!({
            "database": {"managed": {"storage": {"size": "1Gi"}}},
            "dropins": [{"configMap": {"name": "delivery", "key": "notifier.yaml"}}],
            // No updater runs in the matcher (it would reach for the Internet).
            "updaters": {"mode": "CronJob", "schedule": "0 */6 * * *"},
        }),
    )
    .await?;
    let available = || {
        wait_clair_within(
            START,
            &client,
            &ns,
            "clair",
            "clair Available with its managed database",
            phase_is(Phase::Available),
        )
    };
    dump_on_error(env, &ns, available().await)?;
    pods_serve_as_nobody(&client, &ns, 3).await?;

    // Something to lose: an index report in the indexer's database.
    let token = quay_token(&client, &ns).await?;
    let report = index(&client, &ns, &token, &server.layer("vulnerable")?).await?;
    let manifest = report["manifest_hash"]
        .as_str()
        .context("no manifest hash")?
        .to_string();

    // The engine's pod runs as the image's postgres user, on the claim.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let engine = pods.get("clair-database-0").await?;
    let uid = engine
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|c| c.run_as_user);
    ensure!(uid == Some(999), "the database runs as {uid:?}");
    let old_uid = engine.uid();
    pods.delete("clair-database-0", &DeleteParams::default())
        .await?;
    // Scheduled, with an address (the Clair may still show Available from before).
    crate::support::eventually(START, "a new database pod with an IP", || {
        let pods = pods.clone();
        let old_uid = old_uid.clone();
        async move {
            let pod = pods.get_opt("clair-database-0").await?;
            Ok(pod.is_some_and(|p| {
                p.uid() != old_uid && p.status.as_ref().is_some_and(|s| s.pod_ip.is_some())
            }))
        }
    })
    .await?;
    dump_on_error(env, &ns, available().await)?;

    // The data survived: the manifest is in the indexer's database on the new pod.
    let engine = pods.get("clair-database-0").await?;
    let ip = engine
        .status
        .and_then(|s| s.pod_ip)
        .context("the new database pod has no IP")?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    let passwords = secret_text(&secrets.get("clair-database").await?, "postgres-password")?;
    let count = psql(
        env,
        &ip,
        &passwords,
        "indexer",
        &format!("SELECT count(*) FROM manifest WHERE hash = '{manifest}'"),
    )?;
    ensure!(
        count == "1",
        "the indexed manifest is gone after the restart: {count:?}"
    );

    // Nobody restarts anything: the operator rolls the services onto the new engine (their
    // pooled connections would hang on the old pod's address until TCP gives up), and the
    // kept report and a vulnerability report are served again within a minute of the new
    // database pod being ready (the matcher's answer is 202 "not yet initialized" until an
    // updater runs, which it tells from its database).
    let ready_at = std::time::Instant::now();
    let indexer = service_url(&client, &ns, "clair-indexer").await?;
    let matcher = service_url(&client, &ns, "clair-matcher").await?;
    let answer = std::sync::Mutex::new((0, String::new()));
    let matcher_answer = std::sync::Mutex::new((0, String::new()));
    let recovered = crate::support::eventually(
        std::time::Duration::from_secs(60),
        "the index and vulnerability reports served again",
        || {
            let report = format!("{indexer}/indexer/api/v1/index_report/{manifest}");
            let vulnerabilities =
                format!("{matcher}/matcher/api/v1/vulnerability_report/{manifest}");
            let (token, answer, matcher_answer) = (token.clone(), &answer, &matcher_answer);
            async move {
                // Briefly: a request that reaches a pod still holding dead connections hangs.
                let within = std::time::Duration::from_secs(5);
                let Ok((status, text)) =
                    request_within(within, "GET", report, Some(token.clone()), None).await
                else {
                    return Ok(false);
                };
                let served = status == 200;
                *answer.lock().expect("lock") = (status, text);
                if !served {
                    return Ok(false);
                }
                let matched =
                    request_within(within, "GET", vulnerabilities, Some(token), None).await;
                // 202 until an updater has run (none has here): the matcher answered after
                // asking its database whether it has vulnerability data.
                let ok = matched
                    .as_ref()
                    .is_ok_and(|(status, _)| *status == 200 || *status == 202);
                *matcher_answer.lock().expect("lock") = match matched {
                    Ok(answered) => answered,
                    Err(e) => (0, format!("the matcher: {e}")),
                };
                Ok(ok)
            }
        },
    )
    .await
    .with_context(|| {
        format!(
            "the index report's last answer: {:?}; the vulnerability report's: {:?}",
            answer.lock().map(|a| a.0),
            matcher_answer.lock().map(|a| a.clone())
        )
    });
    dump_on_error(env, &ns, recovered)?;
    println!(
        "the services served again {:.1} s after the new database pod was ready",
        ready_at.elapsed().as_secs_f64()
    );
    let (status, text) = answer.into_inner().expect("lock");
    ensure!(
        status == 200,
        "the index report is gone after the database restarted: {status} {text}"
    );
    let kept: serde_json::Value = serde_json::from_str(&text)?;
    ensure!(
        kept["state"] == "IndexFinished",
        "the kept report is not finished: {kept}"
    );
    Ok(())
}

/// One SQL statement as the engine's superuser, from the host to the pod's address.
fn psql(
    env: &TestEnv,
    host: &str,
    password: &str,
    database: &str,
    sql: &str,
) -> anyhow::Result<String> {
    let output = std::process::Command::new(env.postgres.bin_dir().join("psql"))
        .args([
            "-h", host, "-p", "5432", "-U", "postgres", "-d", database, "-tA", "-c", sql,
        ])
        .env("PGPASSWORD", password)
        .stdin(std::process::Stdio::null())
        .output()?;
    ensure!(
        output.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?.trim().to_string())
}
