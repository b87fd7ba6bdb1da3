//! Bounds on the work a config may cause. A tenant who may write a ConfigMap decides what
//! the operator parses and merges; without bounds a small drop-in (a JSON Patch of a few
//! dozen `copy` operations, each doubling an array; YAML aliases of aliases) makes it
//! allocate until it dies, and then again at every restart, since each restart reconciles
//! the same object. Every document and every step of a merge is checked while working, not
//! after, and a config past a limit is refused with a message that names the limit.

use serde_json::Value;

use super::{Document, Error};

/// The most a document may hold, as text, parsed, or merged: what one Kubernetes object can
/// hold anyway (etcd's default request limit is 1.5 MiB for the whole object).
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// The most operations one JSON Patch drop-in may have. Clair's own configs need a handful.
pub const MAX_PATCH_OPERATIONS: usize = 100;

/// The text of `document` is within [`MAX_DOCUMENT_BYTES`].
pub fn text(document: &Document) -> Result<(), Error> {
    if document.text.len() > MAX_DOCUMENT_BYTES {
        return Err(Error::TooLarge {
            name: document.name.clone(),
            message: format!(
                "the document is {} bytes; at most {MAX_DOCUMENT_BYTES} (1 MiB) are read",
                document.text.len()
            ),
        });
    }
    Ok(())
}

/// A JSON Patch of `count` operations is within [`MAX_PATCH_OPERATIONS`].
pub fn operations(name: &str, count: usize) -> Result<(), Error> {
    if count > MAX_PATCH_OPERATIONS {
        return Err(Error::TooLarge {
            name: name.to_string(),
            message: format!(
                "the JSON Patch has {count} operations; at most {MAX_PATCH_OPERATIONS} are applied"
            ),
        });
    }
    Ok(())
}

/// `value` (the config after `name` was parsed or applied) would serialize within
/// [`MAX_DOCUMENT_BYTES`].
pub fn value(name: &str, value: &Value) -> Result<(), Error> {
    match serialized_within(value, MAX_DOCUMENT_BYTES) {
        Some(_) => Ok(()),
        None => Err(too_large(name)),
    }
}

/// The config after `name` would pass [`MAX_DOCUMENT_BYTES`].
fn too_large(name: &str) -> Error {
    Error::TooLarge {
        name: name.to_string(),
        message: format!(
            "the merged config would exceed {MAX_DOCUMENT_BYTES} bytes (1 MiB), the most a \
             config may hold; the drop-in is not applied"
        ),
    }
}

/// The bytes `value` serializes to as compact JSON, if within `budget`; `None` as soon as
/// the count passes it (so a huge value costs no more than `budget` to measure).
pub fn serialized_within(value: &Value, budget: usize) -> Option<usize> {
    fn spend(left: &mut usize, n: usize) -> Option<()> {
        *left = left.checked_sub(n)?;
        Some(())
    }
    fn walk(value: &Value, left: &mut usize) -> Option<()> {
        match value {
            Value::Null => spend(left, 4),
            Value::Bool(b) => spend(left, if *b { 4 } else { 5 }),
            Value::Number(n) => spend(left, n.to_string().len()),
            Value::String(s) => spend(left, string_size(s)),
            Value::Array(items) => {
                spend(left, 2 + items.len().saturating_sub(1))?;
                items.iter().try_for_each(|item| walk(item, left))
            }
            Value::Object(map) => {
                spend(left, 2 + map.len().saturating_sub(1))?;
                map.iter().try_for_each(|(key, item)| {
                    spend(left, key.len() + 3)?;
                    walk(item, left)
                })
            }
        }
    }
    let mut left = budget;
    walk(value, &mut left)?;
    Some(budget - left)
}

