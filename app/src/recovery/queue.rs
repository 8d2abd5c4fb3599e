//! The recovery queue.

use crate::overrides::OverridesPanel;
use crate::records::model::RecordRef;
use crate::recovery::LIVE_EVERY;
use crate::recovery::QUEUE_PAGE;
use crate::recovery::api::get_recovery_queue;
use crate::recovery::api::select_for_bulk;
use crate::recovery::evidence_words;
use crate::recovery::jobs::BulkJobPanel;
use crate::recovery::model::BulkSelection;
use crate::recovery::model::NextLook;
use crate::recovery::model::QueueRowView;
use crate::recovery::while_visible;
use crate::sign_in::api::whoami;
use crate::widgets::Head;
use crate::widgets::{ActionError, Choice, Loading, Panel, StatusBadge, Time, named};
use domain::operator::OperatorRole;
use domain::queue::{Attention, QueueOrder, QueueQuery};
use domain::recovery::{EvidenceKind, ProviderEvidence, UnknownCause};
use domain::scope::Operation;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use strum::VariantArray;

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
            <Head
                select=can_act
                columns=&[
                    "Key",
                    "Tenant",
                    "Operation",
                    "Amount",
                    "Merchant reference",
                    "Created",
                    "Looks",
                    "Why unknown",
                    "Next look",
                    "Provider says",
                ]
                numbers=&["Amount", "Looks"]
            />
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
                <span data-evidence=evidence.kind().as_str()>{evidence_words(row.record.known_operation(), evidence.kind())}{detail}</span>
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
