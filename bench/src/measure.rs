//! Reading figures: the apiserver's audit log (every request of the operator's user, the
//! writes of everyone else), the operator's own metrics, and its process in `/proc`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use k8s_openapi::jiff::Timestamp;

/// Requests counted by verb.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Requests {
    pub by_verb: BTreeMap<String, u64>,
    /// `VERB RESOURCE[/SUBRESOURCE]`: where the requests went.
    pub by_target: BTreeMap<String, u64>,
    /// Writes to a status subresource (`patch`/`update` of `*/status`).
    pub status_writes: u64,
    /// Events created or patched.
    pub event_writes: u64,
    /// Leader-election Lease renewals (every 2 s while leading, idle or not).
    pub lease_writes: u64,
}

impl Requests {
    pub fn total(&self) -> u64 {
        self.by_verb.values().sum()
    }

    /// create, patch, update, delete, deletecollection (access reviews, asked with
    /// `create`, are counted as `review`).
    pub fn writes(&self) -> u64 {
        self.by_verb
            .iter()
            .filter(|(verb, _)| !["get", "list", "watch", "review"].contains(&verb.as_str()))
            .map(|(_, n)| n)
            .sum()
    }

    /// Writes of objects: neither a status, an Event nor the leader's Lease.
    pub fn object_writes(&self) -> u64 {
        self.writes() - self.status_writes - self.event_writes - self.lease_writes
    }

    /// Writes other than the leader's Lease renewals.
    pub fn work_writes(&self) -> u64 {
        self.writes() - self.lease_writes
    }

    /// Requests other than the leader's Lease reads and renewals (the idle minute's target:
    /// none).
    pub fn besides_lease(&self) -> u64 {
        let lease: u64 = self
            .by_target
            .iter()
            .filter(|(target, _)| target.ends_with(" leases"))
            .map(|(_, count)| count)
            .sum();
        self.total() - lease
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "by_verb": self.by_verb,
            "by_target": self.by_target,
            "writes": self.writes(),
            "object_writes": self.object_writes(),
            "status_writes": self.status_writes,
            "event_writes": self.event_writes,
            "lease_writes": self.lease_writes,
        })
    }
}

/// The requests `user` made from `from` until `to` (received times), from the audit log
/// `log` and the files the apiserver rotated it into (`audit-TIME.log`, every 100 MB).
pub fn audited(log: &Path, user: &str, from: Timestamp, to: Timestamp) -> anyhow::Result<Requests> {
    let dir = log.parent().context("the audit log's folder")?;
    let stem = log
        .file_stem()
        .and_then(|s| s.to_str())
        .context("the audit log's name")?;
    let mut requests = Requests::default();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with(stem) && name.ends_with(".log") {
            count(&path, user, from, to, &mut requests)?;
        }
    }
    Ok(requests)
}

fn count(
    log: &Path,
    user: &str,
    from: Timestamp,
    to: Timestamp,
    requests: &mut Requests,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(log).with_context(|| log.display().to_string())?;
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if entry["user"]["username"] != user {
            continue;
        }
        let Ok(at) = entry["requestReceivedTimestamp"]
            .as_str()
            .unwrap_or_default()
            .parse::<Timestamp>()
        else {
            continue;
        };
        if at < from || at >= to {
            continue;
        }
        let resource = entry["objectRef"]["resource"].as_str().unwrap_or("(none)");
        // Access and token reviews are questions put with `create`: reads, not writes.
        let verb = match entry["verb"].as_str().unwrap_or_default() {
            "create" if resource.ends_with("accessreviews") || resource == "tokenreviews" => {
                "review"
            }
            verb => verb,
        }
        .to_string();
        let write = !["get", "list", "watch", "review"].contains(&verb.as_str());
        if write
            && entry["objectRef"]["subresource"] == "status"
            && entry["objectRef"]["resource"] != "leases"
        {
            requests.status_writes += 1;
        }
        if write && entry["objectRef"]["resource"] == "events" {
            requests.event_writes += 1;
        }
        if write && entry["objectRef"]["resource"] == "leases" {
            requests.lease_writes += 1;
        }
        let target = match entry["objectRef"]["subresource"].as_str() {
            Some(sub) => format!("{verb} {resource}/{sub}"),
            None => format!("{verb} {resource}"),
        };
        *requests.by_target.entry(target).or_default() += 1;
        *requests.by_verb.entry(verb).or_default() += 1;
    }
    Ok(())
}

