use super::widgets::{BarChart, ChartScale, Choice, Loading, Time, TimeAxis, age, named};
use crate::api::{get_dashboard, get_retry_windows};
use crate::dto::{Dashboard, DashboardRange, LiveGauges, RetryWindow, WindowFit};
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
                            label=outcome_label(&series.outcome)
                            outcome=series.outcome.clone()
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

/// One operation's retry delays: quantiles and the longest against its window, on a log
/// scale, and how many retries shorter and longer windows would have left outside.
#[component]
fn RetryWindowView(window: RetryWindow) -> impl IntoView {
    let current = window.window_secs as f64;
    let retries = window.retries;
    let share = move |outside: u64| {
        if retries == 0 {
            "0%".to_owned()
        } else {
            format!("{:.2}%", outside as f64 * 100.0 / retries as f64)
        }
    };
    let outside_now = window
        .windows
        .iter()
        .find(|fit| fit.current)
        .map_or(0, |fit| fit.outside);
    let compared = |fit: &WindowFit| -> String {
        match fit.outside.cmp(&outside_now) {
            _ if fit.current => "current window".to_owned(),
            std::cmp::Ordering::Equal => "the same".to_owned(),
            std::cmp::Ordering::Greater => format!("{} more not replayed", fit.outside - outside_now),
            std::cmp::Ordering::Less => format!("{} fewer not replayed", outside_now - fit.outside),
        }
    };
    let marks = [
        ("p50", window.quantile_secs[0]),
        ("p90", window.quantile_secs[1]),
        ("p99", window.quantile_secs[2]),
        ("p99.9", window.quantile_secs[3]),
        ("longest", window.longest_secs),
    ];
    let rows = window
        .windows
        .iter()
        .map(|fit| {
            view! {
                <tr class:current=fit.current data-window=fit.window_secs.to_string()>
                    <td>{age(fit.window_secs as f64)}</td>
                    <td class="num" data-outside>{fit.outside}</td>
                    <td class="num">{share(fit.outside)}</td>
                    <td>{compared(fit)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="retry-window" data-operation=window.operation.clone() data-retries=retries.to_string()>
            <h3>{window.operation.clone()}</h3>
            {if retries == 0 {
                view! { <p class="muted">"No retries in this range."</p> }.into_any()
            } else {
                view! {
                    <dl class="quantiles">
                        {marks
                            .iter()
                            .map(|(name, seconds)| {
                                view! {
                                    <div data-quantile=*name>
                                        <dt>{*name}</dt>
                                        <dd class="num">{age(*seconds)}</dd>
                                    </div>
                                }
                            })
                            .collect_view()}
                        <div data-quantile="window">
                            <dt>"window"</dt>
                            <dd class="num">{age(current)}</dd>
                        </div>
                    </dl>
                    <DelayStrip marks window=current />
                }
                    .into_any()
            }}
            <table class="windows">
                <caption>
                    {format!(
                        "{retries} {} in the range: how many came after each window (not replayed, answered by the after-expiry policy)",
                        if retries == 1 { "retry" } else { "retries" },
                    )}
                </caption>
                <thead>
                    <tr>
                        <th scope="col">"Window"</th>
                        <th scope="col">"Retries after it"</th>
                        <th scope="col">"Share"</th>
                        <th scope="col">"Against the current window"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
    }
}

/// The delays' quantiles as ticks on a logarithmic time line from 100 ms (labelled at a
/// second, a minute, an hour and a day), with the window as a marked line; each tick's name
/// and value is its tooltip (the values are listed above the line).
#[component]
fn DelayStrip(marks: [(&'static str, f64); 5], window: f64) -> impl IntoView {
    const WIDTH: f64 = 600.0;
    const HEIGHT: f64 = 48.0;
    const FLOOR: f64 = 0.1;
    let end = marks
        .iter()
        .map(|(_, seconds)| *seconds)
        .fold(window * 2.0, f64::max);
    let span = (end / FLOOR).log10().max(1.0);
    let x = move |seconds: f64| {
        ((seconds.max(FLOOR) / FLOOR).log10() / span * (WIDTH - 20.0) + 10.0).min(WIDTH - 10.0)
    };
    let scale = [0.1, 1.0, 60.0, 3600.0, 86_400.0]
        .into_iter()
        .filter(|seconds| *seconds <= end)
        .map(|seconds| {
            view! {
                <g class="scale">
                    <line x1=x(seconds) y1="30" x2=x(seconds) y2="34" />
                    <text x=x(seconds) y="45" text-anchor=if seconds == FLOOR { "start" } else { "middle" }>
                        {age(seconds)}
                    </text>
                </g>
            }
        })
        .collect_view();
    let ticks = marks
        .into_iter()
        .map(|(name, seconds)| {
            view! {
                <line class="mark" x1=x(seconds) y1="14" x2=x(seconds) y2="30">
                    <title>{format!("{name}: {}", age(seconds))}</title>
                </line>
            }
        })
        .collect_view();
    let window_at = x(window);
    view! {
        <svg class="delay-strip" viewBox=format!("0 0 {WIDTH} {HEIGHT}") role="img">
            <title>{format!("Retry delays against the window of {}", age(window))}</title>
            <line x1="10" y1="30" x2=WIDTH - 10.0 y2="30" class="axis" />
            {scale}
            {ticks}
            <g class="window">
                <line x1=window_at y1="4" x2=window_at y2="34" />
                <text x=window_at - 4.0 y="10" text-anchor="end">{format!("window {}", age(window))}</text>
            </g>
        </svg>
    }
}

/// The refresh button and the auto-refresh interval (remembered in this browser).
#[component]
fn RefreshControls(
    on_refresh: impl Fn() + Copy + Send + Sync + 'static,
    hydrated: ReadSignal<bool>,
    visible: RwSignal<bool>,
) -> impl IntoView {
    let interval = refresh_interval();
    let live = move || hydrated.get() && interval.get() > 0 && visible.get();
    view! {
        <div class="refresh">
            <span class="live" role="status" data-live=move || live().to_string()>
                {move || match (interval.get(), visible.get()) {
                    (0, _) => "Auto-refresh off".to_owned(),
                    (_, false) => "Paused while this tab is hidden".to_owned(),
                    (seconds, true) => format!("Live: reads itself every {seconds} s"),
                }}
            </span>
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
    // On by default: the console is watched on the day something goes wrong.
    let interval = RwSignal::new(DEFAULT_REFRESH_SECONDS);
    provide_context(interval);
    #[cfg(feature = "hydrate")]
    {
        if let Some(stored) = storage().and_then(|storage| storage.get_item("idem.refresh").ok().flatten()) {
            interval.set(stored.parse().unwrap_or(DEFAULT_REFRESH_SECONDS));
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

/// The auto-refresh interval of a browser that never chose one, in seconds.
const DEFAULT_REFRESH_SECONDS: u32 = 15;

/// Calls `refresh` every chosen interval while the tab is visible (`visible` says whether it
/// was at the last tick).
fn auto_refresh(visible: RwSignal<bool>, refresh: impl Fn() + Clone + Send + Sync + 'static) {
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
                    visible.set(!document().hidden());
                    if visible.get_untracked() {
                        refresh();
                    }
                },
                std::time::Duration::from_secs(u64::from(seconds)),
            )
            .ok()
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (interval, visible, refresh);
}
