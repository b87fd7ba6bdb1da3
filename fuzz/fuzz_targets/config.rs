//! Any bytes as a Clair config (YAML or JSON), with a drop-in of each kind: parsing, merging
//! and validating in every mode must never panic.
#![no_main]

use clair_operator::api::ServiceKind;
use clair_operator::clairconfig::{self, Document};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first half is the root, the second a drop-in; the first byte picks the formats.
    let middle = data.len() / 2;
    let root_text = String::from_utf8_lossy(&data[..middle]);
    let dropin_text = String::from_utf8_lossy(&data[middle..]);
    let json = data.first().is_some_and(|b| b % 2 == 1);
    let (root_key, merge_key, patch_key) = if json {
        ("config.json", "10.json", "20.json-patch")
    } else {
        ("config.yaml", "10.yaml", "20.yaml-patch")
    };
    let root = Document { name: "root".into(), key: root_key.into(), text: root_text.to_string(), secret: false };
    let dropins = [
        Document { name: "merge".into(), key: merge_key.into(), text: dropin_text.to_string(), secret: false },
        Document { name: "patch".into(), key: patch_key.into(), text: dropin_text.to_string(), secret: false },
    ];
    for mode in [ServiceKind::Indexer, ServiceKind::Matcher, ServiceKind::Notifier] {
        let _ = clairconfig::check(&root, &[], mode);
        let _ = clairconfig::check(&root, &dropins[..1], mode);
        let _ = clairconfig::check(&root, &dropins[1..], mode);
    }
    if let Ok(value) = clairconfig::parse(&root, clairconfig::Format::Yaml) {
        let _ = clairconfig::hash(&value);
    }
});
