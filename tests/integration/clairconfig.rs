//! The Rust config validator against Clair's own: a corpus of configs (valid ones, and each
//! rule broken on purpose) is loaded and validated in every mode by a Go program built from
//! Clair v4.9.0's `cmd` and `config` packages (`tools/clairconfig-check`), and the operator's
//! validator must give the same accept/reject verdict on every file in every mode.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};
use clair_operator::api::ServiceKind;
use clair_operator::clairconfig;

use crate::support::TestEnv;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clairconfig-corpus")
}

/// The corpus's root configs: `.yaml` and `.json` files (drop-ins sit in `NAME.d/`).
fn corpus() -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "json")
                )
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Clair's verdicts, from the reference checker: (file name, mode) → error, if any.
fn clair_verdicts(files: &[PathBuf]) -> anyhow::Result<BTreeMap<(String, String), Option<String>>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/clairconfig-check/build.sh");
    let built = Command::new("bash").arg(&script).output()?;
    if !built.status.success() {
        bail!(
            "cannot build Clair's config checker with {}: {}\nIt needs Go 1.24 or newer and the Go module proxy.",
            script.display(),
            String::from_utf8_lossy(&built.stderr)
        );
    }
    let binary = String::from_utf8(built.stdout)?
        .lines()
        .last()
        .context("build.sh printed no path")?
        .to_string();
    let output = Command::new(binary)
        .current_dir(corpus_dir())
        .args(files.iter().filter_map(|f| f.file_name()))
        .output()?;
    ensure!(
        output.status.success(),
        "the checker failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut verdicts = BTreeMap::new();
    for line in String::from_utf8(output.stdout)?.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        let key = (
            v["file"].as_str().unwrap_or_default().to_string(),
            v["mode"].as_str().unwrap_or_default().to_string(),
        );
        let error = (!v["ok"].as_bool().unwrap_or(false))
            .then(|| v["error"].as_str().unwrap_or_default().to_string());
        verdicts.insert(key, error);
    }
    Ok(verdicts)
}

/// The operator's verdict: merge the drop-ins as Clair does, then validate.
fn operator_verdict(path: &Path, mode: ServiceKind) -> anyhow::Result<Option<String>> {
    let (root, dropins) = clairconfig::files::read(path)?;
    let errors = clairconfig::check(&root, &dropins, mode).errors();
    Ok((!errors.is_empty()).then(|| errors.join("; ")))
}

pub async fn the_validator_agrees_with_clair_on_the_corpus(_env: &TestEnv) -> anyhow::Result<()> {
    let files = corpus()?;
    ensure!(
        files.len() >= 40,
        "the corpus has only {} configs",
        files.len()
    );
    let clair = clair_verdicts(&files)?;
    let mut disagreements = Vec::new();
    let (mut accepted, mut rejected) = (0, 0);
    for file in &files {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        for (mode_name, mode) in [
            ("indexer", ServiceKind::Indexer),
            ("matcher", ServiceKind::Matcher),
            ("notifier", ServiceKind::Notifier),
        ] {
            let theirs = clair
                .get(&(name.clone(), mode_name.to_string()))
                .with_context(|| format!("no verdict for {name} in {mode_name} mode"))?;
            let ours = operator_verdict(file, mode)?;
            match (theirs, &ours) {
                (None, None) => accepted += 1,
                (Some(_), Some(_)) => rejected += 1,
                _ => disagreements.push(format!(
                    "{name} ({mode_name}): Clair {theirs:?}, operator {ours:?}"
                )),
            }
        }
    }
    eprintln!(
        "config corpus: {} files, {accepted} accepted and {rejected} rejected by both",
        files.len()
    );
    ensure!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    ensure!(
        accepted > 0 && rejected > 0,
        "a corpus must exercise both verdicts"
    );
    Ok(())
}

pub async fn check_config_reports_fields_and_exits_by_verdict(
    _env: &TestEnv,
) -> anyhow::Result<()> {
    let binary = env!("CARGO_BIN_EXE_clair-operator");
    let run = |args: &[&str]| {
        Command::new(binary)
            .current_dir(corpus_dir())
            .arg("check-config")
            .args(args)
            .output()
    };
    let good = run(&["valid-full.yaml", "valid-dropins.yaml"])?;
    ensure!(
        good.status.success(),
        "valid configs exit {:?}",
        good.status.code()
    );
    let text = String::from_utf8(good.stdout)?;
    ensure!(
        text.contains("valid-full.yaml (matcher mode): valid"),
        "{text}"
    );
    ensure!(
        text.contains("warning: ") && text.contains("30-ignored.json: ignored"),
        "{text}"
    );

    let bad = run(&[
        "--mode",
        "matcher",
        "--output",
        "json",
        "valid-full.yaml",
        "invalid-matcher-addr-ip-port.yaml",
    ])?;
    ensure!(
        bad.status.code() == Some(1),
        "an invalid config exits {:?}",
        bad.status.code()
    );
    let report: serde_json::Value = serde_json::from_slice(&bad.stdout)?;
    let entries = report.as_array().context("a JSON list")?;
    ensure!(entries.len() == 2, "{report}");
    ensure!(
        entries[0]["valid"] == true && entries[1]["valid"] == false,
        "{report}"
    );
    ensure!(
        entries[1]["errors"][0]["path"] == "matcher.indexer_addr",
        "{report}"
    );
    ensure!(entries[1]["mode"] == "matcher", "{report}");

    // Only the mode asked for is checked: a config without indexer_addr is a good indexer config.
    let indexer_only = run(&["--mode", "indexer", "invalid-matcher-no-indexer-addr.yaml"])?;
    ensure!(
        indexer_only.status.success(),
        "indexer mode exit {:?}",
        indexer_only.status.code()
    );
    Ok(())
}