/// The operator's metrics as Prometheus text.
pub fn scrape(address: &str) -> anyhow::Result<String> {
    let mut response = ureq::get(&format!("http://{address}/metrics")).call()?;
    Ok(response.body_mut().read_to_string()?)
}

/// Whether the operator answers `/readyz` with 200.
pub fn ready(address: &str) -> bool {
    ureq::get(&format!("http://{address}/readyz"))
        .call()
        .is_ok_and(|r| r.status() == 200)
}

/// The sum of `series` over its label sets (those containing `having`).
pub fn sum(metrics: &str, series: &str, having: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{series}{{")) && l.contains(having))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Quantile `q` of the histogram `name` summed over its other labels, interpolated within
/// its bucket as Prometheus' `histogram_quantile` does. `None` when it has no sample.
pub fn quantile(metrics: &str, name: &str, q: f64) -> Option<f64> {
    let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(&format!("{name}_bucket{{")) else {
            continue;
        };
        let le = rest.split("le=\"").nth(1)?.split('"').next()?;
        let bound = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().ok()?
        };
        let count: f64 = line.rsplit(' ').next()?.parse().ok()?;
        // Keyed by the bound's bits: positive floats order as their bits do.
        buckets.entry(bound.to_bits()).or_insert((bound, 0.0)).1 += count;
    }
    let total = buckets.values().last()?.1;
    if total == 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (bound, count) in buckets.values() {
        if *count >= rank {
            if bound.is_infinite() {
                return Some(lower);
            }
            let within = (rank - below) / (count - below).max(f64::MIN_POSITIVE);
            return Some(lower + (bound - lower) * within);
        }
        (lower, below) = (*bound, *count);
    }
    None
}

/// A process's memory and CPU, from `/proc`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessFigures {
    /// Resident now and at its peak (`VmRSS`, `VmHWM`), in bytes.
    pub rss: u64,
    pub peak_rss: u64,
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
}

pub fn process(pid: u32) -> anyhow::Result<ProcessFigures> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |field: &str| -> anyhow::Result<u64> {
        let value = status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .with_context(|| format!("no {field} in /proc/{pid}/status"))?;
        Ok(value.trim().trim_end_matches("kB").trim().parse::<u64>()? * 1024)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // After the command name (in parentheses, which may hold spaces): fields 3 onwards;
    // utime and stime are fields 14 and 15.
    let after = stat.rsplit_once(')').context("/proc/PID/stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i)
            .context("/proc/PID/stat field")?
            .parse::<f64>()?)
    };
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(ProcessFigures {
        rss: kib("VmRSS:")?,
        peak_rss: kib("VmHWM:")?,
        cpu_seconds: (ticks(11)? + ticks(12)?) / per_second,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_buckets_summed_over_labels() {
        let metrics = "\
x_bucket{kind=\"A\",le=\"0.1\"} 5
x_bucket{kind=\"A\",le=\"0.2\"} 10
x_bucket{kind=\"A\",le=\"+Inf\"} 10
x_bucket{kind=\"B\",le=\"0.1\"} 5
x_bucket{kind=\"B\",le=\"0.2\"} 10
x_bucket{kind=\"B\",le=\"+Inf\"} 10
";
        // 20 samples: 10 up to 0.1, 10 in (0.1, 0.2].
        let median = quantile(metrics, "x", 0.5).unwrap();
        assert!((median - 0.1).abs() < 1e-9, "{median}");
        let p75 = quantile(metrics, "x", 0.75).unwrap();
        assert!((p75 - 0.15).abs() < 1e-9, "{p75}");
        assert_eq!(quantile("", "x", 0.5), None);
    }
}
