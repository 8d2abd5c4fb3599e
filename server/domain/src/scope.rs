//! The scope of an idempotency key: the same key string under another tenant or operation is
//! unrelated.

use crate::key::IdempotencyKey;
use crate::tenant::TenantId;
use serde::{Deserialize, Serialize};

/// The keyed operations Idem knows; each has its own window, lease and expiry policy.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Operation {
    /// `POST /payments`.
    CreatePayment,
}

impl Operation {
    /// Its name in records, metrics and the console.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    pub tenant_id: TenantId,
    pub operation: Operation,
    pub key: IdempotencyKey,
}

impl Scope {
    /// How the audit log names this scope's record.
    pub fn audit_target(&self) -> String {
        audit_target(
            self.tenant_id.as_str(),
            self.operation.as_str(),
            self.key.as_str(),
        )
    }
}

/// How the audit log names a record: `tenant/operation/key`.
pub fn audit_target(tenant_id: &str, operation: &str, key: &str) -> String {
    format!("{tenant_id}/{operation}/{key}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    #[test]
    fn every_operation_round_trips_through_its_stored_name() {
        for operation in Operation::VARIANTS {
            assert_eq!(operation.as_str().parse::<Operation>(), Ok(*operation));
        }
        assert_eq!(Operation::CreatePayment.as_str(), "create_payment");
        assert!("CreatePayment".parse::<Operation>().is_err());
    }
}
