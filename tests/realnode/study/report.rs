//! The study's Markdown tables and targets (`study.md`) and its raw figures (`study.json`).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use serde_json::json;

use super::KedaRun;
use super::bare::Comparison;
use super::figures::{self, Service, StepFigures, failed, figure, percentile, seconds};

/// Writes `study.md` and `study.json` in `out` with what is measured so far.
pub fn write(
    out: &Path,
    steps: &[StepFigures],
    bare: &[Comparison],
    keda: Option<&KedaRun>,
    notes: &[String],
) -> anyhow::Result<()> {
    std::fs::write(out.join("study.md"), markdown(steps, bare, keda, notes))?;
    let keda_json = keda.map(|k| {
        json!({
            "saturating_clients": k.saturating_clients,
            "down_clients": k.down_clients,
            "replicas": k.replicas,
            "settled_at": k.settled_at,
            "stepped_down_at": k.stepped_down_at,
            "scaled_in_at": k.scaled_in_at,
            "baseline_p99": k.baseline_p99,
            "samples": k.samples.iter().map(|s| json!([s.sent.as_secs_f64(), s.latency.as_secs_f64(), s.status])).collect::<Vec<_>>(),
        })
    });
    std::fs::write(
        out.join("study.json"),
        serde_json::to_vec_pretty(
            &json!({"steps": steps, "bare": bare, "keda": keda_json, "notes": notes}),
        )?,
    )?;
    Ok(())
}

/// The plots again from `out/study.json` (a run's raw figures).
pub fn replot(out: &Path) -> anyhow::Result<()> {
    let path = out.join("study.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: no study to plot again", path.display()))?;
    let study: serde_json::Value = serde_json::from_str(&text)?;
    let steps: Vec<StepFigures> = serde_json::from_value(study["steps"].clone())?;
    let bare: Vec<Comparison> = serde_json::from_value(study["bare"].clone())?;
    let keda = (!study["keda"].is_null())
        .then(|| keda_of(&study["keda"]))
        .transpose()?;
    super::plot::all(out, &steps, &bare, keda.as_ref())
}

fn keda_of(keda: &serde_json::Value) -> anyhow::Result<KedaRun> {
    let number = |key: &str| keda[key].as_f64();
    let samples = keda["samples"]
        .as_array()
        .context("the KEDA run's samples")?
        .iter()
        .map(|s| clair_testenv::load::Sample {
            class: clair_testenv::load::Class::New,
            sent: std::time::Duration::from_secs_f64(s[0].as_f64().unwrap_or(0.0)),
            latency: std::time::Duration::from_secs_f64(s[1].as_f64().unwrap_or(0.0)),
            status: s[2].as_u64().unwrap_or(0) as u16,
        })
        .collect();
    Ok(KedaRun {
        saturating_clients: number("saturating_clients").unwrap_or(0.0) as usize,
        down_clients: number("down_clients").unwrap_or(1.0) as usize,
        samples,
        replicas: serde_json::from_value(keda["replicas"].clone())?,
        settled_at: number("settled_at"),
        stepped_down_at: number("stepped_down_at").unwrap_or(0.0),
        scaled_in_at: number("scaled_in_at"),
        baseline_p99: number("baseline_p99"),
    })
}

