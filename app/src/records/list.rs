//! The records browser.

use crate::records::api::find_records;
use crate::records::api::list_records;
use crate::records::model::RecordFilter;
use crate::records::model::RecordSummary;
use crate::widgets::Head;
use crate::widgets::{Choice, Loading, Panel, StatusBadge, Time, load_error, named};
use domain::record::{ProgressStep, RecordStatus};
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use strum::VariantArray;

/// The records browser: exact look-up (key, payment id, provider charge id) or a filtered,
/// keyset-paginated list, newest first. Filters are a GET form, so every view has a link.
#[component]
pub fn RecordsPage() -> impl IntoView {
    let query = use_query_map();
    let param = move |name: &str| query.read().get(name).unwrap_or_default();
    let filter = move || RecordFilter {
        status: param("status"),
        step: param("step"),
        tenant: param("tenant"),
        operation: param("operation"),
        key_prefix: param("key_prefix"),
        from: param("from"),
        to: param("to"),
        after: param("after"),
    };
    let needle = move || param("q");
    let page = Resource::new(filter, list_records);
    let found = Resource::new(needle, find_records);

    view! {
        <Panel title="Records" heading="Idempotency records">
            <form method="get" action="/records" class="search" role="search">
                <label>
                    "Look up "
                    <input
                        type="search"
                        name="q"
                        id="search"
                        placeholder="idempotency key, payment id, provider charge id or merchant reference   ( / )"
                        value=needle
                        autocomplete="off"
                    />
                </label>
                <button type="submit" class="button">
                    "Find"
                </button>
            </form>
            <Show when=move || !needle().is_empty()>
                <Transition fallback=|| view! { <p class="muted">"Looking…"</p> }>
                    <ErrorBoundary fallback=load_error>
                        {move || Suspend::new(async move {
                            found.await.map(|rows| view! { <RecordTable rows caption="Exact matches" /> })
                        })}
                    </ErrorBoundary>
                </Transition>
            </Show>
            <form method="get" action="/records" class="filters" aria-label="Filter records">
                <Choice label="Status" name="status" any="any" options=named(RecordStatus::VARIANTS.iter().map(|status| status.as_str())) selected=Signal::derive(move || param("status")) />
                <Choice label="Step" name="step" any="any" options=named(ProgressStep::VARIANTS.iter().map(|step| step.as_str())) selected=Signal::derive(move || param("step")) />
                <label>"Operation " <input name="operation" value=move || param("operation") size="14" /></label>
                <label>"Tenant (name or id) " <input name="tenant" value=move || param("tenant") size="14" /></label>
                <label>"Key prefix " <input name="key_prefix" value=move || param("key_prefix") size="14" /></label>
                <label>"From " <input name="from" placeholder="2026-11-29T00:00:00Z" value=move || param("from") size="20" /></label>
                <label>"To " <input name="to" value=move || param("to") size="20" /></label>
                <button type="submit" class="button">
                    "Filter"
                </button>
            </form>
            <Loading>
                {move || Suspend::new(async move {
                    page.await
                        .map(|page| {
                            let next = page.next.map(|cursor| {
                                let mut link = query.read_untracked().clone();
                                link.replace("after", cursor);
                                format!("/records{}", link.to_query_string())
                            });
                            let mut download = query.read_untracked().clone();
                            download.remove("after");
                            download.remove("q");
                            let download = format!("/console/records.csv{}", download.to_query_string());
                            view! {
                                <RecordTable rows=page.rows caption="Newest first" />
                                <a class="button" href=download download="" data-records-file>
                                    "Download every matching record (CSV, at most 100,000)"
                                </a>
                                {next.map(|href| view! { <a class="button" href=href rel="next">"Next page"</a> })}
                            }
                        })
                })}
            </Loading>
        </Panel>
    }
}

#[component]
pub fn RecordTable(rows: Vec<RecordSummary>, #[prop(into)] caption: String) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="muted">"No records."</p> }.into_any();
    }
    view! {
        <table class="records">
            <caption>{caption}</caption>
            <Head columns=&["Key", "Tenant", "Operation", "Status", "Step", "Amount", "Merchant reference", "Payment or refund", "Created", "Recovery tries"] numbers=&["Amount", "Recovery tries"] />
            <tbody>
                {rows
                    .into_iter()
                    .map(|row| {
                        view! {
                            <tr data-key=row.record.key.clone()>
                                <th scope="row">
                                    <a href=row.record.href()>{row.record.key.clone()}</a>
                                </th>
                                <td title=row.record.tenant_id.clone()>{row.tenant_name.clone()}</td>
                                <td>{row.record.operation.clone()}</td>
                                <td>
                                    <StatusBadge status=row.status />
                                </td>
                                <td>{row.step.as_str()}</td>
                                <td class="num">{match (&row.amount, &row.currency) {
                                    (Some(amount), Some(currency)) => format!("{amount} {currency}"),
                                    _ => "—".to_owned(),
                                }}</td>
                                <td>{row.merchant_reference.clone().unwrap_or_default()}</td>
                                <td>{row.resource_id.unwrap_or_default()}</td>
                                <td>
                                    <Time at=row.created_at />
                                </td>
                                <td class="num">{row.recovery_attempts}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
