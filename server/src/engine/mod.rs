//! The engine: the idempotency layer and its two keyed operations, create_payment and
//! create_refund, end to end, and everything that settles a record later.
//!
//! - `keyed.rs`: the idempotency layer's request path, one for every keyed operation
//!   (`KeyedOperation`): one read, then the insert-first claim, or the answer [`decide`]
//!   gives a request that finds its key's record (compared in the record's fingerprint
//!   version); a takeover when the record's owner died.
//! - `verdict.rs`: what a found record says to a request, and carrying it out (the answer,
//!   a note of an expired retry, or the takeover of a record whose owner is gone).
//! - `payments.rs` and `refunds.rs`, one shape: an operation's own part: its request, its
//!   fingerprint, its claim, its provider call and completion, and its resumption after a
//!   takeover (create_payment's also the tenant without keys).
//! - `owner.rs`: what every holder of a record's lease shares: who owns (`Owner`), what its
//!   work came to (`Owned`), the unknown outcome, and the takeover that resumes an operation
//!   from its last durable step, asking before it sends.
//! - `operator.rs`: what only operators do: reconcile against the provider's evidence, apply
//!   an override two admins vouched for, release a key the provider never charged.
//! - `background.rs`: the passes the workers run: recovery, settlement, the release watch.
//! - `answer.rs`: what the client is answered, in the contract's terms.
//! - `waiting.rs`: requests held while another request owns their key (`Prefer: wait`).
//! - `final_answers.rs`: settled records kept in memory until shortly before their window
//!   ends, so that a replay needs no database.
//! - `sealing.rs`: stored response bodies sealed at rest.
//!
//! Whatever a keyed request writes runs on a task of its own (`keyed.rs`), so a caller that
//! disconnects cannot cancel it halfway (no half-done operation, no connection returned to the
//! pool inside a transaction); an answer the look-up gives writes nothing and is given at once.
//!
//! [`decide`]: domain::decision::decide

mod answer;
pub mod background;
pub mod final_answers;
mod keyed;
mod operator;
mod owner;
mod payments;
mod refunds;
pub mod sealing;
mod verdict;
pub mod waiting;

pub use answer::{Answer, Reply, outcome_unknown_code};
pub use operator::{ReconcileRefusal, Reconciled};
pub use payments::CreatePaymentRequest;
pub use refunds::CreateRefundRequest;
pub use waiting::WaitSettings;

use crate::metrics::OutcomeCounter;
use crate::metrics::journal::RequestJournal;
use crate::provider::client::ProviderClient;
use crate::store::{KeyedPaymentStore, PaymentStore, RecordStore, RefundStore, Store};
use domain::claim::StoredResponse;
use domain::expiry::ExpiryPolicy;
use domain::fingerprint::FingerprintVersion;
use domain::outcome::Outcome;
use domain::scope::{Operation, Scope};
use domain::tenant::TenantId;
use sealing::ResponseSealer;
use std::sync::Arc;
use std::time::Duration;
use strum::VariantArray;

/// One keyed operation's contract: its lease, window, policy after it, and retention.
#[derive(Debug, Clone)]
pub struct OperationSettings {
    /// How long an owner may work before a retry may take over.
    pub lease: Duration,
    /// The window, the policy after it, and tombstone retention.
    pub expiry: ExpiryPolicy,
}

#[derive(Debug, Clone)]
pub struct EngineSettings {
    pub create_payment: OperationSettings,
    pub create_refund: OperationSettings,
    /// This instance, as lease owner.
    pub instance_id: String,
    /// The memory for final answers, in bytes (0: none).
    pub answer_cache_bytes: u64,
    /// The version new records are fingerprinted in.
    pub fingerprint_version: FingerprintVersion,
    /// Requests held while another request owns their key.
    pub waiting: WaitSettings,
}

impl EngineSettings {
    /// The settings of one operation.
    pub fn of(&self, operation: Operation) -> &OperationSettings {
        match operation {
            Operation::CreatePayment => &self.create_payment,
            Operation::CreateRefund => &self.create_refund,
        }
    }

