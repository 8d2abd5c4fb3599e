use super::overrides::OverridesPanel;
use super::reconcile::{action_title, evidence_text};
use super::widgets::{ActionError, Loading, Panel, ReasonAndApply, StatusBadge, Time};
use crate::api::{bulk_preview, get_bulk_job, get_recovery_queue, start_bulk_reconcile, whoami};
use crate::dto::{BulkJobView, ReconcilePreview, RecordRef};
use domain::operator::OperatorRole;
use leptos::prelude::*;

/// Records needing attention: unknown outcomes (those the worker gave up on marked) and
/// in-progress records whose owner died. Operators select records, preview them (the set is
/// frozen then: exactly these ids, each at the version previewed), give one reason, apply;
/// each record reports its own result.
#[component]
pub fn RecoveryPage() -> impl IntoView {
    let (refreshes, set_refreshes) = signal(0_u32);
    let queue = Resource::new(move || refreshes.get(), |_| get_recovery_queue());
    let operator = Resource::new(|| (), |_| whoami());
    let selected = RwSignal::new(Vec::<RecordRef>::new());
    let preview = Action::new(|records: &Vec<RecordRef>| bulk_preview(records.clone()));
    let apply = Action::new(|(previews, reason): &(Vec<ReconcilePreview>, String)| {
        let frozen = previews
            .iter()
            .filter_map(|preview| {
                preview
                    .options
                    .first()
                    .map(|option| (preview.record.clone(), preview.version, option.action))
            })
            .collect();
        start_bulk_reconcile(frozen, reason.clone())
    });
    let reason = RwSignal::new(String::new());
    // The job runs on the server; its progress is read again until it is finished.
    let job = RwSignal::new(None::<BulkJobView>);
    let poll = Action::new(|id: &String| get_bulk_job(id.clone()));
    Effect::new(move |_| {
        if let Some(Ok(started)) = apply.value().get() {
            job.set(Some(started));
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(Some(progress))) = poll.value().get() {
            if progress.finished_at.is_some() {
                *set_refreshes.write() += 1;
            }
            job.set(Some(progress));
        }
    });
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        if let Some(unfinished) = job.get().filter(|job| job.finished_at.is_none()) {
            set_timeout(
                move || {
                    poll.dispatch(unfinished.id);
                },
                std::time::Duration::from_millis(500),
            );
        }
    });
    view! {
        <Panel title="Recovery" heading="Needs attention">
            <Loading>
                {move || Suspend::new(async move {
                    let can_act = operator.await.map(|operator| operator.role >= OperatorRole::Operator).unwrap_or(false);
                    queue.await.map(|rows| {
                        if rows.is_empty() {
                            return view! { <p class="muted">"Nothing needs attention."</p> }.into_any();
                        }
                        view! {
                            <table class="records">
                                <thead>
                                    <tr>
                                        <th scope="col">{can_act.then_some("Select")}</th>
                                        <th scope="col">"Key"</th>
                                        <th scope="col">"Status"</th>
                                        <th scope="col">"Created"</th>
                                        <th scope="col" class="num">"Recovery tries"</th>
                                    </tr>
                                </thead>
                                <tbody>
                                    {rows.into_iter().map(|row| {
                                        let record = row.record.clone();
                                        let label = format!("select {}", row.record.key);
                                        view! {
                                            <tr data-key=row.record.key.clone()>
                                                <td>
                                                    {can_act.then(|| {
                                                        let record = record.clone();
                                                        view! {
                                                            <input type="checkbox" aria-label=label on:change=move |event| {
                                                                let checked = event_target_checked(&event);
                                                                selected.update(|selected| {
                                                                    selected.retain(|other| *other != record);
                                                                    if checked { selected.push(record.clone()); }
                                                                });
                                                            } />
                                                        }
                                                    })}
                                                </td>
                                                <th scope="row"><a href=row.record.href()>{row.record.key.clone()}</a></th>
                                                <td><StatusBadge status=row.status /></td>
                                                <td><Time at=row.created_at /></td>
                                                <td class="num">{row.recovery_attempts}</td>
                                            </tr>
                                        }
                                    }).collect_view()}
                                </tbody>
                            </table>
                            {can_act.then(|| view! {
                                <button type="button" class="button" disabled=move || selected.get().is_empty()
                                    on:click=move |_| { preview.dispatch(selected.get_untracked()); }>
                                    {move || format!("Preview {} selected", selected.get().len())}
                                </button>
                            })}
                        }.into_any()
                    })
                })}
            </Loading>
            {move || preview.value().get().map(|result| match result {
                Err(error) => view! { <p class="error" role="alert">{error.to_string()}</p> }.into_any(),
                Ok(previews) => {
                    let frozen = previews.clone();
                    view! {
                        <div class="preview" role="dialog" aria-label="Bulk reconciliation" data-bulk-preview>
                            <p>{format!("Exactly these {} records, each at the version shown:", previews.len())}</p>
                            <ul>
                                {previews.into_iter().map(|preview| view! {
                                    <li data-key=preview.record.key.clone()>
                                        <code>{preview.record.key.clone()}</code>
                                        {format!(
                                            " (version {}): {}; {}",
                                            preview.version,
                                            evidence_text(&preview.record, &preview.evidence),
                                            preview.options.first().map_or("nothing can be applied", |option| action_title(option.action)),
                                        )}
                                    </li>
                                }).collect_view()}
                            </ul>
                            <ReasonAndApply reason pending=apply.pending() label="Apply to these records" focused=true
                                on_apply=move || { apply.dispatch((frozen.clone(), reason.get_untracked())); } />
                        </div>
                    }.into_any()
                }
            })}
            <ActionError action=apply />
            {move || job.get().map(|job| view! { <BulkProgress job /> })}
        </Panel>
        <OverridesPanel />
    }
}

/// A bulk job's progress, and each record's result as it comes.
#[component]
fn BulkProgress(job: BulkJobView) -> impl IntoView {
    let done = job.done();
    let total = job.items.len();
    let finished = job.finished_at.is_some();
    view! {
        <div class="bulk-job" data-bulk-job=job.id.clone()>
            <p role="status" data-bulk-progress=format!("{done}/{total}")>
                {if finished {
                    format!("Finished: {done} of {total} records")
                } else {
                    format!("Running in the background: {done} of {total} records done")
                }}
            </p>
            <progress max=total value=done></progress>
            <ul class="results" data-bulk-results=done.to_string()>
                {job
                    .items
                    .into_iter()
                    .filter_map(|item| {
                        let action = action_title(item.action);
                        item.result
                            .map(|result| {
                                view! {
                                    <li data-ok=result.ok.to_string()>
                                        <code>{result.record.key.clone()}</code>
                                        {format!(
                                            " ({action}): {}{}",
                                            result.message,
                                            result.status.map(|status| format!(" ({status})")).unwrap_or_default(),
                                        )}
                                    </li>
                                }
                            })
                    })
                    .collect_view()}
            </ul>
        </div>
    }
}
