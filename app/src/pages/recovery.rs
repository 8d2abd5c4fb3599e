//! The incident day's pages: the recovery queue (every record that needs attention, filtered,
//! ordered and paged on the server, live), bulk reconciliation as a named job (selected on the
//! server, previewed and grouped, applied to the groups kept, paused, aborted, its results
//! downloaded) and the list of jobs.

use super::overrides::OverridesPanel;
use super::reconcile::action_title;
use super::widgets::{
    ActionError, Choice, Loading, Panel, ReasonField, StatusBadge, Time, named, reason_given,
};
use crate::api::{
    apply_bulk_job, control_bulk_job, get_bulk_job, get_recovery_queue, list_bulk_jobs, select_for_bulk,
    whoami,
};
use crate::dto::{BulkGroupView, BulkJobView, BulkSelection, GroupChoice, NextLook, QueueRowView, RecordRef};
use domain::operator::OperatorRole;
use domain::queue::{Attention, QueueOrder, QueueQuery};
use domain::recovery::{
    BulkControl, BulkJobState, EvidenceKind, ProviderEvidence, ReconcileAction, UnknownCause,
};
use domain::scope::Operation;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use strum::VariantArray;

/// How often the queue reads itself again while its tab is visible.
const LIVE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a job's page reads its progress while it previews or runs.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(700);

/// Rows per queue page (the server's).
const QUEUE_PAGE: usize = 50;

/// Why an outcome is unknown, as a sentence.
pub fn cause_text(cause: Option<UnknownCause>) -> String {
    match cause {
        Some(cause) => format!("The provider {}.", cause.words()),
        None => {
            "The provider call's failure was not recorded (a record from before this was kept).".to_owned()
        }
    }
}

/// When the recovery worker looks again, or that it gave up.
pub fn next_look_text(next: &NextLook) -> String {
    match next {
        NextLook::At(at) => format!("The recovery worker looks again at {at}."),
        NextLook::GaveUp(at) => {
            format!("The recovery worker gave up at {at}: only an operator moves it on.")
        }
        NextLook::NextPass => {
            "Its owner is gone: the recovery worker takes it over at its next pass.".to_owned()
        }
    }
}

/// What the provider says, short, for a table cell or a group.
fn evidence_words(operation: &str, kind: EvidenceKind) -> &'static str {
    let refund = operation == Operation::CreateRefund.as_str();
    match (kind, refund) {
        (EvidenceKind::Succeeded, false) => "the provider has a succeeded charge",
        (EvidenceKind::Succeeded, true) => "the provider has a succeeded refund",
        (EvidenceKind::Declined, false) => "the provider has a declined charge",
        (EvidenceKind::Declined, true) => "the provider has a declined refund",
        (EvidenceKind::NoCharge, false) => "the provider has no charge",
        (EvidenceKind::NoCharge, true) => "the provider has no refund",
        (EvidenceKind::Unreachable, _) => "the provider did not answer",
    }
}

/// The queue's filter from the page's address.
fn query_of(param: impl Fn(&str) -> String) -> QueueQuery {
    QueueQuery {
        tenant: param("tenant"),
        operation: param("operation"),
        attention: param("attention"),
        min_age_minutes: param("min_age_minutes"),
        max_age_minutes: param("max_age_minutes"),
        currency: param("currency"),
        min_amount: param("min_amount"),
        max_amount: param("max_amount"),
        cause: param("cause"),
        evidence: param("evidence"),
        search: param("search"),
        order: param("order"),
        after: param("after"),
    }
}

