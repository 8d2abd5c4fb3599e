//! The scope of an idempotency key: the same key string under another tenant or operation is
//! unrelated.

use crate::key::IdempotencyKey;
use crate::tenant::TenantId;
use serde::{Deserialize, Serialize};
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

/// The keyed operations Idem knows; each has its own window, lease and expiry policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[derive(Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, Display, VariantArray)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Operation {
    /// `POST /payments`.
    CreatePayment,
    /// `POST /payments/{paymentId}/refunds`.
    CreateRefund,
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
