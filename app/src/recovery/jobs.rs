//! Bulk jobs: one job's panel and page, and the list of jobs.

use crate::reconcile::action_title;
use crate::recovery::PROGRESS_EVERY;
use crate::recovery::api::apply_bulk_job;
use crate::recovery::api::control_bulk_job;
use crate::recovery::api::get_bulk_job;
use crate::recovery::api::list_bulk_jobs;
use crate::recovery::evidence_words;
use crate::recovery::model::BulkGroupView;
use crate::recovery::model::BulkJobView;
use crate::recovery::model::GroupChoice;
use crate::recovery::while_visible;
use crate::sign_in::api::whoami;
use crate::widgets::Head;
use crate::widgets::{ActionError, Loading, Panel, ReasonField, Time, reason_given};
use domain::operator::OperatorRole;
use domain::recovery::{BulkControl, BulkJobState, ReconcileAction};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

/// A bulk job: previewing (progress), previewed (its groups, to keep or leave out, a name, a
/// reason, apply), running or paused (progress, pause, resume, abort), ended; the first
/// items with their results, and the results file.
#[component]
pub fn BulkJobPanel(#[prop(into)] id: String) -> impl IntoView {
    let (reads, set_reads) = signal(0_u32);
    let job_id = id.clone();
    let job = Resource::new(move || reads.get(), move |_| get_bulk_job(job_id.clone()));
    let operator = Resource::new(|| (), |_| whoami());
    let watching = RwSignal::new(false);
    // Progress is read again while the job previews or runs.
    while_visible(PROGRESS_EVERY, watching, move || {
        let moving = job
            .get_untracked()
            .and_then(Result::ok)
            .flatten()
            .is_some_and(|job| matches!(job.state, BulkJobState::Previewing | BulkJobState::Running));
        if moving {
            *set_reads.write() += 1;
        }
    });
    let after_change = move || *set_reads.write() += 1;
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading the job…"</p> }>
            {move || Suspend::new(async move {
                let can_act = operator.await.is_ok_and(|operator| operator.role >= OperatorRole::Operator);
                match job.await {
                    Ok(Some(job)) => view! { <JobSummary job can_act after_change /> }.into_any(),
                    Ok(None) => view! { <p class="error">"No such bulk job."</p> }.into_any(),
                    Err(error) => view! { <p class="error" role="alert">{error.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn JobSummary(
    job: BulkJobView,
    can_act: bool,
    after_change: impl Fn() + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let title = if job.name.is_empty() {
        format!("Bulk job {}", job.id)
    } else {
        job.name.clone()
    };
    let state = job.state;
    let progress = match state {
        BulkJobState::Previewing => format!(
            "Asking the provider: {} of {} records previewed",
            job.previewed, job.items
        ),
        BulkJobState::Previewed => format!("{} records previewed: keep the groups to apply", job.items),
        applying => {
            let (stage, after) = match applying {
                BulkJobState::Running => ("Applying", ""),
                BulkJobState::Paused => ("Paused", ""),
                BulkJobState::Aborted => ("Aborted", "; the rest untouched"),
                _ => ("Finished", ""),
            };
            format!(
                "{stage}: {} of {} done, {} applied{after}",
                job.done, job.included, job.ok
            )
        }
    };
    let (value, max) = match state {
        BulkJobState::Previewing | BulkJobState::Previewed => (job.previewed, job.items),
        _ => (job.done, job.included),
    };
    let controls = can_act.then(|| view! { <JobControls id=job.id.clone() state after_change /> });
    let applying = (can_act && state == BulkJobState::Previewed)
        .then(|| view! { <ApplyJob id=job.id.clone() groups=job.groups.clone() after_change /> });
    let groups = (state != BulkJobState::Previewed && !job.groups.is_empty())
        .then(|| view! { <GroupsTable groups=job.groups.clone() /> });
    let results = (job.applied_at.is_some()).then(|| view! { <a class="button" href=job.results_href() download="" data-results>"Download the results (CSV)"</a> });
    view! {
        <div class="bulk-job panel" data-bulk-job=job.id.clone() data-state=state.as_str()>
            <h2><a href=job.href()>{title}</a></h2>
            <p class="muted">{job.selection.clone()} {format!("; selected by {}", job.requested_by)}
                {job.applied_by.clone().map(|by| format!("; applied by {by}: {}", job.reason))}</p>
            <p role="status" data-bulk-progress=format!("{value}/{max}")>{progress}</p>
            <progress max=max value=value></progress>
            {controls}
            {applying}
            {groups}
            {results}
            <ItemsList items=job.first_items.clone() />
        </div>
    }
}

/// Pause, resume, abort: whichever the state allows.
#[component]
fn JobControls(
    id: String,
    state: BulkJobState,
    after_change: impl Fn() + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let control =
        Action::new(move |(id, control): &(String, BulkControl)| control_bulk_job(id.clone(), *control));
    Effect::new(move |_| {
        if let Some(Ok(_)) = control.value().get() {
            after_change();
        }
    });
    let button = move |which: BulkControl, label: &'static str| {
        let (allowed, _) = which.transition();
        let id = id.clone();
        allowed.contains(&state).then(|| {
            view! {
                <button type="button" class="button" on:click=move |_| { control.dispatch((id.clone(), which)); }>{label}</button>
            }
        })
    };
    view! {
        <div class="job-controls">
            {button(BulkControl::Pause, "Pause")}
            {button(BulkControl::Resume, "Resume")}
            {button(BulkControl::Abort, "Abort")}
        </div>
        <ActionError action=control />
    }
}

/// A previewed job's groups, each kept with an action or left out, then a name, a reason and
/// apply.
#[component]
fn ApplyJob(
    id: String,
    groups: Vec<BulkGroupView>,
    after_change: impl Fn() + Copy + Send + Sync + 'static,
) -> impl IntoView {
    // Each actionable group starts kept with its proposed action.
    let choices: Vec<(BulkGroupView, RwSignal<Option<ReconcileAction>>)> = groups
        .iter()
        .map(|group| (group.clone(), RwSignal::new(group.action)))
        .collect();
    let name = RwSignal::new(String::new());
    let reason = RwSignal::new(String::new());
    let apply = Action::new(
        move |(id, name, reason, choices): &(String, String, String, Vec<GroupChoice>)| {
            apply_bulk_job(id.clone(), name.clone(), reason.clone(), choices.clone())
        },
    );
    Effect::new(move |_| {
        if let Some(Ok(_)) = apply.value().get() {
            after_change();
        }
    });
    let collected = choices.clone();
    let chosen = move || {
        collected
            .iter()
            .filter(|(group, _)| group.action.is_some())
            .map(|(group, choice)| GroupChoice {
                operation: group.operation.clone(),
                evidence: group.evidence,
                action: choice.get_untracked(),
            })
            .collect::<Vec<_>>()
    };
    let counted = choices.clone();
    let kept = Memo::new(move |_| {
        counted
            .iter()
            .filter(|(_, choice)| choice.get().is_some())
            .map(|(group, _)| group.items)
            .sum::<u64>()
    });
    view! {
        <div class="preview" role="dialog" aria-label="Bulk reconciliation" data-bulk-preview>
            <table class="groups">
                <Head columns=&["Records", "The provider says", "Apply"] numbers=&["Records"] />
                <tbody>
                    {choices.into_iter().map(|(group, choice)| {
                        let key = format!("{}/{}", group.operation, group.evidence.as_str());
                        let says = format!("{}: {}", group.operation, evidence_words(group.operation.parse().ok(), group.evidence));
                        let label = format!("apply to {key}");
                        let offered = group.offered.clone();
                        let apply_cell = if group.action.is_none() {
                            view! { <span class="muted">"skipped: nothing can be applied"</span> }.into_any()
                        } else {
                            view! {
                                <select aria-label=label on:change=move |event| {
                                    let picked = event_target_value(&event);
                                    choice.set(offered.iter().copied().find(|action| action.as_str() == picked));
                                }>
                                    {group.offered.iter().map(|action| {
                                        let action = *action;
                                        view! { <option value=action.as_str() selected=move || choice.get() == Some(action)>{action_title(action)}</option> }
                                    }).collect_view()}
                                    <option value="" selected=move || choice.get().is_none()>"Leave out"</option>
                                </select>
                            }.into_any()
                        };
                        view! {
                            <tr data-bulk-group=key data-items=group.items.to_string()>
                                <td class="num">{group.items}</td>
                                <td>{says}</td>
                                <td>{apply_cell}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            <p role="status" data-kept=move || kept.get().to_string()>{move || format!("{} records will be applied", kept.get())}</p>
            <label>"Job name " <input type="text" maxlength="100" prop:value=move || name.get() on:input=move |event| name.set(event_target_value(&event)) /></label>
            <ReasonField reason />
            <button type="button" class="button primary"
                disabled=move || apply.pending().get() || name.get().trim().is_empty() || !reason_given(reason) || kept.get() == 0
                on:click=move |_| { apply.dispatch((id.clone(), name.get_untracked(), reason.get_untracked(), chosen())); }>
                "Apply to the kept groups"
            </button>
            <ActionError action=apply />
        </div>
    }
}

/// A job's groups after its preview: what was applied to each, and how far.
#[component]
fn GroupsTable(groups: Vec<BulkGroupView>) -> impl IntoView {
    view! {
        <table class="groups">
            <Head columns=&["Records", "The provider says", "Action", "Done", "Applied"] numbers=&["Records", "Done", "Applied"] />
            <tbody>
                {groups.into_iter().map(|group| {
                    let action = match (group.action, group.included) {
                        (Some(action), true) => action_title(action).to_owned(),
                        (Some(_), false) => "left out".to_owned(),
                        (None, _) => "skipped: nothing can be applied".to_owned(),
                    };
                    view! {
                        <tr data-bulk-group=format!("{}/{}", group.operation, group.evidence.as_str())>
                            <td class="num">{group.items}</td>
                            <td>{format!("{}: {}", group.operation, evidence_words(group.operation.parse().ok(), group.evidence))}</td>
                            <td>{action}</td>
                            <td class="num">{group.done}</td>
                            <td class="num">{group.ok}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// The first items of a job with their results.
#[component]
fn ItemsList(items: Vec<crate::recovery::model::BulkItemView>) -> impl IntoView {
    let done = items.iter().filter(|item| item.result.is_some()).count();
    view! {
        <ul class="results" data-bulk-results=done.to_string()>
            {items.into_iter().filter_map(|item| {
                item.result.map(|result| view! {
                    <li data-ok=result.ok.to_string()>
                        <a href=result.record.href()><code>{result.record.key.clone()}</code></a>
                        {format!(
                            " ({}): {}{}",
                            item.action.map_or("nothing", action_title),
                            result.message,
                            result.status.map(|status| format!(" ({status})")).unwrap_or_default(),
                        )}
                    </li>
                })
            }).collect_view()}
        </ul>
    }
}

/// Every bulk job, newest first.
#[component]
pub fn BulkJobsPage() -> impl IntoView {
    let jobs = Resource::new(|| (), |_| list_bulk_jobs());
    view! {
        <Panel title="Bulk jobs" heading="Bulk jobs">
            <Loading>
                {move || Suspend::new(async move {
                    jobs.await.map(|jobs| {
                        if jobs.is_empty() {
                            return view! { <p class="muted">"No bulk job yet."</p> }.into_any();
                        }
                        view! {
                            <table class="records jobs">
                                <Head columns=&["Job", "State", "Records", "Done", "Applied", "By", "Created", "Ended"] numbers=&["Records", "Done", "Applied"] />
                                <tbody>
                                    {jobs.into_iter().map(|job| {
                                        let title = if job.name.is_empty() { job.id.clone() } else { job.name.clone() };
                                        view! {
                                            <tr data-job=job.id.clone() data-state=job.state.as_str()>
                                                <th scope="row"><a href=job.href()>{title}</a></th>
                                                <td>{job.state.as_str()}</td>
                                                <td class="num">{job.items}</td>
                                                <td class="num">{job.done}</td>
                                                <td class="num">{job.ok}</td>
                                                <td>{job.applied_by.clone().unwrap_or(job.requested_by.clone())}</td>
                                                <td><Time at=job.created_at.clone() /></td>
                                                <td>{job.finished_at.clone().map(|at| view! { <Time at /> })}</td>
                                            </tr>
                                        }
                                    }).collect_view()}
                                </tbody>
                            </table>
                        }.into_any()
                    })
                })}
            </Loading>
        </Panel>
    }
}

/// One bulk job's page.
#[component]
pub fn BulkJobPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").unwrap_or_default();
    view! {
        <Title text="Bulk job" />
        <section class="panel">
            <h1>"Bulk job"</h1>
            <p><a href="/recovery/jobs">"Every bulk job"</a></p>
        </section>
        {move || view! { <BulkJobPanel id=id() /> }}
    }
}
