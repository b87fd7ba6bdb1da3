//! Any bytes as a config template: finding `secret://` and `configmap://` references and
//! rendering them must never panic, and a rendered YAML template must still parse.
#![no_main]

use std::collections::BTreeMap;

use clair_operator::templating::template;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for key in ["config.yaml.in", "config.json.in"] {
        let Ok((parsed, format)) = template::parse(key, &text) else { continue };
        let Ok(references) = template::references(&parsed) else { continue };
        // Values chosen to stress quoting: YAML indicators, quotes, newlines.
        let values: BTreeMap<_, _> = references
            .into_iter()
            .enumerate()
            .map(|(i, r)| (r, format!("v{i}: \"'#\n- [x]")))
            .collect();
        if let Ok(rendered) = template::render(&parsed, format, &values) {
            let reparsed = template::parse(key, &rendered);
            assert!(reparsed.is_ok(), "rendered output does not parse: {rendered:?}");
        }
    }
});
