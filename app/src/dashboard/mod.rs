//! The dashboard.

use crate::dashboard::refresh::RefreshControls;
use crate::dashboard::refresh::auto_refresh;
use crate::dashboard::windows::RetryWindowView;
use domain::outcome::Outcome;
use domain::record::RecordStatus;
pub mod api;
pub mod model;
mod refresh;
mod windows;

use crate::dashboard::api::get_dashboard;
use crate::dashboard::api::get_retry_windows;
use crate::dashboard::model::Dashboard;
use crate::dashboard::model::DashboardRange;
use crate::dashboard::model::LiveGauges;
use crate::widgets::{BarChart, ChartScale, Choice, Loading, Time, TimeAxis, age, named};
use domain::scope::Operation;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use strum::VariantArray;

/// What each stored outcome is called on the dashboard.
fn outcome_label(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::NewExecution => "New executions",
        Outcome::Replay => "Replays",
        Outcome::ConflictDifferentRequest => "Key reused, different request",
        Outcome::InProgress => "Answered in progress",
        Outcome::ExpiredRetry => "Retries after expiry",
        Outcome::OutcomeUnknown => "Unknown outcomes",
        Outcome::ProviderError => "Provider errors",
        Outcome::Takeover => "Takeovers",
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
    let retry_windows = Resource::new(
        move || {
            (
                param("range"),
                param("tenant"),
                param("operation"),
                refreshes.get(),
            )
        },
        |(range, tenant, operation, _)| get_retry_windows(range, tenant, operation),
    );
    let scale = Signal::derive(move || ChartScale::parse(&param("show")));
    let (hydrated, set_hydrated) = signal(false);
    Effect::new(move |_| set_hydrated.set(true));
    let visible = RwSignal::new(true);
    auto_refresh(visible, move || *set_refreshes.write() += 1);

    view! {
        <Title text="Dashboard" />
        <section class="panel" data-hydrated=move || hydrated.get().to_string()>
            <div class="panel-head">
                <h1>"Idempotency dashboard"</h1>
                <RefreshControls on_refresh=move || *set_refreshes.write() += 1 hydrated visible />
            </div>
            <Loading>
                {move || Suspend::new(async move {
                    dashboard
                        .await
                        .map(|dashboard| {
                            view! {
                                <Filters dashboard=dashboard.clone() />
                                <Gauges live=dashboard.live.clone() />
                                <Charts dashboard scale=scale.get() />
                            }
                        })
                })}
            </Loading>
        </section>
        <section class="panel" aria-labelledby="retry-windows">
            <h2 id="retry-windows">"Retry delays and the window"</h2>
            <p class="muted">
                "A retry is a request that found its key's record with the same command; its delay runs from the key's first request. Past the window a retry is no longer replayed, so the window should outlast nearly all of them."
            </p>
            <p class="muted" data-note="bucketed">
                "Delays are kept in log buckets, not one by one: each quantile is the longest delay of its bucket (at least the true value, under twice it), while the counts after each window below are exact."
            </p>
            <Loading>
                {move || Suspend::new(async move {
                    retry_windows
                        .await
                        .map(|windows| {
                            windows
                                .into_iter()
                                .map(|window| view! { <RetryWindowView window /> })
                                .collect_view()
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
    let show = ChartScale::parse(&query.read_untracked().get("show").unwrap_or_default())
        .as_str()
        .to_owned();
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
            <Choice
                label="Show"
                name="show"
                options=ChartScale::ALL
                    .into_iter()
                    .map(|scale| (scale.as_str().to_owned(), scale.label().to_owned()))
                    .collect()
                selected=show
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
                RecordStatus::UnknownRequiresRecovery.as_str(),
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
fn Charts(dashboard: Dashboard, scale: ChartScale) -> impl IntoView {
    let points = dashboard.series.first().map_or(0, |series| series.points.len());
    let axis = TimeAxis::new(&dashboard.from, dashboard.step_seconds, points);
    let all: Vec<u64> = (0..points)
        .map(|index| {
            dashboard
                .series
                .iter()
                .filter_map(|series| series.points.get(index))
                .sum()
        })
        .collect();
    view! {
        <div class="charts">
            {dashboard
                .series
                .into_iter()
                .map(|series| {
                    view! {
                        <BarChart
                            label=outcome_label(series.outcome)
                            outcome=series.outcome.as_str()
                            points=series.points
                            all=all.clone()
                            axis=axis.clone()
                            scale
                        />
                    }
                })
                .collect_view()}
        </div>
    }
}
