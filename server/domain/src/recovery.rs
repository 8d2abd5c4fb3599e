//! What an operator can do about a record that needs one, and what it rests on: the
//! provider's evidence, the reconcile actions it allows, and overrides two admins vouch for
//! when the provider cannot answer.

use crate::scope::Operation;
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

    /// What an operator may apply to a record of `operation` that needs one, given what the
    /// provider says, the one to propose first; nothing when the provider did not answer.
    /// A refund is never marked failed without the provider's answer, so releasing its key is
    /// offered for payments only.
    pub fn offered(operation: Operation, evidence: EvidenceKind) -> &'static [ReconcileAction] {
        match (evidence, operation) {
            (EvidenceKind::Succeeded | EvidenceKind::Declined, _) => &[ReconcileAction::ApplyProviderResult],
            (EvidenceKind::NoCharge, Operation::CreatePayment) => &[
                ReconcileAction::RetryCharge,
                ReconcileAction::MarkFailedAndReleaseKey,
            ],
            (EvidenceKind::NoCharge, Operation::CreateRefund) => &[ReconcileAction::RetryCharge],
            (EvidenceKind::Unreachable, _) => &[],
        }
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

/// Why a record's outcome is unknown: what the provider call that left it so proves, in the
/// operator's words. Each says that money may have moved; none says whether it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum UnknownCause {
    /// No answer came within the client's timeout.
    TimedOut,
    /// The provider answered with a server error (5xx).
    ErrorAnswer,
    /// An answer came that could not be read.
    UnreadableAnswer,
    /// The connection broke after the request was sent.
    ConnectionLost,
    /// The request never left (no connection): nothing was charged, but only a look-up says so.
    NotSent,
    /// The provider refused the request (4xx).
    Rejected,
}

impl UnknownCause {
    /// Its stored name (and the queue filter's value).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Why the outcome is unknown, as a sentence's end: "the provider …".
    pub fn words(self) -> &'static str {
        match self {
            UnknownCause::TimedOut => "timed out: no answer came in time",
            UnknownCause::ErrorAnswer => "answered with a server error",
            UnknownCause::UnreadableAnswer => "sent an answer that could not be read",
            UnknownCause::ConnectionLost => "lost the connection after the request was sent",
            UnknownCause::NotSent => "could not be reached (nothing was sent)",
            UnknownCause::Rejected => "refused the request",
        }
    }
}

/// A provider failure as the record keeps it: the cause when it was the call that sends
/// (which is what made the outcome unknown), and the failure in words with the call's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderFailure {
    /// `None` for a look-up: it leaves the record's cause as the send left it.
    pub cause: Option<UnknownCause>,
    pub words: String,
}

/// What the provider said, as kept for the console (the evidence's kind; its detail is the
/// charge id or the problem).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum EvidenceKind {
    Succeeded,
    Declined,
    NoCharge,
    Unreachable,
}

impl EvidenceKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl ProviderEvidence {
    pub fn kind(&self) -> EvidenceKind {
        match self {
            ProviderEvidence::Charged { status, .. } if status == "succeeded" => EvidenceKind::Succeeded,
            ProviderEvidence::Charged { .. } => EvidenceKind::Declined,
            ProviderEvidence::NoCharge => EvidenceKind::NoCharge,
            ProviderEvidence::Unreachable { .. } => EvidenceKind::Unreachable,
        }
    }

    /// The charge's id, the problem, or nothing.
    pub fn detail(&self) -> &str {
        match self {
            ProviderEvidence::Charged { charge_id, .. } => charge_id,
            ProviderEvidence::NoCharge => "",
            ProviderEvidence::Unreachable { problem } => problem,
        }
    }

    /// The evidence again from its kind and detail as kept.
    pub fn from_kept(kind: EvidenceKind, detail: String) -> ProviderEvidence {
        match kind {
            EvidenceKind::Succeeded => ProviderEvidence::Charged {
                charge_id: detail,
                status: "succeeded".to_owned(),
            },
            EvidenceKind::Declined => ProviderEvidence::Charged {
                charge_id: detail,
                status: "declined".to_owned(),
            },
            EvidenceKind::NoCharge => ProviderEvidence::NoCharge,
            EvidenceKind::Unreachable => ProviderEvidence::Unreachable { problem: detail },
        }
    }
}

/// Where a bulk reconciliation is. It is frozen at `Previewing` (the records and their
/// versions), previewed item by item in the background, then applied to the groups the
/// operator kept; it can be paused (and resumed) while running, and aborted until finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum BulkJobState {
    Previewing,
    Previewed,
    Running,
    Paused,
    Aborted,
    Finished,
}

impl BulkJobState {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether nothing more will happen to it.
    pub fn is_over(self) -> bool {
        matches!(self, BulkJobState::Aborted | BulkJobState::Finished)
    }
}

/// What an operator does to a job: the state it moves to, from the states it may move from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum BulkControl {
    Pause,
    Resume,
    Abort,
}

impl BulkControl {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// `(from, to)`: the control applies only to a job in one of `from`.
    pub fn transition(self) -> (&'static [BulkJobState], BulkJobState) {
        match self {
            BulkControl::Pause => (&[BulkJobState::Running], BulkJobState::Paused),
            BulkControl::Resume => (&[BulkJobState::Paused], BulkJobState::Running),
            BulkControl::Abort => (
                &[
                    BulkJobState::Previewing,
                    BulkJobState::Previewed,
                    BulkJobState::Running,
                    BulkJobState::Paused,
                ],
                BulkJobState::Aborted,
            ),
        }
    }
}
