//! What an operator can do about a record that needs one, and what it rests on: the
//! provider's evidence, the reconcile actions it allows, and overrides two admins vouch for
//! when the provider cannot answer.

use serde::{Deserialize, Serialize};
use std::fmt;
use strum::{EnumString, IntoStaticStr, VariantArray};

/// What the provider says about a record's payment, asked live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProviderEvidence {
    Charged { charge_id: String, status: String },
    NoCharge,
    Unreachable { problem: String },
}

/// What an operator may do with a record after a look at the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum ReconcileAction {
    /// Settle the record and payment as the provider's charge says.
    ApplyProviderResult,
    /// The provider has no charge: send it now, with the payment's own provider key.
    RetryCharge,
    /// The provider has no charge: decline the payment (hold and merchant reference
    /// released) and release the key, so that the client's retry executes anew.
    MarkFailedAndReleaseKey,
}

impl ReconcileAction {
    /// Its name in the audit log and in stored bulk jobs.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What two admins vouch for when they override a record without the provider's evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OverrideOutcome {
    /// The provider charged it: the charge their evidence names.
    Charged { charge_id: String },
    /// The provider declined it.
    Declined { charge_id: String },
    /// The provider never charged it: mark failed and release the key.
    NotCharged,
}

impl fmt::Display for OverrideOutcome {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverrideOutcome::Charged { charge_id } => write!(formatter, "charged ({charge_id})"),
            OverrideOutcome::Declined { charge_id } => write!(formatter, "declined ({charge_id})"),
            OverrideOutcome::NotCharged => formatter.write_str("not charged: mark failed, release the key"),
        }
    }
}

/// Where an override request is: waiting for a second admin, then decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum OverrideState {
    Pending,
    /// Approved by a second admin; being applied (or the process died applying it).
    Approved,
    Applied,
    /// Approved, but the record had changed (or the store failed): nothing applied.
    Failed,
    Rejected,
}

impl OverrideState {
    /// Its stored name.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
