use crate::api::get_overview;
use crate::dto::Overview;
use leptos::prelude::*;
use leptos_meta::Title;

/// Record counts per status, read through a server function; "Refresh" reads them again
/// from the browser once the page has hydrated.
#[component]
pub fn OverviewPage() -> impl IntoView {
    let (refreshes, set_refreshes) = signal(0_u32);
    let overview = Resource::new(move || refreshes.get(), |_| get_overview());

    // Effects run only in the browser: this marks the moment the wasm app took over.
    let (hydrated, set_hydrated) = signal(false);
    Effect::new(move |_| set_hydrated.set(true));

    view! {
        <Title text="Overview" />
        <section class="panel" data-hydrated=move || hydrated.get().to_string()>
            <div class="panel-head">
                <h1>"Idempotency records"</h1>
                <button
                    type="button"
                    class="button"
                    disabled=move || !hydrated.get()
                    on:click=move |_| *set_refreshes.write() += 1
                >
                    "Refresh"
                </button>
            </div>
            <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
                <ErrorBoundary fallback=|errors| {
                    view! {
                        <div class="error" role="alert">
                            <p>"The overview could not be read:"</p>
                            <ul>
                                {move || {
                                    errors
                                        .get()
                                        .into_iter()
                                        .map(|(_, error)| view! { <li>{error.to_string()}</li> })
                                        .collect_view()
                                }}
                            </ul>
                        </div>
                    }
                }>
                    {move || Suspend::new(async move {
                        overview.await.map(|overview| view! { <StatusCounts overview /> })
                    })}
                </ErrorBoundary>
            </Transition>
        </section>
    }
}

#[component]
fn StatusCounts(overview: Overview) -> impl IntoView {
    let total = overview.total();
    let rows = overview
        .counts
        .into_iter()
        .map(|count| {
            let status = count.status.as_str();
            view! {
                <tr data-status=status>
                    <th scope="row">
                        <span class=format!("badge badge-{}", status.to_lowercase())>{status}</span>
                    </th>
                    <td class="num">{count.count}</td>
                </tr>
            }
        })
        .collect_view();

    view! {
        <table class="counts">
            <thead>
                <tr>
                    <th scope="col">"Status"</th>
                    <th scope="col" class="num">"Records"</th>
                </tr>
            </thead>
            <tbody>{rows}</tbody>
            <tfoot>
                <tr>
                    <th scope="row">"Total"</th>
                    <td class="num" data-total>{total}</td>
                </tr>
            </tfoot>
        </table>
        <p class="muted">"Read at " <time data-read-at>{overview.read_at}</time></p>
    }
}
