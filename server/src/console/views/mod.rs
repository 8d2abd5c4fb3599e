//! The store's rows as the console's view models (`app::<page>::model`), and the records
//! browser's filter and cursor parsed from what the browser sent. Times are RFC 3339 UTC with
//! milliseconds, as every page shows them.

use crate::console::views::timeline::timeline;
mod recovery_views;
mod timeline;

pub use recovery_views::{bulk_job, dead_letter, next_look, override_request, queue_row};

use super::diff;
use crate::store::console::{RecordName, RecordQuery, RecordSummary};
use crate::store::history::{RecordHistory, RefundSummary};
use crate::store::operators::LoggedAudit;
use crate::store::payments::minor_to_decimal;
use crate::store::rfc3339_millis as at;
use app::audit::model as audit;
use app::records::model as records;
use chrono::{DateTime, Utc};
use domain::cursor::RecordCursor;
use domain::scope::Operation;

pub fn record_ref(name: RecordName) -> records::RecordRef {
    records::RecordRef {
        tenant_id: name.tenant_id,
        operation: name.operation,
        key: name.key,
    }
}

pub fn record_name(record: &records::RecordRef) -> RecordName {
    RecordName {
        tenant_id: record.tenant_id.clone(),
        operation: record.operation.clone(),
        key: record.key.clone(),
    }
}

/// A row of the records browser, with the cursor that continues after it.
pub fn summary(row: RecordSummary) -> records::RecordSummary {
    let record = record_ref(row.record);
    let cursor = RecordCursor {
        created_at: row.created_at,
        tenant_id: record.tenant_id.clone(),
        operation: record.operation.clone(),
        key: record.key.clone(),
    }
    .to_text();
    records::RecordSummary {
        record,
        tenant_name: row.tenant_name,
        amount: amount_of(row.amount_minor, row.currency.as_deref()),
        currency: row.currency,
        merchant_reference: row.merchant_reference,
        status: row.status,
        step: row.step,
        resource_id: row.resource_id,
        provider_reference: row.provider_reference,
        created_at: at(row.created_at),
        updated_at: at(row.updated_at),
        recovery_attempts: row.recovery_attempts,
        cursor,
    }
}

/// The browser's filter, every part checked; what is wrong is said in the operator's words.
pub fn record_query(filter: &records::RecordFilter) -> Result<RecordQuery, String> {
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
fn refund_summary(record: &RecordName, refund: RefundSummary) -> records::RefundSummary {
    records::RefundSummary {
        amount: minor_to_decimal(refund.amount_minor, &refund.currency),
        record: refund.idempotency_key.map(|key| records::RecordRef {
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

pub fn record_detail(
    history: RecordHistory,
    audit: Vec<LoggedAudit>,
    max_attempts: i32,
) -> records::RecordDetail {
    let refund = history
        .refund
        .map(|refund| refund_summary(&history.record, refund));
    let refunds = history
        .refunds
        .into_iter()
        .map(|refund| refund_summary(&history.record, refund))
        .collect();
    let requests: Vec<records::RequestView> = history
        .journal
        .into_iter()
        .map(|entry| records::RequestView {
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
    let replays = history.replays.map(|replays| records::ReplaysView {
        count: replays.count,
        first_at: at(replays.first_at),
        last_at: at(replays.last_at),
        longest_delay_ms: replays.longest_delay_ms,
    });
    let steps: Vec<records::StepView> = history
        .steps
        .into_iter()
        .map(|step| records::StepView {
            at: at(step.at),
            status: step.status,
            step: step.step,
            lease_version: step.lease_version,
            lease_owner: step.lease_owner,
            note: step.note,
        })
        .collect();
    let audit: Vec<audit::AuditEntryView> = audit.into_iter().map(audit_entry).collect();
    records::RecordDetail {
        record: record_ref(history.record),
        status: history.status,
        step: history.step,
        settled_status: history.settled_status,
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
        claimed_as: history.claimed_as,
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
            .map(|payment| records::ReleasedPaymentView {
                id: payment.id,
                released_at: at(payment.released_at),
                late_charge_id: payment.late_charge_id,
                late_charge_resolved: payment.late_charge_resolution.map(|resolution| {
                    records::LateChargeResolution {
                        at: at(resolution.at),
                        by: resolution.by,
                        reference: resolution.reference,
                    }
                }),
            })
            .collect(),
        payment: history.payment.map(|payment| records::PaymentSummary {
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
            .map(|event| records::EventView {
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

pub fn audit_entry(logged: LoggedAudit) -> audit::AuditEntryView {
    audit::AuditEntryView {
        id: logged.id,
        at: at(logged.at),
        entry: logged.entry,
    }
}

/// An amount in minor units as its currency writes it, when both are known.
pub(super) fn amount_of(minor: Option<i64>, currency: Option<&str>) -> Option<String> {
    Some(minor_to_decimal(minor?, currency?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use domain::record::{ProgressStep, RecordStatus};

    #[test]
    fn a_filter_is_checked_part_by_part_and_any_means_none() {
        let any = record_query(&records::RecordFilter::default()).expect("the empty filter");
        assert_eq!(any, RecordQuery::default());
        let filter = records::RecordFilter {
            status: "COMPLETED".into(),
            step: "PROVIDER_REQUEST_SENT".into(),
            from: "2026-11-29T00:00:00Z".into(),
            ..records::RecordFilter::default()
        };
        let query = record_query(&filter).expect("a valid filter");
        assert_eq!(query.status, Some(RecordStatus::Completed));
        assert_eq!(query.step, Some(ProgressStep::ProviderRequestSent));
        assert_eq!(query.from, Utc.with_ymd_and_hms(2026, 11, 29, 0, 0, 0).single());
        let with = |set: fn(&mut records::RecordFilter)| {
            let mut filter = records::RecordFilter::default();
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
        let filter = records::RecordFilter {
            after: shown.cursor,
            ..records::RecordFilter::default()
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