    /// How long after its key's first request a record may still be replayed, over every
    /// operation (its window, and a lease for the owner that was last to answer).
    pub fn longest_replay(&self) -> Duration {
        Operation::VARIANTS
            .iter()
            .map(|operation| {
                let of = self.of(*operation);
                of.expiry.window + of.lease
            })
            .max()
            .unwrap_or_default()
    }

    /// How long a settled record is remembered at most (its window and its tombstone's
    /// retention), over every operation: what the request journal and the console look back on.
    pub fn longest_memory(&self) -> Duration {
        Operation::VARIANTS
            .iter()
            .map(|operation| {
                let expiry = self.of(*operation).expiry;
                expiry.window + expiry.retention
            })
            .max()
            .unwrap_or_default()
    }
}

pub struct PaymentsEngine {
    records: Arc<dyn RecordStore>,
    payments: Arc<dyn PaymentStore>,
    keyed_payments: Arc<dyn KeyedPaymentStore>,
    refunds: Arc<dyn RefundStore>,
    provider: ProviderClient,
    outcomes: Arc<OutcomeCounter>,
    journal: Arc<RequestJournal>,
    sealer: Arc<ResponseSealer>,
    final_answers: final_answers::FinalAnswers,
    waiting: waiting::Waiting,
    settings: EngineSettings,
}

/// What the engine needs besides its settings.
pub struct EngineParts {
    pub records: Arc<dyn RecordStore>,
    pub payments: Arc<dyn PaymentStore>,
    pub keyed_payments: Arc<dyn KeyedPaymentStore>,
    pub refunds: Arc<dyn RefundStore>,
    pub provider: ProviderClient,
    pub outcomes: Arc<OutcomeCounter>,
    pub journal: Arc<RequestJournal>,
    pub sealer: Arc<ResponseSealer>,
}

impl EngineParts {
    /// Every part the store provides from one store, as an instance runs (tests give parts
    /// apart).
    pub fn over(
        store: &Arc<dyn Store>,
        provider: ProviderClient,
        outcomes: Arc<OutcomeCounter>,
        journal: Arc<RequestJournal>,
        sealer: Arc<ResponseSealer>,
    ) -> EngineParts {
        EngineParts {
            records: store.clone(),
            payments: store.clone(),
            keyed_payments: store.clone(),
            refunds: store.clone(),
            provider,
            outcomes,
            journal,
            sealer,
        }
    }
}

impl PaymentsEngine {
    pub fn new(parts: EngineParts, settings: EngineSettings) -> Self {
        PaymentsEngine {
            records: parts.records,
            payments: parts.payments,
            keyed_payments: parts.keyed_payments,
            refunds: parts.refunds,
            provider: parts.provider,
            outcomes: parts.outcomes,
            journal: parts.journal,
            sealer: parts.sealer,
            final_answers: final_answers::FinalAnswers::new(settings.answer_cache_bytes),
            waiting: waiting::Waiting::new(settings.waiting),
            settings,
        }
    }

    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    fn count(&self, tenant_id: &TenantId, operation: Operation, outcome: Outcome) {
        self.outcomes.record(tenant_id, operation, outcome);
    }

    /// The response as stored: its body sealed, bound to the record's scope.
    fn sealed(&self, scope: &Scope, response: &StoredResponse) -> StoredResponse {
        StoredResponse {
            body: self.sealer.seal(&sealing_scope(scope), &response.body),
            ..response.clone()
        }
    }

    /// Why this instance cannot open every stored response now (a response key in use is
    /// missing), if it cannot: it is then not ready.
    pub fn response_keys_unready(&self) -> Option<String> {
        self.sealer.unready_reason()
    }

    /// A stored response opened.
    fn opened(&self, scope: &Scope, stored: StoredResponse) -> Result<StoredResponse, sealing::SealingError> {
        let body = self.sealer.open(&sealing_scope(scope), &stored.body)?;
        Ok(StoredResponse { body, ..stored })
    }
}

/// The associated data a stored body is sealed with: its record's scope.
fn sealing_scope(scope: &Scope) -> Vec<u8> {
    format!("{}|{}|{}", scope.tenant_id, scope.operation, scope.key).into_bytes()
}