/// Calls `tick` every `every` while the tab is visible; `live` says whether it is.
fn while_visible(every: std::time::Duration, live: RwSignal<bool>, tick: impl Fn() + Send + Sync + 'static) {
    #[cfg(feature = "hydrate")]
    {
        live.set(!document().hidden());
        if let Ok(handle) = set_interval_with_handle(
            move || {
                let visible = !document().hidden();
                live.set(visible);
                if visible {
                    tick();
                }
            },
            every,
        ) {
            on_cleanup(move || handle.clear());
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (every, live, tick);
}

/// Records needing attention: unknown outcomes and in-progress records whose owner died,
/// filtered and ordered on the server, fifty a page, with the total; live while visible.
/// Operators tick records or select all matching, then work in a bulk job.
#[component]
pub fn RecoveryPage() -> impl IntoView {
    let query = use_query_map();
    let param = move |name: &str| query.read().get(name).unwrap_or_default();
    let (refreshes, set_refreshes) = signal(0_u32);
    let queue = Resource::new(
        move || (query_of(param), refreshes.get()),
        |(query, _)| get_recovery_queue(query),
    );
    let operator = Resource::new(|| (), |_| whoami());
    let live = RwSignal::new(false);
    while_visible(LIVE_EVERY, live, move || *set_refreshes.write() += 1);
    let selected = RwSignal::new(Vec::<RecordRef>::new());
    let select = Action::new(|selection: &BulkSelection| select_for_bulk(selection.clone()));
    let page_number = move || param("page").parse::<usize>().unwrap_or(1).max(1);

    view! {
        <Panel title="Recovery" heading="Needs attention">
            <p class="live" data-live=move || live.get().to_string()>
                {move || if live.get() { "Live: reads itself every 5 s" } else { "Paused while this tab is hidden" }}
            </p>
            <QueueFilters param />
            // Outside the queue's reads: the live queue re-renders, the job being set up stays.
            {move || select.value().get().and_then(Result::ok).map(|job| view! { <BulkJobPanel id=job.id /> })}
            <Loading>
                {move || Suspend::new(async move {
                    let can_act = operator.await.is_ok_and(|operator| operator.role >= OperatorRole::Operator);
                    queue.await.map(|queue| {
                        let first = (page_number() - 1) * QUEUE_PAGE + 1;
                        let shown = if queue.rows.is_empty() {
                            String::new()
                        } else {
                            format!("; showing {first}-{}", first + queue.rows.len() - 1)
                        };
                        let next = queue.next.clone().map(|cursor| {
                            let mut link = query.read_untracked().clone();
                            link.replace("after", cursor);
                            link.replace("page", (page_number() + 1).to_string());
                            format!("/recovery{}", link.to_query_string())
                        });
                        let first_page = (page_number() > 1).then(|| {
                            let mut link = query.read_untracked().clone();
                            link.remove("after");
                            link.remove("page");
                            format!("/recovery{}", link.to_query_string())
                        });
                        let total = queue.total;
                        let matching = BulkSelection::Matching(Box::new(QueueQuery { after: String::new(), ..query_of(param) }));
                        view! {
                            <p class="summary" role="status" data-queue-total=total.to_string() data-queue-shown=queue.rows.len().to_string()>
                                {format!("{total} need attention{shown}")}
                                " (read at " <Time at=queue.read_at.clone() /> ")"
                            </p>
                            {can_act.then(|| view! {
                                <div class="bulk-actions">
                                    <button type="button" class="button" disabled=total == 0 || select.pending().get()
                                        on:click=move |_| { select.dispatch(matching.clone()); }>
                                        {format!("Select all {total} matching")}
                                    </button>
                                    <button type="button" class="button" disabled=move || selected.get().is_empty()
                                        on:click=move |_| { select.dispatch(BulkSelection::Records(selected.get_untracked())); }>
                                        {move || format!("Preview {} ticked", selected.get().len())}
                                    </button>
                                </div>
                            })}
                            <div class="table-scroll"><QueueTable rows=queue.rows can_act selected /></div>
                            <nav class="pages">
                                {first_page.map(|href| view! { <a class="button" href=href>"First page"</a> })}
                                {next.map(|href| view! { <a class="button" href=href rel="next">"Next page"</a> })}
                            </nav>
                        }
                    })
                })}
            </Loading>
            <ActionError action=select />
            <p><a href="/recovery/jobs">"Every bulk job"</a></p>
        </Panel>
        <OverridesPanel />
    }
}

/// The queue's filter, a GET form: every view has a link.
#[component]
fn QueueFilters(param: impl Fn(&str) -> String + Copy + Send + Sync + 'static) -> impl IntoView {
    let value = move |name: &'static str| move || param(name);
    view! {
        <form method="get" action="/recovery" class="filters" aria-label="Filter the queue">
            <label>"Tenant " <input name="tenant" value=value("tenant") size="14" placeholder="name" /></label>
            <Choice label="Operation " name="operation" any="any" options=named(Operation::VARIANTS.iter().map(|operation| operation.as_str())) selected=Signal::derive(value("operation")) />
            <Choice label="Attention " name="attention" any="any" options=named(Attention::VARIANTS.iter().map(|attention| attention.as_str())) selected=Signal::derive(value("attention")) />
            <Choice label="Why unknown " name="cause" any="any" options=named(UnknownCause::VARIANTS.iter().map(|cause| cause.as_str())) selected=Signal::derive(value("cause")) />
            <Choice label="Provider says " name="evidence" any="any" options=named(["not_asked"].into_iter().chain(EvidenceKind::VARIANTS.iter().map(|kind| kind.as_str()))) selected=Signal::derive(value("evidence")) />
            <label>"Older than (min) " <input name="min_age_minutes" value=value("min_age_minutes") size="5" inputmode="numeric" /></label>
            <label>"Younger than (min) " <input name="max_age_minutes" value=value("max_age_minutes") size="5" inputmode="numeric" /></label>
            <label>"Currency " <input name="currency" value=value("currency") size="4" placeholder="EUR" /></label>
            <label>"Amount from " <input name="min_amount" value=value("min_amount") size="8" /></label>
            <label>"to " <input name="max_amount" value=value("max_amount") size="8" /></label>
            <label>"Key, payment or reference " <input name="search" value=value("search") size="16" /></label>
            <Choice label="Order " name="order" options=named(QueueOrder::VARIANTS.iter().map(|order| order.as_str())) selected=Signal::derive(value("order")) />
            <button type="submit" class="button">"Filter"</button>
        </form>
    }
}

#[component]
fn QueueTable(rows: Vec<QueueRowView>, can_act: bool, selected: RwSignal<Vec<RecordRef>>) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="muted">"Nothing needs attention."</p> }.into_any();
    }
    view! {
        <table class="records queue">
            <thead>
                <tr>
                    <th scope="col">{can_act.then_some("Select")}</th>
                    <th scope="col">"Key"</th>
                    <th scope="col">"Tenant"</th>
                    <th scope="col">"Operation"</th>
                    <th scope="col" class="num">"Amount"</th>
                    <th scope="col">"Merchant reference"</th>
                    <th scope="col">"Created"</th>
                    <th scope="col" class="num">"Looks"</th>
                    <th scope="col">"Why unknown"</th>
                    <th scope="col">"Next look"</th>
                    <th scope="col">"Provider says"</th>
                </tr>
            </thead>
            <tbody>
                {rows.into_iter().map(|row| view! { <QueueRow row can_act selected /> }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

#[component]
fn QueueRow(row: QueueRowView, can_act: bool, selected: RwSignal<Vec<RecordRef>>) -> impl IntoView {
    let record = row.record.clone();
    let label = format!("select {}", row.record.key);
    let tick = can_act.then(|| {
        let record = record.clone();
        let ticked = record.clone();
        view! {
            // Ticks survive the live queue's reads.
            <input type="checkbox" aria-label=label prop:checked=move || selected.with(|selected| selected.contains(&ticked)) on:change=move |event| {
                let checked = event_target_checked(&event);
                selected.update(|selected| {
                    selected.retain(|other| *other != record);
                    if checked { selected.push(record.clone()); }
                });
            } />
        }
    });
    let amount = match (&row.amount, &row.currency) {
        (Some(amount), Some(currency)) => format!("{amount} {currency}"),
        _ => "—".to_owned(),
    };
    let why = row
        .unknown_cause
        .map_or_else(|| "—".to_owned(), |cause| cause.words().to_owned());
    let last = row.last_error.clone().map(|error| {
        let title = error.clone();
        view! {
            <span class="muted clipped" title=title>{error}</span>
            " "
            <Time at=row.last_error_at.clone().unwrap_or_default() />
        }
    });
    let gave_up = matches!(row.next_look, NextLook::GaveUp(_));
    let next = match &row.next_look {
        NextLook::At(at) => view! { "looks at " <Time at=at.clone() /> }.into_any(),
        NextLook::GaveUp(at) => view! { "the worker gave up at " <Time at=at.clone() /> }.into_any(),
        NextLook::NextPass => view! { "next pass" }.into_any(),
    };
    let evidence = row.evidence.clone().map_or_else(
        || view! { <span class="muted">"not asked yet"</span> }.into_any(),
        |(evidence, at)| {
            let detail = match &evidence {
                ProviderEvidence::Charged { charge_id, .. } => format!(" ({charge_id})"),
                ProviderEvidence::Unreachable { problem } => format!(" ({problem})"),
                ProviderEvidence::NoCharge => String::new(),
            };
            view! {
                <span data-evidence=evidence.kind().as_str()>{evidence_words(&row.record.operation, evidence.kind())}{detail}</span>
                " " <Time at=at />
            }
            .into_any()
        },
    );
    view! {
        <tr data-key=row.record.key.clone() data-gave-up=gave_up.to_string()>
            <td>{tick}</td>
            <th scope="row"><a href=row.record.href()>{row.record.key.clone()}</a></th>
            <td>{row.tenant_name.clone()}</td>
            <td>{row.record.operation.clone()} " " <StatusBadge status=row.status /></td>
            <td class="num">{amount}</td>
            <td>{row.merchant_reference.clone().unwrap_or_default()}</td>
            <td><Time at=row.created_at.clone() /></td>
            <td class="num">{row.recovery_attempts}</td>
            <td data-cause=row.unknown_cause.map_or("", UnknownCause::as_str)>{why}{last}</td>
            <td>{next}</td>
            <td>{evidence}</td>
        </tr>
    }
}

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
                <thead><tr><th scope="col" class="num">"Records"</th><th scope="col">"The provider says"</th><th scope="col">"Apply"</th></tr></thead>
                <tbody>
                    {choices.into_iter().map(|(group, choice)| {
                        let key = format!("{}/{}", group.operation, group.evidence.as_str());
                        let says = format!("{}: {}", group.operation, evidence_words(&group.operation, group.evidence));
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
            <thead><tr><th scope="col" class="num">"Records"</th><th scope="col">"The provider says"</th><th scope="col">"Action"</th><th scope="col" class="num">"Done"</th><th scope="col" class="num">"Applied"</th></tr></thead>
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
                            <td>{format!("{}: {}", group.operation, evidence_words(&group.operation, group.evidence))}</td>
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
fn ItemsList(items: Vec<crate::dto::BulkItemView>) -> impl IntoView {
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
                                <thead><tr><th scope="col">"Job"</th><th scope="col">"State"</th><th scope="col" class="num">"Records"</th><th scope="col" class="num">"Done"</th><th scope="col" class="num">"Applied"</th><th scope="col">"By"</th><th scope="col">"Created"</th><th scope="col">"Ended"</th></tr></thead>
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