/// The bytes `text` takes as a JSON string: quotes, and escapes as serde_json writes them.
fn string_size(text: &str) -> usize {
    2 + text
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\t' | b'\r' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// Keeps a JSON Patch to [`MAX_DOCUMENT_BYTES`] without measuring the whole document after
/// each operation (100 operations over a 1 MiB config would walk 100 MiB): it starts from
/// the document's size and adds what each operation may add (an upper bound: `remove`,
/// `move` and `test` add nothing, `replace` counts its whole new value).
pub struct PatchBudget {
    size: usize,
}

impl PatchBudget {
    /// The budget of a patch applied to `config` (the merge so far, from `name`).
    pub fn new(name: &str, config: &Value) -> Result<Self, Error> {
        match serialized_within(config, MAX_DOCUMENT_BYTES) {
            Some(size) => Ok(PatchBudget { size }),
            None => value(name, config).map(|()| PatchBudget { size: 0 }),
        }
    }

    /// Spends what `operation` may add to `config` (before it is applied); refused past the
    /// limit, before the operation allocates anything.
    pub fn spend(
        &mut self,
        name: &str,
        config: &Value,
        operation: &json_patch::PatchOperation,
    ) -> Result<(), Error> {
        use json_patch::PatchOperation as Op;
        let added = match operation {
            Op::Add(add) => Some(&add.value),
            Op::Replace(replace) => Some(&replace.value),
            Op::Copy(copy) => config.pointer(copy.from.as_str()),
            Op::Remove(_) | Op::Move(_) | Op::Test(_) => None,
        };
        let Some(added) = added else {
            return Ok(());
        };
        // A key and separators come with the value.
        let room = MAX_DOCUMENT_BYTES.saturating_sub(self.size);
        match serialized_within(added, room) {
            Some(bytes) if bytes + 16 <= room => {
                self.size += bytes + 16;
                Ok(())
            }
            _ => Err(too_large(name)),
        }
    }
}

/// What the YAML parser may spend on one document: far more than a config needs, far less
/// than a few hundred MiB of alias expansion.
pub fn yaml_budget() -> serde_saphyr::Budget {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_reader_input_bytes = Some(MAX_DOCUMENT_BYTES);
    budget.max_aliases = 1_000;
    budget.max_anchors = 1_000;
    budget.max_nodes = 100_000;
    budget.max_events = 200_000;
    budget.max_recorded_anchor_bytes = MAX_DOCUMENT_BYTES;
    budget.max_total_scalar_bytes = 4 * MAX_DOCUMENT_BYTES;
    budget
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ServiceKind;
    use crate::clairconfig::{check, merge};
    use serde_json::json;

    fn doc(key: &str, text: String) -> Document {
        Document {
            name: format!("ConfigMap bomb key {key}"),
            key: key.into(),
            text,
            secret: false,
        }
    }

    #[test]
    fn the_measure_is_exact_for_plain_values_and_stops_early() {
        let value = json!({"a": [1, "x\"y\u{1}\n", null, true], "b": {"c": 2.5}});
        assert_eq!(
            serialized_within(&value, 1000),
            Some(value.to_string().len())
        );
        assert_eq!(serialized_within(&value, 5), None);
    }

    #[test]
    fn a_patch_of_doubling_copies_stops_at_the_limit() {
        // Each copy appends the array to itself: 40 of them would be 2^40 elements.
        let mut operations =
            vec![json!({"op": "add", "path": "/a", "value": ["0123456789abcdef"]})];
        for _ in 0..40 {
            operations.push(json!({"op": "copy", "from": "/a", "path": "/a/-"}));
        }
        let root = doc("config.yaml", "log_level: info\n".into());
        let bomb = doc(
            "bomb.yaml-patch",
            serde_json::to_string(&operations).unwrap(),
        );
        let error = merge(&root, &[bomb]).expect_err("refused");
        assert_eq!(error.reason(), "ConfigTooLarge");
        assert!(error.to_string().contains("1 MiB"), "{error}");
        assert!(
            error
                .to_string()
                .contains("ConfigMap bomb key bomb.yaml-patch"),
            "{error}"
        );
    }

    #[test]
    fn too_many_operations_or_too_much_text_is_refused_before_any_work() {
        let operations: Vec<Value> = (0..=MAX_PATCH_OPERATIONS)
            .map(|i| json!({"op": "add", "path": format!("/k{i}"), "value": i}))
            .collect();
        let root = doc("config.yaml", "{}".into());
        let many = doc(
            "many.yaml-patch",
            serde_json::to_string(&operations).unwrap(),
        );
        let error = merge(&root, &[many]).expect_err("refused");
        assert!(error.to_string().contains("101 operations"), "{error}");
        let huge = doc(
            "config.yaml",
            format!("log_level: \"{}\"\n", "x".repeat(MAX_DOCUMENT_BYTES)),
        );
        let checked = check(&huge, &[], ServiceKind::Indexer);
        assert!(checked.config.is_none());
        assert!(
            checked.errors()[0].contains("at most 1048576"),
            "{:?}",
            checked.errors()
        );
    }

    #[test]
    fn yaml_alias_expansion_is_bounded() {
        // Each level refers to the one before ten times: 10^9 strings if expanded.
        let mut text = String::from("a0: &a0 [\"lol\"]\n");
        for level in 1..10 {
            let refs = vec![format!("*a{}", level - 1); 10].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{refs}]\n"));
        }
        let root = doc("config.yaml", text);
        assert!(merge(&root, &[]).is_err());
    }
}
