//! A released payment the provider charged after all: refunded from here, or marked refunded.

use crate::reconcile::model::ReconcileResult;
use crate::records::api::preview_late_charge_refund;
use crate::records::api::refund_late_charge;
use crate::records::api::resolve_late_charge;
use crate::records::model::RecordRef;
use crate::records::model::ReleasedPaymentView;
use crate::widgets::{ReasonAndApply, TextField, Time, reason_given};
use domain::operator::OperatorRole;
use leptos::prelude::*;

/// A payment the key released, and a charge the provider showed for it after all: for an
/// operator to refund from here (guarded, through create_refund), or, refunded by other means,
/// to mark refunded with the refund's reference.
#[component]
pub(super) fn ReleasedPayment(
    payment: ReleasedPaymentView,
    record: RecordRef,
    role: OperatorRole,
    applied: WriteSignal<Option<ReconcileResult>>,
) -> impl IntoView {
    let unresolved = payment.late_charge_id.is_some() && payment.late_charge_resolved.is_none();
    let reference = RwSignal::new(String::new());
    let payment_id = payment.id.clone();
    let target = record.clone();
    let resolve = Action::new(move |reference: &String| {
        resolve_late_charge(target.clone(), payment_id.clone(), reference.clone())
    });
    let failed_on = record.clone();
    Effect::new(move |_| {
        if let Some(outcome) = resolve.value().get() {
            applied.set(Some(outcome.unwrap_or_else(|error| ReconcileResult {
                record: failed_on.clone(),
                ok: false,
                status: None,
                message: error.to_string(),
            })));
        }
    });
    view! {
        <li data-released=payment.id.clone() class:alarm=unresolved>
            <code>{payment.id.clone()}</code>
            " declined and released "
            <Time at=payment.released_at />
            {payment
                .late_charge_id
                .map(|charge| format!(": the provider charged it after all ({charge})"))}
            {match payment.late_charge_resolved {
                Some(resolution) => {
                    view! {
                        <span data-late-charge="resolved">
                            {format!("; refunded: “{}”, said {} ", resolution.reference, resolution.by)}
                            <Time at=resolution.at />
                        </span>
                    }
                        .into_any()
                }
                None if unresolved && role >= OperatorRole::Operator => {
                    view! {
                        <span data-late-charge="unresolved">"; refund it:"</span>
                        <LateChargeRefund record=record.clone() payment_id=payment.id.clone() applied />
                        <span>"or, once refunded at the provider by other means:"</span>
                        <TextField
                            label="Refund reference (goes into the audit log)"
                            name="reference"
                            value=reference
                        />
                        <button
                            type="button"
                            class="button"
                            disabled=move || !reason_given(reference) || resolve.pending().get()
                            on:click=move |_| {
                                resolve.dispatch(reference.get_untracked());
                            }
                        >
                            "Mark refunded"
                        </button>
                    }
                        .into_any()
                }
                None if unresolved => view! { <span data-late-charge="unresolved">"; refund it"</span> }.into_any(),
                None => ().into_any(),
            }}
        </li>
    }
}

/// The guarded refund of a late charge: a preview of what the provider will be asked, a typed
/// reason, then the refund (through create_refund, under a key derived from the charge, so a
/// second click or operator cannot refund twice).
#[component]
fn LateChargeRefund(
    record: RecordRef,
    payment_id: String,
    applied: WriteSignal<Option<ReconcileResult>>,
) -> impl IntoView {
    let target = (record.clone(), payment_id.clone());
    let preview = Action::new(move |(): &()| {
        let (record, payment_id) = target.clone();
        preview_late_charge_refund(record, payment_id)
    });
    let reason = RwSignal::new(String::new());
    let target = (record.clone(), payment_id);
    let refund = Action::new(move |reason: &String| {
        let (record, payment_id) = target.clone();
        refund_late_charge(record, payment_id, reason.clone())
    });
    Effect::new(move |_| {
        if let Some(outcome) = refund.value().get() {
            applied.set(Some(outcome.unwrap_or_else(|error| ReconcileResult {
                record: record.clone(),
                ok: false,
                status: None,
                message: error.to_string(),
            })));
        }
    });
    view! {
        <div class="late-charge-refund" role="group" aria-label="Refund the late charge">
            <button type="button" class="button" on:click=move |_| { preview.dispatch(()); }>
                "Preview the refund"
            </button>
            {move || {
                preview
                    .value()
                    .get()
                    .map(|previewed| match previewed {
                        Err(error) => view! { <p class="error" role="alert">{error.to_string()}</p> }.into_any(),
                        Ok(previewed) => {
                            view! {
                                <div data-refund-preview=previewed.key.clone()>
                                    <ul class="changes">
                                        {previewed.steps.into_iter().map(|step| view! { <li>{step}</li> }).collect_view()}
                                    </ul>
                                    <ReasonAndApply
                                        reason
                                        pending=refund.pending()
                                        label="Refund"
                                        on_apply=move || {
                                            refund.dispatch(reason.get_untracked());
                                        }
                                    />
                                </div>
                            }
                                .into_any()
                        }
                    })
            }}
        </div>
    }
}
