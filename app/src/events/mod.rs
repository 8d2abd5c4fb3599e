use crate::widgets::Head;
pub mod api;
pub mod model;

use crate::events::api::{get_events, redrive_events};
use crate::events::model::DeadLetter;
use crate::sign_in::api::whoami;
use crate::widgets::{Loading, Panel, ReasonAndApply, Time, age};
use domain::operator::OperatorRole;
use leptos::prelude::*;

/// The outbox and its consumers: backlog, how far each consumer is behind, and dead letters,
/// which an operator re-drives with the same preview, reason and audit as a reconciliation.
#[component]
pub fn EventsPage() -> impl IntoView {
    let (refreshes, set_refreshes) = signal(0_u32);
    let overview = Resource::new(move || refreshes.get(), |_| get_events());
    let operator = Resource::new(|| (), |_| whoami());
    let selected = RwSignal::new(Vec::<DeadLetter>::new());
    let previewed = RwSignal::new(None::<Vec<DeadLetter>>);
    let reason = RwSignal::new(String::new());
    let redrive = Action::new(|(letters, reason): &(Vec<DeadLetter>, String)| {
        let frozen = letters
            .iter()
            .map(|letter| (letter.event_id.clone(), letter.dead_at.clone()))
            .collect();
        redrive_events(frozen, reason.clone())
    });
    Effect::new(move |_| {
        if redrive.value().get().is_some() {
            *set_refreshes.write() += 1;
        }
    });
    view! {
        <Panel title="Events" heading="Events">
            <Loading>
                {move || Suspend::new(async move {
                    let can_act = operator.await.is_ok_and(|operator| operator.role >= OperatorRole::Operator);
                    overview.await.map(|overview| {
                        let dead = overview.dead_letters.len();
                        view! {
                            <div class="gauges">
                                <div class="gauge" data-gauge="outbox_backlog">
                                    <span class="gauge-label">"Unpublished"</span>
                                    <strong class="num gauge-value">{overview.unpublished}</strong>
                                    <span class="muted">{format!("oldest {}", age(overview.oldest_unpublished_secs))}</span>
                                </div>
                                <div class="gauge" class:alarm=(dead > 0) data-gauge="dead_letters">
                                    <span class="gauge-label">"Dead letters"</span>
                                    <strong class="num gauge-value">{dead}</strong>
                                    <span class="muted">"need an operator"</span>
                                </div>
                                {overview.consumers.into_iter().map(|consumer| view! {
                                    <div class="gauge" data-gauge=format!("lag_{}", consumer.consumer)>
                                        <span class="gauge-label">{format!("{} lag", consumer.consumer)}</span>
                                        <strong class="num gauge-value">{consumer.lag}</strong>
                                        <span class="muted">"published, not processed (24 h)"</span>
                                    </div>
                                }).collect_view()}
                            </div>
                            <h2>"Dead letters"</h2>
                            {if dead == 0 {
                                view! { <p class="muted">"None."</p> }.into_any()
                            } else {
                                view! {
                                    <table class="records">
                                        <Head
                                            select=can_act
                                            columns=&["Event", "Type", "Payment", "Attempts", "Last error", "Dead since"]
                                            numbers=&["Attempts"]
                                        />
                                        <tbody>
                                            {overview.dead_letters.into_iter().map(|letter| {
                                                let label = format!("select {}", letter.event_id);
                                                let chosen = letter.clone();
                                                view! {
                                                    <tr data-event=letter.event_id.clone()>
                                                        <td>{can_act.then(|| view! {
                                                            <input type="checkbox" aria-label=label on:change=move |event| {
                                                                let checked = event_target_checked(&event);
                                                                selected.update(|selected| {
                                                                    selected.retain(|other| other.event_id != chosen.event_id);
                                                                    if checked { selected.push(chosen.clone()); }
                                                                });
                                                            } />
                                                        })}</td>
                                                        <th scope="row"><code>{letter.event_id.clone()}</code></th>
                                                        <td>{letter.event_type}</td>
                                                        <td>{letter.payment_id}</td>
                                                        <td class="num">{letter.attempts}</td>
                                                        <td>{letter.last_error.unwrap_or_default()}</td>
                                                        <td><Time at=letter.dead_at /></td>
                                                    </tr>
                                                }
                                            }).collect_view()}
                                        </tbody>
                                    </table>
                                    {can_act.then(|| view! {
                                        <button type="button" class="button" disabled=move || selected.get().is_empty()
                                            on:click=move |_| previewed.set(Some(selected.get_untracked()))>
                                            {move || format!("Preview re-drive of {}", selected.get().len())}
                                        </button>
                                    })}
                                }.into_any()
                            }}
                        }
                    })
                })}
            </Loading>
            {move || previewed.get().map(|letters| {
                let frozen = letters.clone();
                view! {
                    <div class="preview" role="dialog" aria-label="Re-drive dead letters">
                        <p>{format!("Exactly these {} events go back to the publisher (each only if still dead since the time shown):", letters.len())}</p>
                        <ul>{letters.into_iter().map(|letter| view! {
                            <li><code>{letter.event_id}</code>{format!(" {} of {}, dead since {}", letter.event_type, letter.payment_id, letter.dead_at)}</li>
                        }).collect_view()}</ul>
                        <ReasonAndApply reason pending=redrive.pending() label="Re-drive" focused=true
                            on_apply=move || { redrive.dispatch((frozen.clone(), reason.get_untracked())); } />
                    </div>
                }
            })}
            {move || redrive.value().get().map(|result| match result {
                Err(error) => view! { <p class="error" role="alert">{error.to_string()}</p> }.into_any(),
                Ok(results) => {
                    let count = results.len().to_string();
                    view! {
                        <ul class="results" data-redrive-results=count>
                            {results.into_iter().map(|result| view! {
                                <li data-ok=result.ok.to_string()><code>{result.event_id}</code>{format!(": {}", result.message)}</li>
                            }).collect_view()}
                        </ul>
                    }.into_any()
                }
            })}
        </Panel>
    }
}
