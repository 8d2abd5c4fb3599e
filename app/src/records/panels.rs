//! The record page's panels, each a part of the record's story.

use super::record::{claimed_as_text, provider_reference_name, resource_name};
use crate::records::model::{RecordDetail, RefundSummary, ReplaysView, RequestView, TimelineEntry};
use crate::recovery::next_look_text;
use crate::widgets::{Head, StatusBadge, Time};
use leptos::prelude::*;

/// A name and its value, in a `<dl class="fields">`.
fn field(name: &'static str, value: String) -> impl IntoView {
    view! {
        <dt>{name}</dt>
        <dd>{value}</dd>
    }
}

fn optional(value: &Option<String>) -> String {
    value.clone().unwrap_or_else(|| "—".to_owned())
}

/// What the record is: its scope, state, fingerprint, results and command.
pub(super) fn summary_panel(detail: &RecordDetail) -> impl IntoView + use<> {
    view! {
        <section class="panel" data-record-status=detail.status.as_str()>
            <div class="panel-head">
                <h1>"Record " <code>{detail.record.key.clone()}</code></h1>
                <StatusBadge status=detail.status />
            </div>
            <dl class="fields">
                {field("Tenant", detail.record.tenant_id.clone())}
                {field("Operation", detail.record.operation.clone())}
                {field("Step", detail.step.as_str().to_owned())}
                {field("Outcome kept by the tombstone", detail.settled_status.map_or_else(|| "—".to_owned(), |status| status.as_str().to_owned()))}
                {field("Fingerprint", format!("v{} {}", detail.fingerprint_version, detail.fingerprint))}
                {field(resource_name(detail.record.known_operation()), optional(&detail.resource_id))}
                {field(provider_reference_name(detail.record.known_operation()), optional(&detail.provider_reference))}
                {field("Stored answer", detail.response_status_code.map_or_else(|| "—".to_owned(), |code| code.to_string()))}
                {field("Created by API key", detail.created_by.clone())}
            </dl>
            <h2>"Command"</h2>
            <pre class="command">{super::record::serde_json_pretty(&detail.canonical_command)}</pre>
        </section>
    }
}

/// Everything that happened to the record, oldest first.
pub(super) fn timeline_panel(timeline: &[TimelineEntry]) -> impl IntoView + use<> {
    view! {
        <section class="panel">
            <h2>"What happened, in order"</h2>
            <ol class="timeline" aria-label="Everything that happened to the record, oldest first">
                {timeline
                    .iter()
                    .map(|entry| {
                        view! {
                            <li data-kind=entry.kind.as_str()>
                                <Time at=entry.at.clone() />
                                " "
                                <span class="kind">{entry.kind.as_str()}</span>
                                " "
                                {entry.text.clone()}
                            </li>
                        }
                    })
                    .collect_view()}
            </ol>
        </section>
    }
}

