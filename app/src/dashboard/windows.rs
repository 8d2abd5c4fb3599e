//! Retry delays against the window: the data for sizing it.

use crate::dashboard::model::RetryWindow;
use crate::dashboard::model::WindowFit;
use crate::widgets::Head;
use crate::widgets::age;
use leptos::prelude::*;

/// One operation's retry delays: quantiles and the longest against its window, on a log
/// scale, and how many retries shorter and longer windows would have left outside.
#[component]
pub(super) fn RetryWindowView(window: RetryWindow) -> impl IntoView {
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
        <div class="retry-window" data-operation=window.operation.as_str() data-retries=retries.to_string()>
            <h3>{window.operation.as_str()}</h3>
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
                <Head columns=&["Window", "Retries after it", "Share", "Against the current window"] />
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
