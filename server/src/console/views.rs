//! The store's rows as the console's view models (`app::dto`), and the records browser's
//! filter and cursor parsed from what the browser sent. Times are RFC 3339 UTC with
//! milliseconds, as every page shows them.

use super::diff;
use crate::store::approvals::OverrideRequest;
use crate::store::bulk::{BulkJob, ItemReport, JobGroup};
use crate::store::console::{QueueRow, RecordName, RecordQuery, RecordSummary};
use crate::store::events::DeadLetter;
use crate::store::history::{RecordHistory, RefundSummary};
use crate::store::operators::LoggedAudit;
use crate::store::payments::minor_to_decimal;
use crate::store::rfc3339_millis as at;
use app::dto;
use chrono::{DateTime, Utc};
use domain::cursor::RecordCursor;
use domain::record::RecordStatus;
use domain::recovery::{ProviderEvidence, ReconcileAction};
use domain::scope::Operation;

pub fn record_ref(name: RecordName) -> dto::RecordRef {
    dto::RecordRef {
        tenant_id: name.tenant_id,
        operation: name.operation,
        key: name.key,
    }
}

pub fn record_name(record: &dto::RecordRef) -> RecordName {
    RecordName {
        tenant_id: record.tenant_id.clone(),
        operation: record.operation.clone(),
        key: record.key.clone(),
    }
}

/// A row of the records browser, with the cursor that continues after it.
pub fn summary(row: RecordSummary) -> dto::RecordSummary {
    let record = record_ref(row.record);
    let cursor = RecordCursor {
        created_at: row.created_at,
        tenant_id: record.tenant_id.clone(),
        operation: record.operation.clone(),
        key: record.key.clone(),
    }
    .to_text();
    dto::RecordSummary {
        record,
        tenant_name: row.tenant_name,
        amount: amount_of(row.amount_minor, row.currency.as_deref()),
        currency: row.currency,
        merchant_reference: row.merchant_reference,
        status: row.status,
        step: row.step.as_str().to_owned(),
        resource_id: row.resource_id,
        provider_reference: row.provider_reference,
        created_at: at(row.created_at),
        updated_at: at(row.updated_at),
        recovery_attempts: row.recovery_attempts,
        cursor,
    }
}

/// The browser's filter, every part checked; what is wrong is said in the operator's words.
pub fn record_query(filter: &dto::RecordFilter) -> Result<RecordQuery, String> {
    let named = |text: &str| (!text.is_empty()).then(|| text.to_owned());
    let status = named(&filter.status)
        .map(|status| status.parse().map_err(|_| format!("unknown status {status:?}")))
        .transpose()?;
    let step = named(&filter.step)
        .map(|step| step.parse().map_err(|_| format!("unknown step {step:?}")))
        .transpose()?;
    let time = |text: &str| -> Result<Option<DateTime<Utc>>, String> {
        named(text)
            .map(|text| {
                DateTime::parse_from_rfc3339(&text)
                    .map(|at| at.with_timezone(&Utc))
                    .map_err(|_| format!("not an RFC 3339 time: {text:?}"))
            })
            .transpose()
    };
    Ok(RecordQuery {
        status,
        step,
        tenant: named(&filter.tenant),
        operation: named(&filter.operation),
        key_prefix: named(&filter.key_prefix),
        from: time(&filter.from)?,
        to: time(&filter.to)?,
        after: named(&filter.after)
            .map(|after| RecordCursor::parse(&after).map_err(|error| error.to_string()))
            .transpose()?,
    })
}

/// Everything the record page shows: the record's story and its audit trail, each request
/// with what it changed against the record's command.
/// A refund of `record`'s tenant, with the record of its key.
fn refund_summary(record: &RecordName, refund: RefundSummary) -> dto::RefundSummary {
    dto::RefundSummary {
        amount: minor_to_decimal(refund.amount_minor, &refund.currency),
        record: refund.idempotency_key.map(|key| dto::RecordRef {
            tenant_id: record.tenant_id.clone(),
            operation: Operation::CreateRefund.as_str().to_owned(),
            key,
        }),
        id: refund.id,
        payment_id: refund.payment_id,
        currency: refund.currency,
        reason: refund.reason,
        reference: refund.reference,
        status: refund.status,
        provider_refund_id: refund.provider_refund_id,
        created_at: at(refund.created_at),
    }
}

