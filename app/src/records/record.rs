//! One record's page.

use crate::overrides::OverrideRequestForm;
use crate::reconcile::ReconcilePanel;
use crate::reconcile::model::ReconcileResult;
use crate::records::api::get_record;
use crate::records::api::reveal_response;
use crate::records::late_charge::ReleasedPayment;
use crate::records::model::RecordDetail;
use crate::records::model::RecordRef;
use crate::records::panels::{
    lease_panel, payment_panel, refund_panel, requests_panel, summary_panel, timeline_panel,
};
use crate::recovery::model::NextLook;
use crate::recovery::{cause_text, next_look_text};
use crate::sign_in::api::whoami;
use crate::widgets::{Loading, Time};
use domain::operator::OperatorRole;
use domain::record::ClaimedAs;
use domain::record::RecordStatus;
use domain::scope::Operation;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

/// One record's whole story: scope, fingerprint and command, every request that came with
/// the key (a different one with what it changed), the timeline and lease, the payment, its
/// events, the audit trail, and, for operators, reconciliation.
#[component]
pub fn RecordPage() -> impl IntoView {
    let params = use_params_map();
    let record = move || RecordRef {
        tenant_id: params.read().get("tenant").unwrap_or_default(),
        operation: params.read().get("operation").unwrap_or_default(),
        key: params.read().get("key").unwrap_or_default(),
    };
    let (applied, set_applied) = signal(None::<ReconcileResult>);
    let detail = Resource::new(
        move || (record(), applied.get()),
        |(record, _)| get_record(record),
    );
    let operator = Resource::new(|| (), |_| whoami());
    view! {
        <Title text="Record" />
        {move || {
            applied
                .get()
                .map(|result| {
                    view! {
                        <p class=if result.ok { "ok" } else { "error" } role="status" data-result=result.ok.to_string()>
                            "Reconciliation: "
                            {result.message}
                            {result.status.map(|status| format!("; the record is {status}"))}
                        </p>
                    }
                })
        }}
        <Loading>
            {move || Suspend::new(async move {
                let role = operator.await.map_or(OperatorRole::Viewer, |operator| operator.role);
                detail
                    .await
                    .map(|detail| match detail {
                        Some(detail) => {
                            view! {
                                <RecordView detail role applied=set_applied />
                            }
                                .into_any()
                        }
                        None => {
                            view! {
                                <section class="panel">
                                    <h1>"No such record"</h1>
                                    <p>"It may have expired and been deleted after its retention period."</p>
                                </section>
                            }
                                .into_any()
                        }
                    })
            })}
        </Loading>
    }
}

/// Why the record's outcome is unknown, in words, and whether the worker still looks: the
/// first thing an operator reads on an unresolved record (and the history on a settled one).
fn why_unknown_view(detail: &RecordDetail) -> Option<impl IntoView + use<>> {
    if detail.unknown_cause.is_none() && detail.last_error.is_none() {
        return None;
    }
    let unresolved = detail.status == RecordStatus::UnknownRequiresRecovery;
    let heading = if unresolved {
        "Why the outcome is unknown"
    } else {
        "Why the outcome was unknown"
    };
    let cause = cause_text(detail.unknown_cause);
    let last = detail.last_error.clone().map(|error| {
        view! {
            <p data-last-error>
                "Latest failure: " {error} " ("
                <Time at=detail.last_error_at.clone().unwrap_or_default() />
                ")"
            </p>
        }
    });
    let next = detail.next_look.clone().map(|next| {
        let gave_up = matches!(next, NextLook::GaveUp(_));
        view! {
            <p data-next-look data-gave-up=gave_up.to_string()>
                {next_look_text(&next)}
            </p>
        }
    });
    Some(view! {
        <section class="panel why" data-why-unknown>
            <h2>{heading}</h2>
            <p data-cause>{cause}</p>
            {last}
            {next}
        </section>
    })
}