/// Every request that came with the key (a different one with what it changed), and its
/// replays counted.
pub(super) fn requests_panel(requests: Vec<RequestView>, replays: Option<ReplaysView>) -> impl IntoView {
    view! {
        <section class="panel">
            <h2>"Requests with this key"</h2>
            {replays
                .as_ref()
                .map(|replays| {
                    view! {
                        <p class="replays" data-replays=replays.count.to_string()>
                            {replays.text()}
                        </p>
                    }
                })}
            <table class="requests">
                <Head columns=&["At", "Answer", "Request"] />
                <tbody>
                    {requests
                        .into_iter()
                        .map(|request| {
                            let answer = match &request.error_code {
                                Some(code) => format!("{} {code}", request.status_code),
                                None => request.status_code.to_string(),
                            };
                            view! {
                                <tr data-same=request.same_request.to_string()>
                                    <td>
                                        <Time at=request.at />
                                    </td>
                                    <td>{answer}</td>
                                    <td>
                                        {if request.same_request {
                                            view! { <span class="muted">"same request"</span> }.into_any()
                                        } else {
                                            view! {
                                                <ul class="diff">
                                                    {request
                                                        .changes
                                                        .into_iter()
                                                        .map(|change| {
                                                            view! {
                                                                <li data-field=change.field.clone()>
                                                                    <code>{change.field.clone()}</code>
                                                                    " "
                                                                    <del>{change.before}</del>
                                                                    " -> "
                                                                    <ins>{change.after}</ins>
                                                                </li>
                                                            }
                                                        })
                                                        .collect_view()}
                                                </ul>
                                            }
                                                .into_any()
                                        }}
                                    </td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </section>
    }
}

/// The record's steps and lease, its window and its recovery.
pub(super) fn lease_panel(detail: &RecordDetail) -> impl IntoView + use<> {
    view! {
        <section class="panel">
            <h2>"Timeline and lease"</h2>
            <ol class="steps" aria-label="Steps, oldest first">
                {detail
                    .steps
                    .clone()
                    .into_iter()
                    .map(|step| {
                        let owner = step.lease_owner.map(|owner| format!(", owner {owner}")).unwrap_or_default();
                        view! {
                            <li data-status=step.status.as_str()>
                                <Time at=step.at />
                                " "
                                <strong>{step.status.as_str()}</strong>
                                " at step "
                                <code>{step.step.as_str()}</code>
                                {format!(" (lease version {}{owner})", step.lease_version)}
                            </li>
                        }
                    })
                    .collect_view()}
            </ol>
            <dl class="fields">
                {field("This execution began as", claimed_as_text(detail.claimed_as).to_owned())}
                {field("Created", detail.created_at.clone())}
                {field("Updated", detail.updated_at.clone())}
                {field("Completed", optional(&detail.completed_at))}
                {field("Window ends", detail.expires_at.clone())}
                {field("Lease owner", optional(&detail.lease_owner))}
                {field("Lease version", detail.lease_version.to_string())}
                {field("Lease until", optional(&detail.locked_until))}
                {field("Recovery attempts", detail.recovery_attempts.to_string())}
                {field("Next recovery", detail.next_look.as_ref().map_or_else(|| "—".to_owned(), next_look_text))}
                {field("Retries after expiry", detail.expired_retries.to_string())}
            </dl>
        </section>
    }
}

/// The refund a create_refund record made.
pub(super) fn refund_panel(refund: RefundSummary) -> impl IntoView {
    let (id, status) = (refund.id.clone(), refund.status.clone());
    view! {
        <section class="panel" data-refund=id>
            <h2>"Refund"</h2>
            <dl class="fields" data-refund-status=status>
                {field("Refund", refund.id)}
                {field("Payment", refund.payment_id)}
                {field("Amount", format!("{} {}", refund.amount, refund.currency))}
                {field("Reason", refund.reason)}
                {field("Reference", refund.reference)}
                {field("Status", refund.status)}
                {field("Provider refund", refund.provider_refund_id.unwrap_or_else(|| "—".to_owned()))}
            </dl>
        </section>
    }
}

/// The record's payment, its refunds and its events.
pub(super) fn payment_panel(detail: &RecordDetail) -> impl IntoView + use<> {
    view! {
        <section class="panel">
            <h2>"Payment and events"</h2>
            {detail
                .payment
                .clone()
                .map(|payment| {
                    let status = payment.status.clone();
                    view! {
                        <dl class="fields" data-payment-status=status>
                            {field("Payment", payment.id)}
                            {field("Account", payment.account_id)}
                            {field("Amount", format!("{} {}", payment.amount, payment.currency))}
                            {field("Merchant reference", payment.merchant_reference)}
                            {field("Status", payment.status)}
                            {field("Provider charge", payment.provider_charge_id.unwrap_or_else(|| "—".to_owned()))}
                        </dl>
                    }
                })}
            {(!detail.refunds.is_empty())
                .then(|| {
                    view! {
                        <h3>"Refunds of this payment"</h3>
                        <table class="refunds">
                            <Head columns=&["Refund", "Amount", "Reason", "Reference", "Status", "Made"] />
                            <tbody>
                                {detail
                                    .refunds
                                    .clone()
                                    .into_iter()
                                    .map(|refund| {
                                        let (row, id, status) = (refund.id.clone(), refund.id.clone(), refund.status.clone());
                                        view! {
                                            <tr data-payment-refund=row data-refund-status=status>
                                                <td>
                                                    {match refund.record {
                                                        Some(record) => view! { <a href=record.href()><code>{id}</code></a> }.into_any(),
                                                        None => view! { <code>{id}</code> }.into_any(),
                                                    }}
                                                </td>
                                                <td>{format!("{} {}", refund.amount, refund.currency)}</td>
                                                <td>{refund.reason}</td>
                                                <td>{refund.reference}</td>
                                                <td>{refund.status}</td>
                                                <td><Time at=refund.created_at /></td>
                                            </tr>
                                        }
                                    })
                                    .collect_view()}
                            </tbody>
                        </table>
                    }
                })}
            <ul class="events">
                {detail
                    .events
                    .clone()
                    .into_iter()
                    .map(|event| {
                        view! {
                            <li>
                                <code>{event.event_type}</code>
                                " "
                                <Time at=event.created_at />
                                {event.published_at.map_or(" (not yet published)".to_owned(), |_| " (published)".to_owned())}
                            </li>
                        }
                    })
                    .collect_view()}
            </ul>
        </section>
    }
}
