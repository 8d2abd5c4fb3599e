//! What the holder of a record's lease does: ask the provider with no transaction open, then
//! complete (every write fenced by the lease version); and how a dead owner's record is taken
//! over (one conditional update, one winner) and resumed from its last durable step, asking
//! the provider before sending anything.

use super::PaymentsEngine;
use super::answer::Answer;
use crate::provider::Charge;
use chrono::{DateTime, Utc};
use domain::operator::AuditEntry;
use domain::outcome::Outcome;
use domain::record::RecordAt;
use domain::recovery::ProviderFailure;
use domain::representation::ApiVersion;
use domain::scope::{Operation, Scope};
use domain::tenant::TenantId;

/// How a payment's owner reaches the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Charging {
    /// The first owner: nothing was sent before.
    Send,
    /// A taker resuming at PROVIDER_REQUEST_SENT: ask by the payment's key first, and send
    /// (with the same key) only if the provider never accepted it.
    AskFirst,
    /// Two admins vouch for the charge (an override without the provider's evidence):
    /// nothing is sent or asked.
    Vouched(Charge),
}

/// Who settles the payment: the holder of a key's lease (every write fenced by it), or, for
/// a tenant without keys, the request alone.
#[derive(Debug, Clone, Copy)]
pub(super) enum Owner<'a> {
    Keyed {
        scope: &'a Scope,
        lease_version: i64,
        expires_at: DateTime<Utc>,
        /// An operator's reconciliation: written with the completion.
        audit: Option<&'a AuditEntry>,
    },
    Unkeyed,
}

impl Owner<'_> {
    pub(super) fn expires_at(&self) -> Option<DateTime<Utc>> {
        match self {
            Owner::Keyed { expires_at, .. } => Some(*expires_at),
            Owner::Unkeyed => None,
        }
    }
}

/// What an owner's work came to: its answer, or "fenced out": another owner took the record
/// over meanwhile, nothing was written, and the record must be read again.
#[derive(Debug)]
pub(super) enum Owned {
    Answered(Answer),
    FencedOut,
}

impl PaymentsEngine {
    /// The provider's answer was lost (counted): the record becomes UNKNOWN_REQUIRES_RECOVERY
    /// (fenced by the lease) with why, and the client is told so.
    pub(super) async fn outcome_unknown(
        &self,
        owner: Owner<'_>,
        tenant_id: &TenantId,
        operation: Operation,
        resource_id: &str,
        failure: &ProviderFailure,
    ) -> Owned {
        self.count(tenant_id, operation, Outcome::ProviderError);
        self.count(tenant_id, operation, Outcome::OutcomeUnknown);
        let expires_at = owner.expires_at();
        let Owner::Keyed {
            scope, lease_version, ..
        } = owner
        else {
            // Without a record the payment itself stays PROCESSING for recovery.
            return Owned::Answered(Answer::outcome_unknown(operation, resource_id, 1, None));
        };
        match self
            .records
            .mark_outcome_unknown(scope, lease_version, failure)
            .await
        {
            Ok(true) => Owned::Answered(Answer::outcome_unknown(operation, resource_id, 1, expires_at)),
            Ok(false) => Owned::FencedOut,
            Err(error) => Owned::Answered(Answer::error(
                error.as_api_error("mark outcome unknown"),
                expires_at,
            )),
        }
    }

    /// The owner died (its lease expired) after PROVIDER_REQUEST_SENT, or the provider's
    /// answer was lost: take the record over (exactly one taker wins) and resume its operation
    /// with the same resource, asking the provider before sending anything, so that it is
    /// done at most once. The retry path, the recovery worker and operators all come here.
    pub(super) async fn take_over_and_resume(
        &self,
        scope: &Scope,
        found: &RecordAt,
        stale_lease_version: i64,
        audit: Option<&AuditEntry>,
        charging: Charging,
    ) -> Owned {
        let expires_at = Some(found.record.expires_at);
        let taken = self
            .records
            .take_over(
                scope,
                stale_lease_version,
                &self.settings.instance_id,
                self.settings.of(scope.operation).lease,
            )
            .await;
        let (lease_version, expires_at) = match taken {
            Ok(Some(taken)) => taken,
            // Another retry or worker won: it owns the record now.
            Ok(None) => return Owned::Answered(Answer::in_progress(1, expires_at)),
            Err(error) => return Owned::Answered(Answer::error(error.as_api_error("take over"), expires_at)),
        };
        self.count(&scope.tenant_id, scope.operation, Outcome::Takeover);
        tracing::warn!(tenant_id = %scope.tenant_id, operation = %scope.operation, lease_version, "took over a stale owner's record");
        let owner = Owner::Keyed {
            scope,
            lease_version,
            expires_at,
            audit,
        };
        let resource_id = found.record.resource_id.as_deref().unwrap_or_default();
        let owned = match scope.operation {
            Operation::CreatePayment => {
                let version = found
                    .record
                    .response_schema_version
                    .as_deref()
                    .and_then(ApiVersion::parse)
                    .unwrap_or(ApiVersion::V2);
                self.resume_payment(owner, resource_id, version, charging).await
            }
            Operation::CreateRefund => self.resume_refund(owner, resource_id, charging).await,
        };
        self.waiting.settled(scope);
        owned
    }
}
