//! `clair-bench [N...]` (run by `scripts/bench`): the operator at N Clairs on the local
//! control plane (kwok nodes), against the limit of the apiserver and kwok on this machine
//! measured in the same run. For each N, on a fresh control plane each:
//!
//! - the baseline: every object the operator would create for the N Clairs (from its own
//!   builders, by `clair-operator render`'s pipeline) and the Clairs themselves, written by a
//!   plain client with the same parallelism as the user's creates, until kwok reports every
//!   Deployment ready;
//! - the operator (its release binary, webhook on, as `scripts/dev` runs it): N Clairs
//!   created, until all are Available; its requests by verb (the audit log); a 60 s idle
//!   window; its reconcile latency (its histogram), memory and CPU (`/proc`); then the
//!   shared drop-in edited, until every Deployment has rolled to the new config and every
//!   Clair is Available again.
//!
//! Prints Markdown tables and the targets met or missed, and writes JSON to
//! `bench/results/`. Timings are one run on a shared machine: compare the ratios.
//!
//! `clair-bench heap PROFILE`: the allocation sites holding the most memory in a dhat heap
//! profile of the operator (`scripts/bench --heap N` makes one).

mod cluster;
mod heap;
mod measure;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clair_testenv::OPERATOR;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use clair_operator::controller::service::observe::running_hash;
use clair_operator::controller::service::workload::DeploymentState;
use cluster::{Cluster, NAMESPACE};
use measure::{ProcessFigures, Requests};

const IDLE: Duration = Duration::from_secs(60);
const MIB: f64 = 1024.0 * 1024.0;

/// The baseline at N.
struct Baseline {
    objects: usize,
    took: Duration,
}

/// The operator at N.
struct Operator {
    converged: Duration,
    requests: Requests,
    idle: Requests,
    transitions: f64,
    p50: Option<f64>,
    p99: Option<f64>,
    before: ProcessFigures,
    /// After the idle minute: what the caches hold once all is Available.
    at_rest: ProcessFigures,
    after: ProcessFigures,
    rolled: Duration,
    roll: Requests,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [command, profile] = args.as_slice()
        && command == "heap"
    {
        return heap::summary(Path::new(profile), 15);
    }
    let operator = PathBuf::from(
        args.iter()
            .find_map(|a| a.strip_prefix("--operator="))
            .context(
                "usage: clair-bench --operator=PATH [--memory-only [--with-roll]] [--no-json] [N...] | clair-bench heap PROFILE",
            )?,
    );
    let sizes: Vec<usize> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(|a| {
            a.parse()
                .with_context(|| format!("{a}: not a number of Clairs"))
        })
        .collect::<anyhow::Result<_>>()?;
    let sizes = if sizes.is_empty() {
        vec![10, 100, 1000]
    } else {
        sizes
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let mut results = Vec::new();
    let started = Timestamp::now();
    let memory_only = args.iter().any(|a| a == "--memory-only");
    // The config roll too (its peak is the full run's), still without the baseline.
    let stop = if args.iter().any(|a| a == "--with-roll") {
        Stop::AfterRoll
    } else {
        Stop::AtRest
    };
    for &n in &sizes {
        if memory_only {
            // The operator's memory alone: no baseline, no JSON (a quick check of a memory
            // change at large N; the full run is the result).
            let measured = operator_run(&runtime, n, &operator, stop)?;
            let idle_work = measured.idle.besides_lease();
            println!(
                "N = {n}: all Available in {:.1} s; RSS before {:.1} MiB, at rest {:.1} MiB, peak {:.1} MiB; \
                 {:.1} requests a Clair until Available ({:.1} status writes); idle 60 s: {idle_work} requests besides the Lease",
                measured.converged.as_secs_f64(),
                measured.before.rss as f64 / MIB,
                measured.at_rest.rss as f64 / MIB,
                measured.at_rest.peak_rss as f64 / MIB,
                per(measured.requests.total(), n),
                per(measured.requests.status_writes, n),
            );
            if stop == Stop::AfterRoll {
                println!(
                    "N = {n}: the config roll in {:.1} s; RSS after it {:.1} MiB, peak {:.1} MiB; \
                     {:.1} requests a Clair ({:.1} writes)",
                    measured.rolled.as_secs_f64(),
                    measured.after.rss as f64 / MIB,
                    measured.after.peak_rss as f64 / MIB,
                    per(measured.roll.total(), n),
                    per(measured.roll.work_writes(), n),
                );
            }
            eprintln!("  by target: {:?}", measured.requests.by_target);
            eprintln!("  idle: {:?}", measured.idle.by_target);
            continue;
        }
        eprintln!("N = {n}: the baseline");
        let baseline = baseline(&runtime, n)?;
        eprintln!(
            "N = {n}: baseline {} objects ready in {:.1} s; now the operator",
            baseline.objects,
            baseline.took.as_secs_f64()
        );
        let measured = operator_run(&runtime, n, &operator, Stop::AfterRoll)?;
        results.push((n, baseline, measured));
        // After each N: a larger one may not finish on a small machine.
        print_tables(&results);
        if !args.iter().any(|a| a == "--no-json") {
            let path = write_json(&results, started)?;
            eprintln!("results so far written to {}", path.display());
        }
    }
    Ok(())
}

/// kwok nodes for `n` Clairs: 2,000 pods each, three pods a Clair, room to roll.
fn nodes_for(n: usize) -> usize {
    (n * 3 * 2).div_ceil(2000).max(2)
}

/// Every object the operator would create for `n` Clairs, with the Clairs and their
/// Secret and ConfigMap, by the operator's own builders.
fn desired_objects(fixtures: &[Value], n: usize) -> anyhow::Result<Vec<Value>> {
    let mut documents = fixtures.to_vec();
    documents.extend((0..n).map(cluster::clair));
    let options = clair_operator::offline::Options {
        namespace: NAMESPACE.to_string(),
        ..Default::default()
    };
    let rendered = clair_operator::offline::render(documents, &options)?;
    let mut objects: Vec<Value> = (0..n).map(cluster::clair).collect();
    objects.extend(rendered.objects);
    Ok(objects)
}

fn baseline(runtime: &tokio::runtime::Runtime, n: usize) -> anyhow::Result<Baseline> {
    let cluster = Cluster::start(runtime, nodes_for(n))?;
    let objects = desired_objects(&cluster.fixtures, n)?;
    let deployments = objects.iter().filter(|o| o["kind"] == "Deployment").count();
    runtime.block_on(async {
        cluster.apply_fixtures().await?;
        let start = Instant::now();
        cluster::apply_all(&cluster.client, &objects).await?;
        let client = &cluster.client;
        cluster::wait_for(
            "Deployments ready (baseline)",
            deployments,
            Duration::from_secs(3600),
            || async {
                let all = cluster::deployments(client).await?;
                Ok(all.values().filter(|d| cluster::rolled_out(d)).count())
            },
        )
        .await?;
        Ok(Baseline {
            objects: objects.len(),
            took: start.elapsed(),
        })
    })
}

/// How far an operator run goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// After the idle minute.
    AtRest,
    /// After the config roll.
    AfterRoll,
}

