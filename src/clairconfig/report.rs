//! `clair-operator check-config`'s report: each file checked in each mode, its errors and
//! warnings, for people or as JSON.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::api::ServiceKind;

/// How the report is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A verdict line per file and mode, then its errors and warnings.
    Human,
    /// One JSON array of `{file, mode, valid, errors, warnings}`.
    Json,
}

/// The report's text, and whether every file was valid in every mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub text: String,
    pub valid: bool,
}

/// Checks each file (with its drop-ins in `FILE.d/`) in each of `modes`.
pub fn check_files(files: &[PathBuf], modes: &[ServiceKind], format: Format) -> Report {
    let mut valid = true;
    let mut text = String::new();
    let mut entries = Vec::new();
    for file in files {
        let name = file.display().to_string();
        let (root, dropins) = match super::files::read(file) {
            Ok(documents) => documents,
            Err(e) => {
                valid = false;
                match format {
                    Format::Human => {
                        let _ = writeln!(text, "{name}: cannot read: {e}");
                    }
                    Format::Json => entries.push(serde_json::json!({
                        "file": name,
                        "valid": false,
                        "errors": [{"path": "", "message": format!("cannot read: {e}")}],
                    })),
                }
                continue;
            }
        };
        for mode in modes {
            let checked = super::check(&root, &dropins, *mode);
            let (warnings, errors): (Vec<_>, Vec<_>) =
                checked.problems.iter().partition(|p| p.warning);
            valid &= errors.is_empty();
            match format {
                Format::Human => {
                    let verdict = if errors.is_empty() {
                        "valid"
                    } else {
                        "INVALID"
                    };
                    let _ = writeln!(text, "{name} ({} mode): {verdict}", mode.as_str());
                    for e in &errors {
                        let _ = writeln!(text, "  error: {e}");
                    }
                    for w in &warnings {
                        let _ = writeln!(text, "  warning: {w}");
                    }
                }
                Format::Json => {
                    let list = |ps: &[&super::Problem]| {
                        ps.iter()
                            .map(|p| serde_json::json!({"path": p.path, "message": p.message}))
                            .collect::<Vec<_>>()
                    };
                    entries.push(serde_json::json!({
                        "file": name,
                        "mode": mode.as_str(),
                        "valid": errors.is_empty(),
                        "errors": list(&errors),
                        "warnings": list(&warnings),
                    }));
                }
            }
        }
    }
    if format == Format::Json {
        let _ = writeln!(text, "{}", serde_json::Value::Array(entries));
    }
    Report { text, valid }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(name: &str) -> PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/clairconfig-corpus")
            .join(name)
    }

    #[test]
    fn a_valid_file_and_an_invalid_one_in_both_formats() {
        let files = [
            corpus("valid-full.yaml"),
            corpus("invalid-unknown-top-key.yaml"),
        ];
        let modes = [ServiceKind::Indexer];
        let human = check_files(&files, &modes, Format::Human);
        assert!(!human.valid);
        assert!(
            human
                .text
                .contains("valid-full.yaml (indexer mode): valid\n"),
            "{}",
            human.text
        );
        assert!(
            human
                .text
                .contains("invalid-unknown-top-key.yaml (indexer mode): INVALID\n  error: "),
            "{}",
            human.text
        );
        let json = check_files(&files, &modes, Format::Json);
        let entries: serde_json::Value = serde_json::from_str(&json.text).expect("JSON");
        assert_eq!(entries[0]["valid"], true);
        assert_eq!(entries[1]["valid"], false);
        assert!(entries[1]["errors"][0]["message"].is_string());
        let valid = check_files(&files[..1], &modes, Format::Human);
        assert!(valid.valid);
    }

    #[test]
    fn an_unreadable_file_is_invalid_and_named() {
        let missing = [corpus("no-such-file.yaml")];
        let report = check_files(&missing, &[ServiceKind::Matcher], Format::Human);
        assert!(!report.valid);
        assert!(
            report.text.contains("no-such-file.yaml: cannot read: "),
            "{}",
            report.text
        );
    }
}
