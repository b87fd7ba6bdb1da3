//! `clair-bench heap PROFILE`: where the operator's memory was at its peak, from a dhat heap
//! profile (`dhat-heap.json`, written by an operator built with `--features dhat-heap` when
//! it stops). dhat's own viewer shows the same; this prints it as a table for the docs.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

/// Frames that say how memory was allocated, not what for.
const PLUMBING: &[&str] = &[
    "dhat::",
    "<dhat::",
    "alloc::",
    "<alloc::",
    "core::",
    "<core::",
    "std::",
    "<std::",
    "hashbrown::",
    "<hashbrown::",
    "serde::",
    "<serde::",
    "serde_json::",
    "<serde_json::",
    "<&mut serde_json::",
    "bytes::",
    "<bytes::",
    "__rust",
    "[root]",
];

/// The sites holding the most bytes at the heap's peak, `top` of them, grouped by their
/// first frames that are not allocation plumbing.
pub fn summary(profile: &Path, top: usize) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(profile)
        .with_context(|| format!("reading the heap profile {}", profile.display()))?;
    let json: Value = serde_json::from_str(&text).context("not a dhat profile")?;
    let frames: Vec<&str> = json["ftbl"]
        .as_array()
        .context("no frame table (ftbl)")?
        .iter()
        .map(|f| f.as_str().unwrap_or(""))
        .collect();
    let mut sites: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut peak = 0u64;
    for pp in json["pps"].as_array().context("no program points (pps)")? {
        let at_peak = pp["gb"].as_u64().unwrap_or(0);
        let blocks = pp["gbk"].as_u64().unwrap_or(0);
        peak += at_peak;
        let site = site(pp["fs"].as_array().into_iter().flatten(), &frames);
        let entry = sites.entry(site).or_default();
        entry.0 += at_peak;
        entry.1 += blocks;
    }
    let mut ranked: Vec<_> = sites.into_iter().collect();
    ranked.sort_by_key(|(_, (bytes, _))| std::cmp::Reverse(*bytes));
    println!(
        "heap at its peak: {:.1} MiB in {} sites",
        peak as f64 / 1048576.0,
        ranked.len()
    );
    println!("\n| MiB at the peak | share | blocks | allocated by (innermost first) |");
    println!("|---|---|---|---|");
    for (site, (bytes, blocks)) in ranked.into_iter().take(top) {
        println!(
            "| {:.2} | {:.0}% | {blocks} | {site} |",
            bytes as f64 / 1048576.0,
            100.0 * bytes as f64 / peak.max(1) as f64
        );
    }
    Ok(())
}

/// The first three frames of a stack that are not plumbing, function names only.
fn site<'a>(stack: impl Iterator<Item = &'a Value>, frames: &[&str]) -> String {
    let names: Vec<String> = stack
        .filter_map(|i| frames.get(usize::try_from(i.as_u64()?).ok()?))
        .map(|frame| function(frame))
        .filter(|name| !PLUMBING.iter().any(|p| name.starts_with(p)))
        .take(3)
        .collect();
    if names.is_empty() {
        "(plumbing only)".to_string()
    } else {
        names.join(" ← ")
    }
}

/// `0x55d0: kube_runtime::x::f (src/x.rs:1:2)` as `kube_runtime::x::f`, generic
/// arguments dropped so one function is one site.
fn function(frame: &str) -> String {
    let name = frame.split_once(": ").map_or(frame, |(_, rest)| rest);
    let name = name.rsplit_once(" (").map_or(name, |(name, _)| name);
    let mut out = String::new();
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '<' if !out.is_empty() => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    // A legacy-mangled name ends with its hash (`::h0123456789abcdef`).
    if let Some((name, hash)) = out.rsplit_once("::h")
        && hash.len() == 16
        && hash.chars().all(|c| c.is_ascii_hexdigit())
    {
        out = name.to_string();
    }
    out.replace("::{{closure}}", "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_site_is_its_first_frames_past_the_allocator() {
        let frames = [
            "[root]",
            "0x1: alloc::alloc::alloc (src/alloc.rs:1:1)",
            "0x2: hashbrown::raw::RawTable<T>::reserve (src/raw.rs:2:2)",
            "0x3: kube_runtime::reflector::store::Writer<K>::apply_watcher_event (src/store.rs:3:3)",
            "0x4: clair_operator::controller::decoded::watch::{{closure}}::h0123456789abcdef (src/decoded.rs:4:4)",
        ];
        let stack = [json!(1), json!(2), json!(3), json!(4)];
        assert_eq!(
            site(stack.iter(), &frames),
            "kube_runtime::reflector::store::Writer::apply_watcher_event ← clair_operator::controller::decoded::watch"
        );
    }
}