fn operator_run(
    runtime: &tokio::runtime::Runtime,
    n: usize,
    binary: &Path,
    stop: Stop,
) -> anyhow::Result<Operator> {
    let cluster = Cluster::start(runtime, nodes_for(n))?;
    let mut process = cluster
        .plane
        .start_operator(
            binary,
            &clair_testenv::Launch {
                name: "operator".to_string(),
                loopback_webhook: true,
                // Answering the apiserver alone, as docs/security.md has a platform run it
                // (and the webhook then knows the operator's own writes).
                args: vec![
                    format!(
                        "--webhook-client-ca={}",
                        cluster.plane.webhook_client_ca().display()
                    ),
                    format!(
                        "--webhook-client-names={}",
                        clair_testenv::WEBHOOK_CLIENT_NAME
                    ),
                ],
                ..Default::default()
            },
        )
        .with_context(|| format!("starting {}", binary.display()))?;
    let pid = process.id();
    let metrics_address = process.metrics_address().to_string();
    let metrics_address = metrics_address.as_str();
    let audit = cluster.plane.audit_log();
    let client = cluster.client.clone();
    let measured = runtime.block_on(async {
        cluster.apply_fixtures().await?;
        cluster::wait_for(
            "the operator ready",
            1,
            Duration::from_secs(120),
            || async { Ok(usize::from(measure::ready(metrics_address))) },
        )
        .await?;
        let before = measure::process(pid)?;

        // Convergence: from the first create until every Clair is Available.
        let from = Timestamp::now();
        let start = Instant::now();
        let clairs: Vec<Value> = (0..n).map(cluster::clair).collect();
        cluster::apply_all(&client, &clairs).await?;
        cluster::wait_for("Clairs Available", n, Duration::from_secs(3600), || {
            cluster::available(&client)
        })
        .await?;
        let converged = start.elapsed();
        let settled = Timestamp::now();
        let requests = measure::audited(&audit, OPERATOR, from, settled)?;

        // Idle: nothing changes for a minute.
        tokio::time::sleep(IDLE).await;
        let idle_end = Timestamp::now();
        let idle = measure::audited(&audit, OPERATOR, settled, idle_end)?;
        let at_rest = measure::process(pid)?;
        if stop == Stop::AtRest {
            return Ok(Operator {
                converged,
                requests,
                idle,
                transitions: 0.0,
                p50: None,
                p99: None,
                before,
                at_rest,
                after: at_rest,
                rolled: Duration::ZERO,
                roll: Requests::default(),
            });
        }
        let metrics = measure::scrape(metrics_address)?;
        let histogram = "clair_operator_reconcile_duration_seconds";
        let p50 = measure::quantile(&metrics, histogram, 0.5);
        let p99 = measure::quantile(&metrics, histogram, 0.99);
        let transitions = measure::sum(&metrics, "clair_operator_phase_transitions_total", "");

        // A config change that rolls all N: the shared drop-in edited.
        let old = cluster::deployments(&client).await?;
        let old_hashes: std::collections::BTreeMap<String, Option<String>> = old
            .iter()
            .map(|(name, d)| (name.clone(), running_hash(Some(&DeploymentState::of(d)))))
            .collect();
        let roll_from = Timestamp::now();
        let start = Instant::now();
        let changed = cluster::delivery("https://quay.example.com/secscan/notification-v2");
        cluster::apply(&client, &changed).await?;
        let total = old_hashes.len();
        cluster::wait_for(
            "Deployments rolled to the new config",
            total,
            Duration::from_secs(3600),
            || async {
                let now = cluster::deployments(&client).await?;
                Ok(now
                    .iter()
                    .filter(|(name, d)| {
                        let hash = running_hash(Some(&DeploymentState::of(d)));
                        hash.is_some()
                            && old_hashes.get(*name) != Some(&hash)
                            && cluster::rolled_out(d)
                    })
                    .count())
            },
        )
        .await?;
        cluster::wait_for(
            "Clairs Available again",
            n,
            Duration::from_secs(3600),
            || cluster::available(&client),
        )
        .await?;
        let rolled = start.elapsed();
        let roll = measure::audited(&audit, OPERATOR, roll_from, Timestamp::now())?;
        let after = measure::process(pid)?;
        Ok(Operator {
            converged,
            requests,
            idle,
            transitions,
            p50,
            p99,
            before,
            at_rest,
            after,
            rolled,
            roll,
        })
    });
    // Stopped while the control plane still answers, with time to write a heap profile.
    process.stop_within(Duration::from_secs(120));
    measured
}

