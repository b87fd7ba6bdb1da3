//! The modules' layers: each imports only from layers below its own, so the pure core never
//! depends on the controllers, and the controllers and the webhook never on each other.
//! Checked by reading the sources: a `crate::MODULE` path to a module of the same or a
//! higher layer fails the test, naming the file and the line.

/// From the bottom up. A module may import modules of lower layers only.
const LAYERS: &[&[&str]] = &[
    // Types and the files the code generates; the allocator's settings; the API connection;
    // text made fit for a condition; TLS servers' configuration.
    &["api", "generated", "allocator", "apiclient", "text", "tls"],
    // Clair's config rules; connection strings, probes and budgets of databases.
    &["clairconfig", "database"],
    // The pure core: phase machines, builders of owned objects, CRD generation.
    &["machine", "render", "crdgen"],
    // Reading the ConfigMap and Secret keys resources reference; the images they may run;
    // the metrics and health checks everything above reports into; the reconciles' spans.
    &["sources", "images", "metrics", "leader", "telemetry"],
    // Resolving template references; what the platform lets tenants name.
    &["templating", "platform"],
    // The controllers and the admission webhooks.
    &["controller", "webhook"],
    // The OLM bundle, made from the installs and the webhooks' own registration; `render`,
    // the controllers' pipeline run offline on files; the operator's wiring (`launch`).
    &["olm", "offline", "launch"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// `(line number, module)` of every `crate::MODULE` path in `text`.
fn imports(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            // `clair_operator::` is another crate's name; only `crate::` paths count.
            let before = &rest[..at];
            rest = &rest[at + "crate::".len()..];
            if before.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let module: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push((number + 1, module));
        }
    }
    found
}

#[test]
fn every_module_is_in_a_layer() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).expect("src") {
        let path = entry.expect("entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if ["lib", "main", "layers", "packaging", "citations"].contains(&name) {
            continue;
        }
        assert!(
            layer_of(name).is_some(),
            "src/{name} is in no layer: add it to LAYERS in src/layers.rs"
        );
    }
}

#[test]
fn no_module_imports_its_own_layer_or_a_higher_one() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut violations = Vec::new();
    for layer in LAYERS {
        for module in *layer {
            let mut files = Vec::new();
            let single = src.join(format!("{module}.rs"));
            if single.exists() {
                files.push(single);
            }
            let mut folders = vec![src.join(module)];
            while let Some(folder) = folders.pop() {
                let Ok(entries) = std::fs::read_dir(&folder) else {
                    continue;
                };
                for entry in entries {
                    let path = entry.expect("entry").path();
                    if path.is_dir() {
                        folders.push(path);
                    } else if path.extension().is_some_and(|e| e == "rs") {
                        files.push(path);
                    }
                }
            }
            let own = layer_of(module).expect("listed");
            for file in files {
                let text = std::fs::read_to_string(&file).expect("source");
                for (line, imported) in imports(&text) {
                    if imported == *module {
                        continue;
                    }
                    match layer_of(&imported) {
                        Some(layer) if layer < own => {}
                        _ => violations.push(format!(
                            "{}:{line}: {module} imports crate::{imported}",
                            file.strip_prefix(&src).unwrap_or(&file).display()
                        )),
                    }
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports against the layers (src/layers.rs):\n{}",
        violations.join("\n")
    );
}

#[test]
fn a_path_into_a_higher_layer_is_found() {
    let found = imports("use crate::controller::Context;\nlet x = clair_operator::api::GROUP;");
    assert_eq!(found, vec![(1, "controller".to_string())]);
}
