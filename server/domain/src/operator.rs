//! The console's operators: their names, their roles, and the audit log of what they did.

use serde::{Deserialize, Serialize};
use std::fmt;
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

/// What an operator may do. Ordered: each role may do everything the ones before it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[derive(Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, Display, VariantArray)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum OperatorRole {
    /// Reads dashboards, records and the audit log.
    Viewer,
    /// Also reconciles records against the provider.
    Operator,
    /// Also overrides without provider evidence (with a second admin). Operators themselves are
    /// managed from the command line (`idem operator …`), never from the console.
    Admin,
}

impl OperatorRole {
    /// Its stored name, and the one operators type.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A console username: 1 to 64 characters of `a-z`, `0-9`, `.`, `_` or `-`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperatorUsername(String);

impl OperatorUsername {
    pub fn parse(text: &str) -> Result<OperatorUsername, String> {
        let valid = !text.is_empty()
            && text.len() <= 64
            && text
                .bytes()
                .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"._-".contains(&byte));
        if valid {
            Ok(OperatorUsername(text.to_owned()))
        } else {
            Err("1 to 64 characters of a-z, 0-9, '.', '_' or '-'".to_owned())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OperatorUsername {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One line of the audit log, as written: who did what to which target, why, and how it
/// ended. It is committed in the same transaction as the change it describes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub actor: String,
    pub action: String,
    pub target: Option<String>,
    pub reason: Option<String>,
    pub result: String,
    pub details: Option<String>,
}

impl AuditEntry {
    /// `actor` did `action`, and it went through ("ok"); the rest is added as it is known.
    pub fn new(actor: impl Into<String>, action: impl Into<String>) -> AuditEntry {
        AuditEntry {
            actor: actor.into(),
            action: action.into(),
            target: None,
            reason: None,
            result: "ok".to_owned(),
            details: None,
        }
    }

    pub fn on(self, target: impl Into<String>) -> AuditEntry {
        AuditEntry {
            target: Some(target.into()),
            ..self
        }
    }

    pub fn because(self, reason: impl Into<String>) -> AuditEntry {
        AuditEntry {
            reason: Some(reason.into()),
            ..self
        }
    }

    /// How it ended when not "ok": "refused", "failed".
    pub fn ended(self, result: impl Into<String>) -> AuditEntry {
        AuditEntry {
            result: result.into(),
            ..self
        }
    }

    pub fn details(self, details: impl Into<String>) -> AuditEntry {
        AuditEntry {
            details: Some(details.into()),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered() {
        assert!(
            OperatorRole::Viewer < OperatorRole::Operator && OperatorRole::Operator < OperatorRole::Admin
        );
    }

    #[test]
    fn usernames_are_plain_lower_case() {
        assert!(OperatorUsername::parse("ops.alice-2").is_ok());
        for bad in ["", "Alice", "a b", "ü", &"a".repeat(65)] {
            assert!(OperatorUsername::parse(bad).is_err(), "{bad:?}");
        }
    }
}