fn per(count: u64, n: usize) -> f64 {
    count as f64 / n as f64
}

fn print_tables(results: &[(usize, Baseline, Operator)]) {
    println!(
        "\n| Clairs | baseline: objects written directly, Deployments ready | operator: all Available | ratio | operator requests per Clair (object writes, status writes, Events, reads and watches) | idle 60 s: requests (writes besides Lease renewals) |"
    );
    println!("|---|---|---|---|---|---|");
    for (n, baseline, operator) in results {
        let r = &operator.requests;
        println!(
            "| {n} | {} objects, {:.1} s | {:.1} s | {:.2} | {:.1} ({:.1}, {:.1}, {:.1}, {:.1}) | {} ({}) |",
            baseline.objects,
            baseline.took.as_secs_f64(),
            operator.converged.as_secs_f64(),
            operator.converged.as_secs_f64() / baseline.took.as_secs_f64(),
            per(r.total(), *n),
            per(r.object_writes(), *n),
            per(r.status_writes, *n),
            per(r.event_writes, *n),
            per(r.total() - r.writes(), *n),
            operator.idle.total(),
            operator.idle.work_writes(),
        );
    }
    println!(
        "\n| Clairs | reconcile p50 / p99 | RSS before, at rest, peak | peak RSS per Clair | CPU | config roll: all rolled and Available | roll requests per Clair (writes) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (n, _, operator) in results {
        let ms = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{:.0} ms", s * 1000.0));
        println!(
            "| {n} | {} / {} | {:.1} MiB, {:.1} MiB, {:.1} MiB | {:.1} KiB | {:.1} s | {:.1} s | {:.1} ({:.1}) |",
            ms(operator.p50),
            ms(operator.p99),
            operator.before.rss as f64 / MIB,
            operator.at_rest.rss as f64 / MIB,
            operator.after.peak_rss as f64 / MIB,
            (operator.after.peak_rss.saturating_sub(operator.before.rss)) as f64
                / 1024.0
                / *n as f64,
            operator.after.cpu_seconds - operator.before.cpu_seconds,
            operator.rolled.as_secs_f64(),
            per(operator.roll.total(), *n),
            per(operator.roll.work_writes(), *n),
        );
    }
    println!("\n| Clairs | operator requests per Clair until all Available, by verb |");
    println!("|---|---|");
    for (n, _, operator) in results {
        let verbs: Vec<String> = operator
            .requests
            .by_verb
            .iter()
            .map(|(verb, count)| format!("{verb} {:.1}", per(*count, *n)))
            .collect();
        println!("| {n} | {} |", verbs.join(", "));
    }
    println!("\nTargets:");
    for (n, baseline, operator) in results {
        println!("- N = {n}: {}", targets(*n, baseline, operator).join("; "));
    }
}