/// When the recovery worker looks at a record next, or that it gave up (`max_attempts`: its
/// limit); `None` for a record nobody needs to look at (settled, or an owner at work).
pub fn next_look(
    status: RecordStatus,
    attempts: i32,
    max_attempts: i32,
    next_recovery_at: Option<DateTime<Utc>>,
    last_look_at: DateTime<Utc>,
    locked_until: Option<DateTime<Utc>>,
) -> Option<dto::NextLook> {
    match status {
        RecordStatus::UnknownRequiresRecovery if attempts >= max_attempts => {
            Some(dto::NextLook::GaveUp(at(last_look_at)))
        }
        RecordStatus::UnknownRequiresRecovery => {
            Some(dto::NextLook::At(at(next_recovery_at.unwrap_or(last_look_at))))
        }
        RecordStatus::InProgress if locked_until.is_none_or(|until| until <= Utc::now()) => {
            Some(dto::NextLook::NextPass)
        }
        _ => None,
    }
}

pub fn record_detail(
    history: RecordHistory,
    audit: Vec<LoggedAudit>,
    max_attempts: i32,
) -> dto::RecordDetail {
    let refund = history
        .refund
        .map(|refund| refund_summary(&history.record, refund));
    let refunds = history
        .refunds
        .into_iter()
        .map(|refund| refund_summary(&history.record, refund))
        .collect();
    let requests: Vec<dto::RequestView> = history
        .journal
        .into_iter()
        .map(|entry| dto::RequestView {
            at: at(entry.at),
            status_code: entry.status_code,
            same_request: entry.canonical_command.is_none(),
            changes: entry
                .canonical_command
                .as_deref()
                .map(|retry| diff::changes(&history.canonical_command, retry))
                .unwrap_or_default(),
            error_code: entry.error_code,
        })
        .collect();
    let replays = history.replays.map(|replays| dto::ReplaysView {
        count: replays.count,
        first_at: at(replays.first_at),
        last_at: at(replays.last_at),
        longest_delay_ms: replays.longest_delay_ms,
    });
    let steps: Vec<dto::StepView> = history
        .steps
        .into_iter()
        .map(|step| dto::StepView {
            at: at(step.at),
            status: step.status.as_str().to_owned(),
            step: step.step.as_str().to_owned(),
            lease_version: step.lease_version,
            lease_owner: step.lease_owner,
            note: step.note,
        })
        .collect();
    let audit: Vec<dto::AuditEntryView> = audit.into_iter().map(audit_entry).collect();
    dto::RecordDetail {
        record: record_ref(history.record),
        status: history.status,
        step: history.step.as_str().to_owned(),
        settled_status: history.settled_status.map(|status| status.as_str().to_owned()),
        fingerprint_version: history.fingerprint_version,
        fingerprint: history.fingerprint,
        canonical_command: history.canonical_command,
        resource_id: history.resource_id,
        provider_reference: history.provider_reference,
        response_status_code: history.response_status_code,
        lease_owner: history.lease_owner,
        lease_version: history.lease_version,
        locked_until: history.locked_until.map(at),
        recovery_attempts: history.recovery_attempts,
        next_look: next_look(
            history.status,
            history.recovery_attempts,
            max_attempts,
            history.next_recovery_at,
            history.last_error_at.unwrap_or(history.updated_at),
            history.locked_until,
        ),
        unknown_cause: history.unknown_cause,
        last_error: history.last_error,
        last_error_at: history.last_error_at.map(at),
        expired_retries: history.expired_retries,
        created_by: history.created_by,
        created_at: at(history.created_at),
        updated_at: at(history.updated_at),
        completed_at: history.completed_at.map(at),
        expires_at: at(history.expires_at),
        claimed_as: <&str>::from(history.claimed_as).to_owned(),
        timeline: timeline(
            &steps,
            &requests,
            replays.as_ref(),
            &audit,
            history.evidence.as_ref(),
        ),
        steps,
        released_payments: history
            .released_payments
            .into_iter()
            .map(|payment| dto::ReleasedPaymentView {
                id: payment.id,
                released_at: at(payment.released_at),
                late_charge_id: payment.late_charge_id,
                late_charge_resolved: payment.late_charge_resolution.map(|resolution| {
                    dto::LateChargeResolution {
                        at: at(resolution.at),
                        by: resolution.by,
                        reference: resolution.reference,
                    }
                }),
            })
            .collect(),
        payment: history.payment.map(|payment| dto::PaymentSummary {
            amount: minor_to_decimal(payment.amount_minor, &payment.currency),
            id: payment.id,
            account_id: payment.account_id,
            currency: payment.currency,
            merchant_reference: payment.merchant_reference,
            status: payment.status.as_str().to_owned(),
            provider_charge_id: payment.provider_charge_id,
        }),
        refund,
        refunds,
        events: history
            .events
            .into_iter()
            .map(|event| dto::EventView {
                id: event.id,
                event_type: event.event_type,
                created_at: at(event.created_at),
                published_at: event.published_at.map(at),
            })
            .collect(),
        requests,
        replays,
        audit,
    }
}

