use crate::widgets::Head;
pub mod api;
pub mod model;

use crate::audit::api::get_audit;
use crate::audit::model::AuditEntryView;
use crate::widgets::{Loading, Panel, Time};
use domain::cursor::AuditCursor;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

/// Who did what, when, why, and how it ended; newest first, older pages by link.
#[component]
pub fn AuditPage() -> impl IntoView {
    let query = use_query_map();
    let entries = Resource::new(move || query.read().get("before").unwrap_or_default(), get_audit);
    view! {
        <Panel title="Audit" heading="Audit log">
            <Loading>
                {move || Suspend::new(async move {
                    entries.await.map(|entries| {
                        let older = entries.last().map(|last| {
                            let cursor = AuditCursor::text_after(&last.at, &last.id);
                            format!("/audit?before={}", crate::records::model::encode_segment(&cursor))
                        });
                        view! {
                            <AuditTable entries />
                            {older.map(|href| view! { <a class="button" href=href rel="next">"Older"</a> })}
                        }
                    })
                })}
            </Loading>
        </Panel>
    }
}

#[component]
pub fn AuditTable(entries: Vec<AuditEntryView>) -> impl IntoView {
    if entries.is_empty() {
        return view! { <p class="muted">"No entries."</p> }.into_any();
    }
    view! {
        <table class="audit">
            <Head columns=&["When", "Who", "What", "Target", "Why", "Result"] />
            <tbody>
                {entries
                    .into_iter()
                    .map(|AuditEntryView { at, entry, .. }| {
                        let (action, result) = (entry.action.clone(), entry.result.clone());
                        view! {
                            <tr data-action=action data-result=result>
                                <td><Time at=at /></td>
                                <td>{entry.actor}</td>
                                <td>{entry.action}</td>
                                <td>{entry.target.unwrap_or_default()}</td>
                                <td>{entry.reason.unwrap_or_default()}</td>
                                <td title=entry.details.unwrap_or_default()>{entry.result}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