/// Each target met or missed, with its figure: the scale benchmark's first (one apply per
/// owned object, one status write per transition) and issue 27's (requests, the idle
/// minute, convergence, memory at 1,000).
fn targets(n: usize, baseline: &Baseline, operator: &Operator) -> Vec<String> {
    let check = |ok: bool| if ok { "met" } else { "MISSED" };
    let ratio = operator.converged.as_secs_f64() / baseline.took.as_secs_f64();
    let requests = per(operator.requests.total(), n);
    let roll_beyond_writes = per(operator.roll.total() - operator.roll.work_writes(), n);
    let idle_besides_lease = operator.idle.besides_lease();
    let objects_per_clair = (baseline.objects - n) as f64 / n as f64;
    let object_writes = per(operator.requests.object_writes(), n);
    let status_writes = per(operator.requests.status_writes, n);
    let transitions = operator.transitions / n as f64;
    let mut lines = vec![
        format!(
            "convergence within 1.1x the baseline: {} ({ratio:.2}x)",
            check(ratio <= 1.1)
        ),
        format!(
            "at most 60 requests a Clair until all Available: {} ({requests:.1})",
            check(requests <= 60.0)
        ),
        format!(
            "the config roll at most 60 a Clair beyond its writes: {} ({roll_beyond_writes:.1})",
            check(roll_beyond_writes <= 60.0)
        ),
        format!(
            "the idle minute nothing but the Lease: {} ({idle_besides_lease} other requests)",
            check(idle_besides_lease == 0)
        ),
        format!(
            "one apply per owned object: {} ({object_writes:.1} object writes per Clair for {objects_per_clair:.1} objects)",
            check(object_writes <= objects_per_clair)
        ),
        format!(
            "one status write per transition: {} ({status_writes:.1} per Clair for {transitions:.1} transitions)",
            check(status_writes <= transitions)
        ),
    ];
    if n >= 1000 {
        let rest = operator.at_rest.rss as f64 / MIB;
        let peak = operator.after.peak_rss as f64 / MIB;
        lines.push(format!(
            "RSS under 64 MiB: at rest {} ({rest:.1} MiB), at peak {} ({peak:.1} MiB)",
            check(rest < 64.0),
            check(peak < 64.0)
        ));
    }
    lines
}

fn write_json(
    results: &[(usize, Baseline, Operator)],
    started: Timestamp,
) -> anyhow::Result<PathBuf> {
    let runs: Vec<Value> = results
        .iter()
        .map(|(n, baseline, operator)| {
            json!({
                "clairs": n,
                "baseline": {"objects": baseline.objects, "seconds": baseline.took.as_secs_f64()},
                "operator": {
                    "converged_seconds": operator.converged.as_secs_f64(),
                    "ratio_to_baseline": operator.converged.as_secs_f64() / baseline.took.as_secs_f64(),
                    "requests": operator.requests.to_json(),
                    "idle_60s": operator.idle.to_json(),
                    "phase_transitions": operator.transitions,
                    "reconcile_seconds": {"p50": operator.p50, "p99": operator.p99},
                    "rss_bytes": {"before": operator.before.rss, "at_rest": operator.at_rest.rss, "peak": operator.after.peak_rss},
                    "cpu_seconds": operator.after.cpu_seconds - operator.before.cpu_seconds,
                    "config_roll": {"seconds": operator.rolled.as_secs_f64(), "requests": operator.roll.to_json()},
                },
            })
        })
        .collect();
    let machine = json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "memory": std::fs::read_to_string("/proc/meminfo").ok()
            .and_then(|m| m.lines().next().map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
    });
    let document = json!({"at": started.to_string(), "machine": machine, "runs": runs});
    let dir = clair_testenv::repo_root().join("bench/results");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{}.json", started.strftime("%Y-%m-%dT%H%M%SZ")));
    std::fs::write(&path, serde_json::to_string_pretty(&document)? + "\n")?;
    Ok(path)
}
