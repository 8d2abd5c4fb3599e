//! What a conflicting retry changed: its canonical command against the record's, field by
//! field (`amount 10.00 -> 100.00`). Both are canonical JSON (docs/fingerprint.md), so equal
//! fields are equal text.

use app::records::model::FieldChange;
use serde_json::Value;
use std::collections::BTreeMap;

/// The fields that differ, by their dotted path inside the command (the `command.` prefix
/// dropped: operators think in request fields).
pub fn changes(original: &str, retry: &str) -> Vec<FieldChange> {
    let (Ok(original), Ok(retry)) = (
        serde_json::from_str::<Value>(original),
        serde_json::from_str::<Value>(retry),
    ) else {
        return Vec::new();
    };
    let (mut before, mut after) = (BTreeMap::new(), BTreeMap::new());
    flatten("", &original, &mut before);
    flatten("", &retry, &mut after);
    let fields: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    fields
        .into_iter()
        .filter_map(|field| {
            let (was, now) = (before.get(field), after.get(field));
            (was != now).then(|| FieldChange {
                field: field.strip_prefix("command.").unwrap_or(field).to_owned(),
                before: was.cloned().unwrap_or_else(|| "(absent)".to_owned()),
                after: now.cloned().unwrap_or_else(|| "(absent)".to_owned()),
            })
        })
        .collect()
}

fn flatten(prefix: &str, value: &Value, into: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(members) => {
            for (name, member) in members {
                let path = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                flatten(&path, member, into);
            }
        }
        Value::String(text) => {
            into.insert(prefix.to_owned(), text.clone());
        }
        other => {
            into.insert(prefix.to_owned(), other.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_amount_is_named_with_both_values() {
        let original = r#"{"apiVersion":"","command":{"accountId":"acc_1","amount":"10.00","currency":"EUR"},"fingerprintVersion":1}"#;
        let retry = r#"{"apiVersion":"","command":{"accountId":"acc_1","amount":"100.00","currency":"EUR","channel":"pos"},"fingerprintVersion":1}"#;
        assert_eq!(
            changes(original, retry),
            vec![
                FieldChange {
                    field: "amount".into(),
                    before: "10.00".into(),
                    after: "100.00".into()
                },
                FieldChange {
                    field: "channel".into(),
                    before: "(absent)".into(),
                    after: "pos".into()
                },
            ]
        );
        assert!(changes(original, original).is_empty());
        assert!(
            changes("", retry).is_empty(),
            "a purged command has nothing to compare"
        );
    }
}
