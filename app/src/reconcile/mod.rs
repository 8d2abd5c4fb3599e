//! Guarded reconciliation: a read-only preview that asks the provider and lists, for each
//! action its answer allows, exactly what applying changes; then a chosen action and a typed
//! reason; then apply, which the server re-checks (record version, provider answer) and
//! audits in the same transaction.

pub mod api;
pub mod model;

use crate::reconcile::api::{apply_reconcile, preview_reconcile};
use crate::reconcile::model::{ReconcilePreview, ReconcileResult};
use crate::records::model::RecordRef;
use crate::widgets::{ActionError, ReasonAndApply, take_focus};
use domain::recovery::ProviderEvidence;
use domain::recovery::ReconcileAction;
use domain::scope::Operation;
use leptos::prelude::*;

/// What the provider said about the record's charge (a payment) or refund (a refund).
pub fn evidence_text(record: &RecordRef, evidence: &ProviderEvidence) -> String {
    let refund = record.known_operation() == Some(Operation::CreateRefund);
    match evidence {
        ProviderEvidence::Charged { charge_id, status } if refund => {
            format!("the provider has refund {charge_id}: {status}")
        }
        ProviderEvidence::Charged { charge_id, status } => {
            format!("the provider has charge {charge_id}: {status}")
        }
        ProviderEvidence::NoCharge if refund => {
            "the provider has no refund under this refund's key".to_owned()
        }
        ProviderEvidence::NoCharge => "the provider has no charge for this payment".to_owned(),
        ProviderEvidence::Unreachable { problem } => format!("the provider did not answer: {problem}"),
    }
}

/// The options of a preview, as radio buttons (the first chosen), each with exactly what it
/// changes; or why nothing can be applied.
#[component]
fn OptionsView(preview: ReconcilePreview, chosen: RwSignal<Option<ReconcileAction>>) -> impl IntoView {
    chosen.set(preview.options.first().map(|option| option.action));
    let nothing_to_choose = preview.options.is_empty();
    // The dialog just opened: the keyboard goes to its first choice.
    let first_choice = NodeRef::<leptos::html::Input>::new();
    take_focus(first_choice, true);
    view! {
        <p data-evidence>{evidence_text(&preview.record, &preview.evidence)}</p>
        {preview.blocked.map(|blocked| view! { <p data-blocked>{blocked}</p> })}
        <fieldset class="options" hidden=nothing_to_choose>
            <legend>"Applying will:"</legend>
            {preview
                .options
                .into_iter()
                .enumerate()
                .map(|(index, option)| {
                    let action = option.action;
                    let choice = if index == 0 { first_choice } else { NodeRef::new() };
                    view! {
                        <label class="option">
                            <input
                                type="radio"
                                name="reconcile-action"
                                node_ref=choice
                                prop:checked=move || chosen.get() == Some(action)
                                on:change=move |_| chosen.set(Some(action))
                            />
                            <strong>{action_title(action)}</strong>
                            <ul class="changes">
                                {option.changes.into_iter().map(|change| view! { <li>{change}</li> }).collect_view()}
                            </ul>
                        </label>
                    }
                })
                .collect_view()}
        </fieldset>
    }
}

#[component]
pub fn ReconcilePanel(record: RecordRef, applied: WriteSignal<Option<ReconcileResult>>) -> impl IntoView {
    let preview = Action::new(|record: &RecordRef| preview_reconcile(record.clone()));
    let chosen = RwSignal::new(None::<ReconcileAction>);
    let apply = Action::new(move |(preview, reason): &(ReconcilePreview, String)| {
        let preview = preview.clone();
        let reason = reason.clone();
        let action = chosen.get_untracked();
        async move {
            let action = action.ok_or_else(|| ServerFnError::new("nothing can be applied"))?;
            apply_reconcile(preview.record, preview.version, action, reason).await
        }
    });
    let reason = RwSignal::new(String::new());
    // A result outlives this panel (the record page reloads and may no longer offer it).
    Effect::new(move |_| {
        if let Some(Ok(result)) = apply.value().get() {
            applied.set(Some(result));
        }
    });
    view! {
        <section class="panel reconcile" role="dialog" aria-labelledby="reconcile-title" aria-modal="false">
            <h2 id="reconcile-title">"Reconcile with the provider"</h2>
            <button type="button" class="button" on:click=move |_| { preview.dispatch(record.clone()); }>
                "Preview"
            </button>
            {move || {
                preview
                    .value()
                    .get()
                    .map(|result| match result {
                        Err(error) => view! { <p class="error" role="alert">{error.to_string()}</p> }.into_any(),
                        Ok(previewed) => {
                            let can_apply = !previewed.options.is_empty();
                            let for_apply = previewed.clone();
                            view! {
                                <div class="preview" data-preview>
                                    <OptionsView preview=previewed chosen />
                                    <Show when=move || can_apply>
                                        <ReasonAndApply
                                            reason
                                            pending=apply.pending()
                                            label="Apply"
                                            on_apply={
                                                let for_apply = for_apply.clone();
                                                move || {
                                                    apply.dispatch((for_apply.clone(), reason.get_untracked()));
                                                }
                                            }
                                        />
                                    </Show>
                                </div>
                            }
                                .into_any()
                        }
                    })
            }}
            <ActionError action=apply />
        </section>
    }
}

/// What an action is called on the console's buttons and in its lists.
pub fn action_title(action: ReconcileAction) -> &'static str {
    match action {
        ReconcileAction::ApplyProviderResult => "Apply the provider's result",
        ReconcileAction::RetryCharge => "Send it again with the same provider key",
        ReconcileAction::MarkFailedAndReleaseKey => "Mark failed and release the key",
    }
}