/// Everything that happened to a record, oldest first: the client's requests, each change of
/// status, step or lease (a failed provider call with its words and duration), what the
/// provider said when an operator asked, and the operators' actions.
fn timeline(
    steps: &[dto::StepView],
    requests: &[dto::RequestView],
    replays: Option<&dto::ReplaysView>,
    audit: &[dto::AuditEntryView],
    evidence: Option<&(ProviderEvidence, DateTime<Utc>)>,
) -> Vec<dto::TimelineEntry> {
    let entry = |at: &str, kind, text: String| dto::TimelineEntry {
        at: at.to_owned(),
        kind,
        text,
    };
    let mut timeline = Vec::with_capacity(steps.len() + requests.len() + audit.len() + 1);
    timeline.extend(requests.iter().map(|request| {
        let answer = match &request.error_code {
            Some(code) => format!("{} {code}", request.status_code),
            None => request.status_code.to_string(),
        };
        let what = if request.same_request {
            "a request with the key"
        } else {
            "a different request with the key"
        };
        entry(
            &request.at,
            dto::TimelineKind::Request,
            format!("{what}, answered {answer}"),
        )
    }));
    timeline
        .extend(replays.map(|replays| entry(&replays.first_at, dto::TimelineKind::Request, replays.text())));
    let mut previous: Option<DateTime<Utc>> = None;
    timeline.extend(steps.iter().map(|step| {
        let owner = step
            .lease_owner
            .as_deref()
            .map(|owner| format!(", owner {owner}"))
            .unwrap_or_default();
        // How long the step before took: a provider call's, from the request sent to its answer.
        let this = DateTime::parse_from_rfc3339(&step.at)
            .ok()
            .map(|at| at.with_timezone(&Utc));
        let after = match (previous, this) {
            (Some(before), Some(now)) => format!(
                ", {:.3} s after the step before",
                (now - before).num_milliseconds() as f64 / 1000.0
            ),
            _ => String::new(),
        };
        previous = this.or(previous);
        let moved = format!(
            "{} at step {} (lease version {}{owner}{after})",
            step.status, step.step, step.lease_version
        );
        match (&step.note, step.status.as_str()) {
            (Some(note), "UNKNOWN_REQUIRES_RECOVERY") => entry(
                &step.at,
                dto::TimelineKind::ProviderFailure,
                format!("{moved}: {note}"),
            ),
            (Some(note), _) => entry(
                &step.at,
                dto::TimelineKind::ProviderAnswer,
                format!("{moved}: {note}"),
            ),
            (None, _) => entry(&step.at, dto::TimelineKind::Step, moved),
        }
    }));
    timeline.extend(evidence.map(|(evidence, seen)| {
        let said = match evidence {
            ProviderEvidence::Charged { charge_id, status } => format!("it has {charge_id}, {status}"),
            ProviderEvidence::NoCharge => "it has nothing under the key".to_owned(),
            ProviderEvidence::Unreachable { problem } => format!("it did not answer: {problem}"),
        };
        entry(
            &at(*seen),
            dto::TimelineKind::Evidence,
            format!("the provider, asked for an operator: {said}"),
        )
    }));
    timeline.extend(audit.iter().map(|logged| {
        let reason = logged
            .entry
            .reason
            .as_deref()
            .map(|reason| format!(": \u{201c}{reason}\u{201d}"))
            .unwrap_or_default();
        let details = logged
            .entry
            .details
            .as_deref()
            .map(|details| format!(" ({details})"))
            .unwrap_or_default();
        entry(
            &logged.at,
            dto::TimelineKind::Operator,
            format!(
                "{} {}, {}{reason}{details}",
                logged.entry.actor, logged.entry.action, logged.entry.result
            ),
        )
    }));
    // RFC 3339 in UTC with milliseconds sorts as time does; equal times keep their order.
    timeline.sort_by(|a, b| a.at.cmp(&b.at));
    timeline
}

pub fn audit_entry(logged: LoggedAudit) -> dto::AuditEntryView {
    dto::AuditEntryView {
        id: logged.id,
        at: at(logged.at),
        entry: logged.entry,
    }
}