#[component]
fn RecordView(
    detail: RecordDetail,
    role: OperatorRole,
    applied: WriteSignal<Option<ReconcileResult>>,
) -> impl IntoView {
    let needs_operator = matches!(
        detail.status,
        RecordStatus::UnknownRequiresRecovery | RecordStatus::InProgress
    );
    view! {
        {summary_panel(&detail)}
        {why_unknown_view(&detail)}
        {timeline_panel(&detail.timeline)}
        {(role >= OperatorRole::Operator && needs_operator)
            .then(|| view! { <ReconcilePanel record=detail.record.clone() applied /> })}
        {(role >= OperatorRole::Admin && needs_operator)
            .then(|| view! { <OverrideRequestForm record=detail.record.clone() version=detail.lease_version /> })}
        {requests_panel(detail.requests.clone(), detail.replays.clone())}
        <StoredResponse record=detail.record.clone() can_reveal={role >= OperatorRole::Operator} />
        {lease_panel(&detail)}
        {(!detail.released_payments.is_empty())
            .then(|| {
                view! {
                    <section class="panel">
                        <h2>"Payments this key released"</h2>
                        <ul class="released">
                            {detail
                                .released_payments
                                .clone()
                                .into_iter()
                                .map(|payment| {
                                    view! { <ReleasedPayment payment record=detail.record.clone() role applied /> }
                                })
                                .collect_view()}
                        </ul>
                    </section>
                }
            })}
        {detail.refund.clone().map(refund_panel)}
        {payment_panel(&detail)}
        <section class="panel">
            <h2>"Audit"</h2>
            <crate::audit::AuditTable entries=detail.audit />
        </section>
    }
}

/// What a record of `operation` made, as its field is named.
pub(super) fn resource_name(operation: Option<Operation>) -> &'static str {
    match operation {
        Some(Operation::CreatePayment) => "Payment",
        Some(Operation::CreateRefund) => "Refund",
        None => "Resource",
    }
}

/// The provider's reference for it, as its field is named.
pub(super) fn provider_reference_name(operation: Option<Operation>) -> &'static str {
    match operation {
        Some(Operation::CreatePayment) => "Provider charge",
        Some(Operation::CreateRefund) => "Provider refund",
        None => "Provider reference",
    }
}

pub(super) fn claimed_as_text(claimed_as: ClaimedAs) -> &'static str {
    match claimed_as {
        ClaimedAs::New => "the key's first request",
        ClaimedAs::AfterExpiry => "a retry after the window (a new operation)",
        ClaimedAs::AfterRelease => "a retry after an operator released the key",
    }
}

/// The stored response stays masked until an operator reveals it; the server audits every
/// reveal before it returns anything.
#[component]
fn StoredResponse(record: RecordRef, can_reveal: bool) -> impl IntoView {
    let reveal = Action::new(|record: &RecordRef| reveal_response(record.clone()));
    view! {
        <section class="panel">
            <h2>"Stored response"</h2>
            {move || match reveal.value().get() {
                None => {
                    let record = record.clone();
                    view! {
                        <p class="muted">"Masked: stored responses are sensitive."</p>
                        {can_reveal
                            .then(|| {
                                view! {
                                    <button type="button" class="button" on:click=move |_| { reveal.dispatch(record.clone()); }>
                                        "Reveal (audited)"
                                    </button>
                                }
                            })}
                    }
                        .into_any()
                }
                Some(Ok(Some(response))) => {
                    view! {
                        <p>"Status " <strong data-revealed-status>{response.status}</strong></p>
                        <pre class="command" data-revealed-body>{response.body}</pre>
                    }
                        .into_any()
                }
                Some(Ok(None)) => view! { <p class="muted">"No stored response (not settled, or purged after the window)."</p> }.into_any(),
                Some(Err(error)) => view! { <p class="error" role="alert">{error.to_string()}</p> }.into_any(),
            }}
        </section>
    }
}

/// The canonical command, indented for reading (it is stored compact).
pub(super) fn serde_json_pretty(canonical: &str) -> String {
    if canonical.is_empty() {
        return "(purged when the record expired)".to_owned();
    }
    serde_json::from_str::<serde_json::Value>(canonical)
        .and_then(|value| serde_json::to_string_pretty(&value))
        .unwrap_or_else(|_| canonical.to_owned())
}
