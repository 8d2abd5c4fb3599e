use super::widgets::{BarChart, Choice, Loading, Time, age, named};
use crate::api::get_dashboard;
use crate::dto::{Dashboard, DashboardRange, LiveGauges};
use domain::scope::Operation;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use strum::VariantArray;

/// What each stored outcome is called on the dashboard.
fn outcome_label(outcome: &str) -> &'static str {
    match outcome {
        "new_execution" => "New executions",
        "replay" => "Replays",
        "conflict_different_request" => "Key reused, different request",
        "in_progress" => "Answered in progress",
        "expired_retry" => "Retries after expiry",
        "outcome_unknown" => "Unknown outcomes",
        "provider_error" => "Provider errors",
        "takeover" => "Takeovers",
        _ => "Other",
    }
}

/// Outcome series over a range, and the live gauges; filters are a plain GET form, so the
/// page works (and can be bookmarked) without JavaScript. Refreshes itself at the interval
/// the operator chose, never while the tab is hidden.
#[component]
pub fn DashboardPage() -> impl IntoView {
    let query = use_query_map();
    let param = move |name: &str| query.read().get(name).unwrap_or_default();
    let (refreshes, set_refreshes) = signal(0_u32);
    let dashboard = Resource::new(
        move || {
            (
                param("range"),
                param("tenant"),
                param("operation"),
                refreshes.get(),
            )
        },
        |(range, tenant, operation, _)| get_dashboard(range, tenant, operation),
    );
    let (hydrated, set_hydrated) = signal(false);
    Effect::new(move |_| set_hydrated.set(true));
    auto_refresh(move || *set_refreshes.write() += 1);

    view! {
        <Title text="Dashboard" />
        <section class="panel" data-hydrated=move || hydrated.get().to_string()>
            <div class="panel-head">
                <h1>"Idempotency dashboard"</h1>
                <RefreshControls on_refresh=move || *set_refreshes.write() += 1 hydrated />
            </div>
            <Loading>
                {move || Suspend::new(async move {
                    dashboard
                        .await
                        .map(|dashboard| {
                            view! {
                                <Filters dashboard=dashboard.clone() />
                                <Gauges live=dashboard.live.clone() />
                                <Charts dashboard />
                            }
                        })
                })}
            </Loading>
        </section>
    }
}

#[component]
fn Filters(dashboard: Dashboard) -> impl IntoView {
    let query = use_query_map();
    let tenant = query.read_untracked().get("tenant").unwrap_or_default();
    let operation = query.read_untracked().get("operation").unwrap_or_default();
    view! {
        <form method="get" action="/" class="filters" aria-label="Dashboard filters">
            <Choice
                label="Range"
                name="range"
                options=named(DashboardRange::ALL.into_iter().map(DashboardRange::as_str))
                selected=dashboard.range.as_str().to_owned()
            />
            <Choice
                label="Tenant"
                name="tenant"
                any="All tenants"
                options=dashboard
                    .tenants
                    .iter()
                    .map(|option| (option.id.clone(), option.name.clone()))
                    .collect()
                selected=tenant
            />
            <Choice
                label="Operation"
                name="operation"
                any="All operations"
                options=named(Operation::VARIANTS.iter().map(|operation| operation.as_str()))
                selected=operation
            />
            <button type="submit" class="button">
                "Apply"
            </button>
        </form>
        <p class="muted">
            "From " <Time at=dashboard.from.clone() />
            ", one bar per " {dashboard.step_seconds / 60} " min; read at "
            <Time at=dashboard.read_at.clone() />
        </p>
    }
}

