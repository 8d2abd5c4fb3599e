//! The recovery queue's rows, bulk jobs, overrides and dead letters as the console shows them.

use super::{amount_of, record_ref};
use crate::store::approvals::OverrideRequest;
use crate::store::bulk::{BulkJob, ItemReport, JobGroup};
use crate::store::console::QueueRow;
use crate::store::events::DeadLetter;
use crate::store::rfc3339_millis as at;
use app::events::model as events;
use app::overrides::model as overrides;
use app::reconcile::model as reconcile;
use app::recovery::model as recovery;
use chrono::{DateTime, Utc};
use domain::record::RecordStatus;
use domain::recovery::ReconcileAction;
use domain::scope::Operation;

/// When the recovery worker looks at a record next, or that it gave up (`max_attempts`: its
/// limit); `None` for a record nobody needs to look at (settled, or an owner at work).
pub fn next_look(
    status: RecordStatus,
    attempts: i32,
    max_attempts: i32,
    next_recovery_at: Option<DateTime<Utc>>,
    last_look_at: DateTime<Utc>,
    locked_until: Option<DateTime<Utc>>,
) -> Option<recovery::NextLook> {
    match status {
        RecordStatus::UnknownRequiresRecovery if attempts >= max_attempts => {
            Some(recovery::NextLook::GaveUp(at(last_look_at)))
        }
        RecordStatus::UnknownRequiresRecovery => Some(recovery::NextLook::At(at(
            next_recovery_at.unwrap_or(last_look_at)
        ))),
        RecordStatus::InProgress if locked_until.is_none_or(|until| until <= Utc::now()) => {
            Some(recovery::NextLook::NextPass)
        }
        _ => None,
    }
}

/// A row of the recovery queue.
pub fn queue_row(row: QueueRow, max_attempts: i32) -> recovery::QueueRowView {
    let amount = amount_of(row.amount_minor, row.currency.as_deref());
    recovery::QueueRowView {
        next_look: next_look(
            row.status,
            row.recovery_attempts,
            max_attempts,
            row.next_recovery_at,
            row.last_error_at.unwrap_or(row.updated_at),
            None,
        )
        .unwrap_or(recovery::NextLook::NextPass),
        record: record_ref(row.record),
        tenant_name: row.tenant_name,
        status: row.status,
        version: row.version,
        resource_id: row.resource_id,
        amount,
        currency: row.currency,
        merchant_reference: row.merchant_reference,
        created_at: at(row.created_at),
        recovery_attempts: row.recovery_attempts,
        unknown_cause: row.unknown_cause,
        last_error: row.last_error,
        last_error_at: row.last_error_at.map(at),
        evidence: row.evidence.map(|(evidence, seen)| (evidence, at(seen))),
    }
}

/// A bulk job, with its groups and first items when the page shows them.
pub fn bulk_job(job: BulkJob, groups: Vec<JobGroup>, first_items: Vec<ItemReport>) -> recovery::BulkJobView {
    let count = |value: i64| u64::try_from(value).unwrap_or(0);
    recovery::BulkJobView {
        id: job.id,
        name: job.name,
        state: job.state,
        selection: job.selection,
        requested_by: job.requested_by,
        reason: job.reason,
        applied_by: job.applied_by,
        created_at: at(job.created_at),
        applied_at: job.applied_at.map(at),
        finished_at: job.finished_at.map(at),
        items: count(job.counts.items),
        previewed: count(job.counts.previewed),
        included: count(job.counts.included),
        done: count(job.counts.done),
        ok: count(job.counts.ok),
        groups: groups
            .into_iter()
            .map(|group| recovery::BulkGroupView {
                offered: group
                    .operation
                    .parse::<Operation>()
                    .map(|operation| ReconcileAction::offered(operation, group.evidence).to_vec())
                    .unwrap_or_default(),
                operation: group.operation,
                evidence: group.evidence,
                action: group.action,
                included: group.included,
                items: count(group.items),
                done: count(group.done),
                ok: count(group.ok),
            })
            .collect(),
        first_items: first_items.into_iter().map(bulk_item).collect(),
    }
}

pub fn bulk_item(item: ItemReport) -> recovery::BulkItemView {
    let record = record_ref(item.record);
    recovery::BulkItemView {
        position: item.position,
        version: item.version,
        evidence: item.evidence,
        action: item.action,
        included: item.included,
        result: item.result.map(|result| reconcile::ReconcileResult {
            record: record.clone(),
            ok: result.ok,
            status: result.status,
            message: result.message,
        }),
        record,
    }
}

pub fn override_request(request: OverrideRequest) -> overrides::OverrideRequestView {
    overrides::OverrideRequestView {
        id: request.id,
        record: record_ref(request.record),
        record_version: request.record_version,
        outcome: request.outcome,
        requested_by: request.requested_by,
        reason: request.reason,
        requested_at: at(request.requested_at),
        state: request.state,
        decided_by: request.decided_by,
        decision_reason: request.decision_reason,
        decided_at: request.decided_at.map(at),
        result: request.result,
    }
}

pub fn dead_letter(letter: DeadLetter) -> events::DeadLetter {
    events::DeadLetter {
        event_id: letter.event_id,
        event_type: letter.event_type,
        payment_id: letter.payment_id,
        attempts: letter.attempts,
        last_error: letter.last_error,
        // Microseconds: the re-drive compares it with the stored value.
        dead_at: letter.dead_at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
    }
}