pub fn override_request(request: OverrideRequest) -> dto::OverrideRequestView {
    dto::OverrideRequestView {
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

/// An amount in minor units as its currency writes it, when both are known.
fn amount_of(minor: Option<i64>, currency: Option<&str>) -> Option<String> {
    Some(minor_to_decimal(minor?, currency?))
}

/// A row of the recovery queue.
pub fn queue_row(row: QueueRow, max_attempts: i32) -> dto::QueueRowView {
    let amount = amount_of(row.amount_minor, row.currency.as_deref());
    dto::QueueRowView {
        next_look: next_look(
            row.status,
            row.recovery_attempts,
            max_attempts,
            row.next_recovery_at,
            row.last_error_at.unwrap_or(row.updated_at),
            None,
        )
        .unwrap_or(dto::NextLook::NextPass),
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
pub fn bulk_job(job: BulkJob, groups: Vec<JobGroup>, first_items: Vec<ItemReport>) -> dto::BulkJobView {
    let count = |value: i64| u64::try_from(value).unwrap_or(0);
    dto::BulkJobView {
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
            .map(|group| dto::BulkGroupView {
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

pub fn bulk_item(item: ItemReport) -> dto::BulkItemView {
    let record = record_ref(item.record);
    dto::BulkItemView {
        position: item.position,
        version: item.version,
        evidence: item.evidence,
        action: item.action,
        included: item.included,
        result: item.result.map(|result| dto::ReconcileResult {
            record: record.clone(),
            ok: result.ok,
            status: result.status,
            message: result.message,
        }),
        record,
    }
}

pub fn dead_letter(letter: DeadLetter) -> dto::DeadLetter {
    dto::DeadLetter {
        event_id: letter.event_id,
        event_type: letter.event_type,
        payment_id: letter.payment_id,
        attempts: letter.attempts,
        last_error: letter.last_error,
        // Microseconds: the re-drive compares it with the stored value.
        dead_at: letter.dead_at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use domain::record::{ProgressStep, RecordStatus};

    #[test]
    fn a_filter_is_checked_part_by_part_and_any_means_none() {
        let any = record_query(&dto::RecordFilter::default()).expect("the empty filter");
        assert_eq!(any, RecordQuery::default());
        let filter = dto::RecordFilter {
            status: "COMPLETED".into(),
            step: "PROVIDER_REQUEST_SENT".into(),
            from: "2026-11-29T00:00:00Z".into(),
            ..dto::RecordFilter::default()
        };
        let query = record_query(&filter).expect("a valid filter");
        assert_eq!(query.status, Some(RecordStatus::Completed));
        assert_eq!(query.step, Some(ProgressStep::ProviderRequestSent));
        assert_eq!(query.from, Utc.with_ymd_and_hms(2026, 11, 29, 0, 0, 0).single());
        let with = |set: fn(&mut dto::RecordFilter)| {
            let mut filter = dto::RecordFilter::default();
            set(&mut filter);
            filter
        };
        for bad in [
            with(|filter| filter.from = "yesterday".into()),
            with(|filter| filter.after = "[1]".into()),
            with(|filter| filter.after = r#"["not a time", "ten_1", "create_payment", "k"]"#.into()),
            with(|filter| filter.status = "DONE".into()),
            with(|filter| filter.step = "halfway".into()),
        ] {
            assert!(record_query(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_row_names_the_cursor_that_continues_after_it_to_the_microsecond() {
        let created_at = Utc
            .with_ymd_and_hms(2026, 11, 29, 10, 0, 0)
            .single()
            .expect("time")
            + chrono::Duration::microseconds(123_456);
        let row = RecordSummary {
            record: RecordName {
                tenant_id: "ten_1".into(),
                operation: "create_payment".into(),
                key: "k/1".into(),
            },
            tenant_name: "acme".into(),
            status: RecordStatus::Completed,
            step: ProgressStep::Completed,
            resource_id: None,
            provider_reference: None,
            created_at,
            updated_at: created_at,
            recovery_attempts: 0,
            amount_minor: Some(1_000),
            currency: Some("EUR".into()),
            merchant_reference: Some("inv-1".into()),
        };
        let shown = summary(row.clone());
        let filter = dto::RecordFilter {
            after: shown.cursor,
            ..dto::RecordFilter::default()
        };
        let query = record_query(&filter).expect("its own cursor parses");
        assert_eq!(
            query.after,
            Some(RecordCursor {
                created_at,
                tenant_id: row.record.tenant_id,
                operation: row.record.operation,
                key: row.record.key,
            })
        );
    }
}
