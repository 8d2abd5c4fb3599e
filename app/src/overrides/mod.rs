//! Overrides without the provider's evidence (for when the provider cannot answer, or is
//! wrong): an admin asks, with the outcome their evidence shows and a reason; a second admin
//! approves (which applies it at once, if the record is still as it was) or rejects. The
//! server enforces both roles, the second person, and the record's version.

pub mod api;
pub mod model;

use crate::overrides::api::{decide_override, list_overrides, request_override};
use crate::overrides::model::OverrideRequestView;
use crate::records::model::RecordRef;
use crate::sign_in::api::whoami;
use crate::widgets::{ActionError, Loading, ReasonAndApply, ReasonField, TextField, Time, reason_given};
use domain::operator::OperatorRole;
use domain::recovery::OverrideOutcome;
use domain::recovery::OverrideState;
use leptos::prelude::*;

/// What the admin's evidence shows, before the charge id is filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Vouched {
    Charged,
    Declined,
    NotCharged,
}

impl Vouched {
    const ALL: [Vouched; 3] = [Vouched::Charged, Vouched::Declined, Vouched::NotCharged];

    const fn title(self) -> &'static str {
        match self {
            Vouched::Charged => "The provider charged it (settle as authorised)",
            Vouched::Declined => "The provider declined it (settle as declined)",
            Vouched::NotCharged => "The provider never charged it (mark failed, release the key)",
        }
    }

    fn outcome(self, charge_id: String) -> OverrideOutcome {
        match self {
            Vouched::Charged => OverrideOutcome::Charged { charge_id },
            Vouched::Declined => OverrideOutcome::Declined { charge_id },
            Vouched::NotCharged => OverrideOutcome::NotCharged,
        }
    }
}

/// An admin's request, on the record page, bound to the version shown there.
#[component]
pub fn OverrideRequestForm(record: RecordRef, version: i64) -> impl IntoView {
    let vouched = RwSignal::new(Vouched::Charged);
    let charge_id = RwSignal::new(String::new());
    let reason = RwSignal::new(String::new());
    let request = Action::new(move |_: &()| {
        let outcome = vouched
            .get_untracked()
            .outcome(charge_id.get_untracked().trim().to_owned());
        request_override(record.clone(), version, outcome, reason.get_untracked())
    });
    view! {
        <section class="panel override" aria-labelledby="override-title">
            <h2 id="override-title">"Override without the provider's evidence"</h2>
            <p class="muted">
                "Admins only, for when the provider cannot answer or is wrong. A second admin must approve; "
                "it applies only if the record is still at version " {version} "."
            </p>
            <fieldset class="options">
                <legend>"What your evidence shows"</legend>
                {Vouched::ALL
                    .into_iter()
                    .map(|choice| {
                        view! {
                            <label class="option">
                                <input
                                    type="radio"
                                    name="override-outcome"
                                    prop:checked=move || vouched.get() == choice
                                    on:change=move |_| vouched.set(choice)
                                />
                                {choice.title()}
                            </label>
                        }
                    })
                    .collect_view()}
            </fieldset>
            <TextField
                label="Provider charge id"
                name="charge-id"
                value=charge_id
                hidden=Signal::derive(move || vouched.get() == Vouched::NotCharged)
            />
            <ReasonAndApply
                reason
                pending=request.pending()
                label="Ask a second admin"
                on_apply=move || {
                    request.dispatch(());
                }
            />
            {move || {
                request
                    .value()
                    .get()
                    .map(|result| match result {
                        Ok(requested) => {
                            view! {
                                <p class="ok" role="status" data-override-requested=requested.id.clone()>
                                    {format!("Requested ({}): waiting for a second admin.", requested.id)}
                                </p>
                            }
                                .into_any()
                        }
                        Err(error) => view! { <p class="error" role="alert">{error.to_string()}</p> }.into_any(),
                    })
            }}
        </section>
    }
}

/// Override requests: pending first (a second admin decides them here), then decided ones.
#[component]
pub fn OverridesPanel() -> impl IntoView {
    let (decisions, set_decisions) = signal(0_u32);
    let requests = Resource::new(move || decisions.get(), |_| list_overrides());
    let operator = Resource::new(|| (), |_| whoami());
    view! {
        <section class="panel" aria-labelledby="overrides-title">
            <h2 id="overrides-title">"Overrides awaiting a second admin"</h2>
            <Loading>
                {move || Suspend::new(async move {
                    let me = operator.await.ok();
                    requests
                        .await
                        .map(|requests| {
                            if requests.is_empty() {
                                return view! { <p class="muted">"No override was requested."</p> }.into_any();
                            }
                            view! {
                                <ul class="overrides">
                                    {requests
                                        .into_iter()
                                        .map(|request| {
                                            let can_decide = me.as_ref().is_some_and(|me| {
                                                me.role >= OperatorRole::Admin && me.username != request.requested_by
                                            }) && request.state == OverrideState::Pending;
                                            view! { <OverrideItem request can_decide decided=set_decisions /> }
                                        })
                                        .collect_view()}
                                </ul>
                            }
                                .into_any()
                        })
                })}
            </Loading>
        </section>
    }
}

#[component]
fn OverrideItem(request: OverrideRequestView, can_decide: bool, decided: WriteSignal<u32>) -> impl IntoView {
    let id = request.id.clone();
    let reason = RwSignal::new(String::new());
    let decide =
        Action::new(move |approve: &bool| decide_override(id.clone(), *approve, reason.get_untracked()));
    Effect::new(move |_| {
        if let Some(Ok(_)) = decide.value().get() {
            *decided.write() += 1;
        }
    });
    let state = request.state;
    view! {
        <li data-override=request.id.clone() data-state=format!("{state:?}")>
            <p>
                <a href=request.record.href()><code>{request.record.key.clone()}</code></a>
                {format!(
                    " at version {}: {} — asked by {}: “{}” (",
                    request.record_version,
                    request.outcome,
                    request.requested_by,
                    request.reason,
                )}
                <Time at=request.requested_at.clone() />
                ")"
            </p>
            <p>
                <strong>{format!("{state:?}")}</strong>
                {match (request.decided_by, request.decision_reason) {
                    (Some(by), reason) => Some(format!(" by {by}: “{}”", reason.unwrap_or_default())),
                    // Nobody decided: the request expired unanswered.
                    (None, Some(reason)) => Some(format!(": {reason}")),
                    (None, None) => None,
                }}
                {request.result.map(|result| format!("; {result}"))}
            </p>
            {can_decide
                .then(|| {
                    view! {
                        <ReasonField reason />
                        <button
                            type="button"
                            class="button primary"
                            disabled=move || !reason_given(reason) || decide.pending().get()
                            on:click=move |_| {
                                decide.dispatch(true);
                            }
                        >
                            "Approve and apply"
                        </button>
                        " "
                        <button
                            type="button"
                            class="button"
                            disabled=move || !reason_given(reason) || decide.pending().get()
                            on:click=move |_| {
                                decide.dispatch(false);
                            }
                        >
                            "Reject"
                        </button>
                    }
                })}
            <ActionError action=decide />
        </li>
    }
}
