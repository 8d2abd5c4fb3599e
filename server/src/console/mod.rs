//! The server's side of the console: access (operators, sessions, the gate, sign-in limits in
//! `limits.rs`, refused sign-ins summed up in `refusals.rs`), and the console
//! backend port (`app::backend`'s traits) implemented over the store and the engine: its reads
//! in `reads.rs`, its actions in `actions.rs` and `bulk.rs`, late charges (`LateChargeActions`)
//! in `late_charges.rs`, administration in `admin.rs` (through `crate::admin`, as the command
//! line), the store's rows shaped into view models in `views.rs`.

pub mod access;
mod actions;
mod admin;
pub mod bulk;
mod diff;
pub mod exports;
mod late_charges;
pub mod limits;
mod reads;
pub mod refusals;
pub mod router;
pub mod sessions;
mod upkeep;
mod views;

pub use actions::OVERRIDE_DECISION_WINDOW;

use crate::engine::PaymentsEngine;
use crate::store::{Store, StoreError};
use app::backend::ConsoleError;
use app::records::model::RecordRef;
use domain::key::IdempotencyKey;
use domain::operator::AuditEntry;
use domain::record::RecordAt;
use domain::scope::{Operation, Scope};
use domain::tenant::TenantId;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct StoreConsole {
    store: Arc<dyn Store>,
    engine: Arc<PaymentsEngine>,
    /// The recovery worker's attempt limit: unknown outcomes at it need an operator.
    recovery_max_attempts: i32,
    /// How long a bulk job's runner holds it without finishing an item.
    bulk_lease: Duration,
}

impl StoreConsole {
    pub fn new(
        store: Arc<dyn Store>,
        engine: Arc<PaymentsEngine>,
        recovery_max_attempts: i32,
        bulk_lease: Duration,
    ) -> Self {
        StoreConsole {
            store,
            engine,
            recovery_max_attempts,
            bulk_lease,
        }
    }

    /// Writes an audit entry that records a refusal or a failure (the change itself, when
    /// there is one, commits its own entry); a failure to write it is logged.
    async fn write_audit(&self, entry: AuditEntry) {
        if let Err(error) = self.store.append_audit(&entry).await {
            tracing::error!(%error, action = %entry.action, "console: audit entry not written");
        }
    }

    /// The record an operator named, as it is now.
    async fn existing_record(
        &self,
        record: &RecordRef,
        during: &'static str,
    ) -> Result<RecordAt, ConsoleError> {
        self.store
            .load_record(&scope_of(record)?)
            .await
            .map_err(unavailable(during))?
            .ok_or_else(|| ConsoleError::Invalid("no such record".to_owned()))
    }
}

/// A store failure as the operator sees it; the details go to the log.
fn unavailable(during: &'static str) -> impl Fn(StoreError) -> ConsoleError {
    move |error| {
        tracing::error!(%error, during, "console: store failure");
        ConsoleError::StoreUnavailable
    }
}

/// The engine's scope for a record named by the console; only operations this binary knows.
fn scope_of(record: &RecordRef) -> Result<Scope, ConsoleError> {
    let operation: Operation = record
        .operation
        .parse()
        .map_err(|_| ConsoleError::Invalid(format!("unknown operation {:?}", record.operation)))?;
    let key = IdempotencyKey::parse(record.key.as_bytes())
        .map_err(|_| ConsoleError::Invalid("not an idempotency key".to_owned()))?;
    Ok(Scope {
        tenant_id: TenantId::from_stored(record.tenant_id.clone()),
        operation,
        key,
    })
}

/// An operator's reason for an action: it goes into the audit log, so it must say something.
fn checked_reason(reason: &str) -> Result<String, ConsoleError> {
    let reason = reason.trim();
    if (5..=500).contains(&reason.chars().count()) {
        Ok(reason.to_owned())
    } else {
        Err(ConsoleError::Invalid(
            "say why, in 5 to 500 characters: the reason goes into the audit log".to_owned(),
        ))
    }
}