#[component]
fn Gauges(live: LiveGauges) -> impl IntoView {
    let tile = |name: &'static str, label: &'static str, value: u64, detail: String, alarm: bool| {
        view! {
            <div class="gauge" class:alarm=(alarm && value > 0) data-gauge=name>
                <span class="gauge-label">{label}</span>
                <strong class="num gauge-value">{value}</strong>
                <span class="muted">{detail}</span>
            </div>
        }
    };
    view! {
        <div class="gauges" aria-label="Live gauges">
            {tile(
                "stale_in_progress",
                "Stale IN_PROGRESS",
                live.stale_in_progress,
                format!("oldest {}; {} in progress", age(live.oldest_stale_in_progress_secs), live.in_progress),
                true,
            )}
            {tile(
                "unknown",
                "UNKNOWN_REQUIRES_RECOVERY",
                live.unknown,
                format!("oldest {}; {} need an operator", age(live.oldest_unknown_secs), live.needs_operator),
                true,
            )}
            {tile(
                "outbox_backlog",
                "Outbox backlog",
                live.outbox_backlog,
                format!("oldest {}", age(live.outbox_oldest_secs)),
                false,
            )}
            {tile(
                "cleanup_backlog",
                "Cleanup backlog",
                live.cleanup_to_purge,
                format!("{} tombstones past retention", live.cleanup_to_delete),
                false,
            )}
            {tile(
                "charged_after_release",
                "Charged after release",
                live.charged_after_release,
                "released payments to refund".to_owned(),
                true,
            )}
        </div>
    }
}

#[component]
fn Charts(dashboard: Dashboard) -> impl IntoView {
    view! {
        <div class="charts">
            {dashboard
                .series
                .into_iter()
                .map(|series| {
                    view! {
                        <BarChart
                            label=outcome_label(&series.outcome)
                            outcome=series.outcome.clone()
                            total=series.total
                            points=series.points
                        />
                    }
                })
                .collect_view()}
        </div>
    }
}

/// The refresh button and the auto-refresh interval (remembered in this browser).
#[component]
fn RefreshControls(
    on_refresh: impl Fn() + Copy + Send + Sync + 'static,
    hydrated: ReadSignal<bool>,
) -> impl IntoView {
    let interval = refresh_interval();
    view! {
        <div class="refresh">
            <label>
                "Auto-refresh "
                <select
                    disabled=move || !hydrated.get()
                    on:change=move |event| interval.set(event_target_value(&event).parse().unwrap_or(0))
                    prop:value=move || interval.get().to_string()
                >
                    <option value="0">"off"</option>
                    <option value="5">"5 s"</option>
                    <option value="15">"15 s"</option>
                    <option value="60">"1 min"</option>
                </select>
            </label>
            <button type="button" class="button" disabled=move || !hydrated.get() on:click=move |_| on_refresh()>
                "Refresh"
            </button>
        </div>
    }
}

/// The operator's auto-refresh interval in seconds (0: off), shared by the page and kept in
/// `localStorage`.
fn refresh_interval() -> RwSignal<u32> {
    if let Some(interval) = use_context::<RwSignal<u32>>() {
        return interval;
    }
    let interval = RwSignal::new(0_u32);
    provide_context(interval);
    #[cfg(feature = "hydrate")]
    {
        if let Some(stored) = storage().and_then(|storage| storage.get_item("idem.refresh").ok().flatten()) {
            interval.set(stored.parse().unwrap_or(0));
        }
        Effect::new(move |_| {
            let value = interval.get().to_string();
            if let Some(storage) = storage() {
                let _ = storage.set_item("idem.refresh", &value);
            }
        });
    }
    interval
}

#[cfg(feature = "hydrate")]
fn storage() -> Option<web_sys::Storage> {
    window().local_storage().ok().flatten()
}

/// Calls `refresh` every chosen interval while the tab is visible.
fn auto_refresh(refresh: impl Fn() + Clone + Send + Sync + 'static) {
    let interval = refresh_interval();
    #[cfg(feature = "hydrate")]
    {
        Effect::new(move |previous: Option<Option<leptos::prelude::IntervalHandle>>| {
            if let Some(Some(handle)) = previous {
                handle.clear();
            }
            let seconds = interval.get();
            if seconds == 0 {
                return None;
            }
            let refresh = refresh.clone();
            set_interval_with_handle(
                move || {
                    if !document().hidden() {
                        refresh();
                    }
                },
                std::time::Duration::from_secs(u64::from(seconds)),
            )
            .ok()
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (interval, refresh);
}
