//! The text that points at other text stays true: every `docs/...` path cited in the code,
//! the generated bundle, the monitoring rules, the chart and the docs themselves exists
//! (a phase placeholder in a path stands for every phase), every relative link of the
//! Markdown pages resolves, and the README's layout table names every top-level source file
//! and folder and nothing that is gone. Anchors are not checked.

use std::path::{Path, PathBuf};

use strum::VariantArray;

use crate::api::Phase;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The files under `dir` (recursively) whose names end in one of `extensions`.
fn files(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, extensions, out);
        } else if extensions
            .iter()
            .any(|e| path.extension().is_some_and(|x| x == *e))
        {
            out.push(path);
        }
    }
}

/// Every `docs/...` path in `text` that starts a word (not the tail of a URL or of another
/// path), without a trailing anchor or punctuation.
fn cited(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("docs/") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || "_./<>-".contains(c)))
            .unwrap_or(tail.len());
        rest = &tail[end.max(1)..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || "/._-".contains(c)) {
            continue;
        }
        let mut path = tail[..end].trim_end_matches(['.', '-']);
        // An autolink's closing bracket (`<docs/x.md>`), not a placeholder's.
        if path.ends_with('>') && !path.contains('<') {
            path = &path[..path.len() - 1];
        }
        if path.len() > "docs/".len() {
            found.push(path.to_string());
        }
    }
    found
}

/// How the docs write "any phase" in a path.
const PHASE_PLACEHOLDERS: [&str; 3] = ["<phase>", "<Phase>", "PHASE"];

/// The files a cited path names: a phase placeholder expands to every phase.
fn expanded(path: &str) -> Vec<String> {
    match PHASE_PLACEHOLDERS.iter().find(|p| path.contains(**p)) {
        Some(placeholder) => Phase::VARIANTS
            .iter()
            .map(|p| path.replace(placeholder, p.as_str()))
            .collect(),
        None => vec![path.to_string()],
    }
}

#[test]
fn every_cited_docs_path_exists() {
    let mut sources = Vec::new();
    files(&root().join("src"), &["rs"], &mut sources);
    files(
        &root().join("deploy"),
        &["yaml", "json", "md"],
        &mut sources,
    );
    files(&root().join("docs"), &["md"], &mut sources);
    files(&root().join("examples"), &["yaml"], &mut sources);
    sources.push(root().join("README.md"));
    let this = root().join("src/citations.rs");
    let mut missing = Vec::new();
    let mut checked = 0;
    for file in sources.iter().filter(|f| **f != this) {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for path in cited(&text) {
            for path in expanded(&path) {
                checked += 1;
                if !root().join(&path).exists() {
                    let file = file.strip_prefix(root()).unwrap_or(file);
                    missing.push(format!("{} cites {path}", file.display()));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} citations found: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "cited paths that do not exist:\n{}",
        missing.join("\n")
    );
}

/// The targets of a Markdown file's relative links (`[text](target)`), without anchors: not
/// URLs, not anchors of the same page.
fn relative_links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|target| target.split('#').next().unwrap_or_default().trim())
        .filter(|t| !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let mut pages = Vec::new();
    files(&root().join("docs"), &["md"], &mut pages);
    files(&root().join("deploy"), &["md"], &mut pages);
    pages.push(root().join("README.md"));
    let mut missing = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("a Markdown page is UTF-8");
        let dir = page.parent().unwrap_or(root());
        for target in relative_links(&text) {
            checked += 1;
            if !dir.join(&target).exists() {
                let page = page.strip_prefix(root()).unwrap_or(page);
                missing.push(format!("{} links {target}", page.display()));
            }
        }
    }
    assert!(
        checked > 10,
        "only {checked} links found: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "links that resolve to nothing:\n{}",
        missing.join("\n")
    );
}

#[test]
fn links_are_read_without_their_anchors() {
    assert_eq!(
        relative_links("[a](Degraded.md#why) [b](https://x.io/y) [c](#here) [d](../x.png)"),
        ["Degraded.md", "../x.png"]
    );
}

#[test]
fn citations_are_read_as_words_not_url_tails() {
    assert_eq!(
        cited("see docs/metrics.md#health, docs/runbooks/<phase>.md."),
        ["docs/metrics.md", "docs/runbooks/<phase>.md"]
    );
    assert!(cited("https://kubernetes.io/docs/concepts/ and ../docs/x.md").is_empty());
    assert_eq!(
        expanded("docs/runbooks/<phase>.md").len(),
        Phase::VARIANTS.len()
    );
}

#[test]
fn the_readme_layout_names_every_top_level_source_file() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let layout = readme
        .split_once("## Layout")
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
        .expect("the README has a Layout section");
    let mut unnamed = Vec::new();
    for entry in std::fs::read_dir(root().join("src"))
        .expect("src/")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().to_string();
        let cited = if entry.path().is_dir() {
            format!("`src/{name}/`")
        } else {
            format!("`src/{name}`")
        };
        if !layout.contains(&cited) {
            unnamed.push(cited);
        }
    }
    unnamed.sort();
    assert!(
        unnamed.is_empty(),
        "the README's layout table does not name {}",
        unnamed.join(", ")
    );
    // And every path the table names is there.
    let gone: Vec<&str> = layout
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|p| {
            ["src/", "tools/", "tests/", "deploy/", "docs/"]
                .iter()
                .any(|d| p.starts_with(d))
        })
        .filter(|p| !root().join(p).exists())
        .collect();
    assert!(
        gone.is_empty(),
        "the README's layout names what is gone: {gone:?}"
    );
}