fn markdown(
    steps: &[StepFigures],
    bare: &[Comparison],
    keda: Option<&KedaRun>,
    notes: &[String],
) -> String {
    let mut md = String::new();
    for service in [Service::Indexer, Service::Matcher, Service::Notifier] {
        let rows: Vec<&StepFigures> = steps.iter().filter(|s| s.service == service).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(md, "\n### The {}\n", service.name());
        md.push_str(
            "| pods | class | clients | answered | seconds | answered/s | p50 | p99 | 429s | failed | CPU (cores) | RSS peak (MiB) | working set (MiB) | heap peak (MiB) | in flight max / mean | 429/s (server) | server p99 | pool acquired max / size | pool waits | machine (cores of 2) | PostgreSQL (cores) |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for s in rows {
            let server = &s.server;
            let class = s
                .label
                .clone()
                .unwrap_or_else(|| format!("{:?}", s.class).to_lowercase());
            let _ = writeln!(
                md,
                "| {} | {class} | {} | {} | {:.0} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} / {} | {} | {} | {} |",
                s.replicas,
                s.clients,
                s.answered,
                s.seconds,
                s.throughput,
                seconds(s.p50),
                seconds(s.p99),
                s.refused,
                s.failed,
                figure(server.cpu_cores, 2),
                figure(server.rss_peak_mib, 0),
                figure(server.working_set_mib, 0),
                figure(server.heap_peak_mib, 0),
                figure(server.in_flight_max, 0),
                figure(server.in_flight_mean, 1),
                figure(server.limited_per_second, 2),
                seconds(server.server_p99),
                figure(server.pool_acquired_max, 0),
                figure(server.pool_max, 0),
                figure(server.pool_waits, 0),
                figure(server.machine_cores, 2),
                figure(server.postgres_cores, 2),
            );
        }
    }
    if !bare.is_empty() {
        md.push_str(
            "\n### The operator's indexer against the same Clair as a bare host process\n\n\
             | clients | pod: indexed/s | pod: per CPU-s | pod p99 | host: indexed/s | host: per CPU-s | host p99 | per-CPU-s ratio (pod / host) |\n\
             |---|---|---|---|---|---|---|---|\n",
        );
        for row in bare {
            let _ = writeln!(
                md,
                "| {} | {:.2} | {} | {} | {:.2} | {} | {} | {} |",
                row.clients,
                row.pod.throughput(),
                figure(row.pod.per_cpu_second(), 2),
                seconds(row.pod.p99),
                row.host.throughput(),
                figure(row.host.per_cpu_second(), 2),
                seconds(row.host.p99),
                figure(row.ratio(), 2),
            );
        }
        let pod_cpu: f64 = bare.iter().filter_map(|r| r.pod.cpu_seconds).sum();
        let host_cpu: f64 = bare.iter().filter_map(|r| r.host.cpu_seconds).sum();
        let pod: usize = bare.iter().map(|r| r.pod.answered).sum();
        let host: usize = bare.iter().map(|r| r.host.answered).sum();
        if pod_cpu > 0.0 && host_cpu > 0.0 && host > 0 {
            let ratio = (pod as f64 / pod_cpu) / (host as f64 / host_cpu);
            let _ = writeln!(
                md,
                "\nOver all steps: the pod indexed {pod} manifests in {pod_cpu:.0} CPU-s, the bare process {host} in {host_cpu:.0} CPU-s: **{ratio:.2}x** per core (target: at least 0.9x) — {}.",
                if ratio >= 0.9 { "met" } else { "missed" }
            );
        }
    }
    if let Some(keda) = keda {
        md.push_str(&keda_section(keda));
    }
    if !notes.is_empty() {
        md.push_str("\n### Notes of the run\n\n");
        for note in notes {
            let _ = writeln!(md, "- {note}");
        }
    }
    md
}

fn keda_section(keda: &KedaRun) -> String {
    let mut md = String::new();
    let up: Vec<_> = keda
        .samples
        .iter()
        .filter(|s| s.sent.as_secs_f64() < keda.stepped_down_at)
        .collect();
    let down: Vec<_> = keda
        .samples
        .iter()
        .filter(|s| s.sent.as_secs_f64() >= keda.stepped_down_at)
        .collect();
    let most = keda.replicas.iter().map(|r| r.2).max().unwrap_or(0);
    let _ = writeln!(
        md,
        "\n### KEDA on the indexer: a step to twice one pod's saturation ({} clients), then a step down\n",
        keda.saturating_clients
    );
    let _ = writeln!(
        md,
        "- Scale-out: {} ready pods at most; settled (at its most for 30 s) at {}.",
        most,
        keda.settled_at
            .map_or("never".to_string(), |t| format!("{t:.0} s"))
    );
    let up_failed = up.iter().filter(|s| failed(s.status)).count();
    let _ = writeln!(
        md,
        "- During the step up: {} requests, {} refused with 429, {} failed (no answer or 5xx; target 0) — {}.",
        up.len(),
        up.iter().filter(|s| s.status == 429).count(),
        up_failed,
        if up_failed == 0 { "met" } else { "missed" }
    );
    if let Some(settled) = keda.settled_at {
        let after: Vec<_> = up
            .iter()
            .filter(|s| s.sent.as_secs_f64() >= settled)
            .collect();
        let refused = after.iter().filter(|s| s.status == 429).count();
        let mut latencies: Vec<f64> = after
            .iter()
            .filter(|s| figures::answered(s.status))
            .map(|s| s.latency.as_secs_f64())
            .collect();
        latencies.sort_by(f64::total_cmp);
        let p99 = percentile(&latencies, 0.99);
        let bound = keda.baseline_p99.map(|b| b * 1.5);
        let met = refused == 0 && matches!((p99, bound), (Some(p), Some(b)) if p <= b);
        let _ = writeln!(
            md,
            "- Once settled: {} requests, {refused} refused with 429 (target 0), p99 of new manifests {} against the single-pod unsaturated p99 × 1.5 = {} — {}.",
            after.len(),
            seconds(p99),
            seconds(bound),
            if met { "met" } else { "missed" }
        );
    }
    let down_failed = down.iter().filter(|s| failed(s.status)).count();
    let _ = writeln!(
        md,
        "- Scale-in under load: the first pod left at {}; during the step down {} requests, {} failed (target 0) — {}.",
        keda.scaled_in_at.map_or(
            "never (no scale-in happened: not measured)".to_string(),
            |t| format!("{t:.0} s")
        ),
        down.len(),
        down_failed,
        if keda.scaled_in_at.is_some() && down_failed == 0 {
            "met"
        } else {
            "missed"
        }
    );
    md
}
