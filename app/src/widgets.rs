//! Small pieces every page uses: status badges, times, load errors, SVG charts.

use domain::record::RecordStatus;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn StatusBadge(status: RecordStatus) -> impl IntoView {
    let name = status.as_str();
    view! { <span class=format!("badge badge-{}", name.to_lowercase())>{name}</span> }
}

/// A filter's choice: `any` first when the filter may be left open (its value is empty),
/// then each `(value, label)`; the one equal to `selected` is selected.
#[component]
pub fn Choice(
    label: &'static str,
    name: &'static str,
    #[prop(optional)] any: Option<&'static str>,
    options: Vec<(String, String)>,
    #[prop(into)] selected: Signal<String>,
) -> impl IntoView {
    view! {
        <label>
            {label}
            <select name=name>
                {any.map(|any| view! { <option value="">{any}</option> })}
                {options
                    .into_iter()
                    .map(|(value, text)| {
                        let chosen = value.clone();
                        view! {
                            <option value=value selected=move || selected.get() == chosen>
                                {text}
                            </option>
                        }
                    })
                    .collect_view()}
            </select>
        </label>
    }
}

/// Stored names as a [`Choice`]'s options, each its own label.
pub fn named(names: impl IntoIterator<Item = &'static str>) -> Vec<(String, String)> {
    names
        .into_iter()
        .map(|name| (name.to_owned(), name.to_owned()))
        .collect()
}

/// Why an action failed, once it has (nothing before, or when it succeeded).
#[component]
pub fn ActionError<I, O>(action: Action<I, Result<O, ServerFnError>>) -> impl IntoView
where
    I: Send + Sync + 'static,
    O: Clone + Send + Sync + 'static,
{
    move || {
        action
            .value()
            .get()
            .and_then(Result::err)
            .map(|error| view! { <p class="error" role="alert">{error.to_string()}</p> })
    }
}

/// A UTC timestamp, shown in local time when the operator chose that.
#[component]
pub fn Time(#[prop(into)] at: String) -> impl IntoView {
    let prefs = crate::prefs::prefs();
    let (datetime, title) = (at.clone(), at.clone());
    view! {
        <time datetime=datetime class="ts" title=title>
            {move || crate::prefs::shown_time(&at, prefs.local_times.get())}
        </time>
    }
}

/// A page of the console: its title in the browser's tab and its heading.
#[component]
pub fn Panel(title: &'static str, heading: &'static str, children: Children) -> impl IntoView {
    view! {
        <Title text=title />
        <section class="panel">
            <h1>{heading}</h1>
            {children()}
        </section>
    }
}

/// What a page shows while its data loads ("Loading…", the last answer kept during a
/// reload) and when reading it failed (`load_error`).
#[component]
pub fn Loading<Chil>(children: TypedChildren<Chil>) -> impl IntoView
where
    Chil: IntoView + Send + 'static,
{
    let children = children.into_inner();
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            <ErrorBoundary fallback=load_error>{children()}</ErrorBoundary>
        </Transition>
    }
}

/// What a page shows when a server function failed (its message says what to do).
pub fn load_error(errors: ArcRwSignal<Errors>) -> impl IntoView {
    view! {
        <div class="error" role="alert">
            <p>"This could not be read:"</p>
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
}

/// What a dashboard bar measures: the count in its step, the count per minute, or its share
/// of every request counted in that step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChartScale {
    #[default]
    Count,
    PerMinute,
    Share,
}

impl ChartScale {
    pub const ALL: [ChartScale; 3] = [ChartScale::Count, ChartScale::PerMinute, ChartScale::Share];

    pub const fn as_str(self) -> &'static str {
        match self {
            ChartScale::Count => "count",
            ChartScale::PerMinute => "rate",
            ChartScale::Share => "share",
        }
    }

    pub const fn label(self) -> &'static str {
        match self {
            ChartScale::Count => "Requests per bar",
            ChartScale::PerMinute => "Per minute",
            ChartScale::Share => "Share of requests",
        }
    }

    /// The scale `text` names; the count for anything else.
    pub fn parse(text: &str) -> ChartScale {
        ChartScale::ALL
            .into_iter()
            .find(|scale| scale.as_str() == text)
            .unwrap_or_default()
    }

    /// `count` of `all` requests over `seconds`, on this scale.
    fn value(self, count: u64, all: u64, seconds: i64) -> f64 {
        match self {
            ChartScale::Count => count as f64,
            ChartScale::PerMinute => count as f64 * 60.0 / seconds.max(1) as f64,
            ChartScale::Share if all == 0 => 0.0,
            ChartScale::Share => count as f64 / all as f64,
        }
    }

    fn show(self, value: f64) -> String {
        match self {
            ChartScale::Count => format!("{value:.0}"),
            ChartScale::PerMinute => format!("{value:.1}/min"),
            ChartScale::Share => format!("{:.1}%", value * 100.0),
        }
    }
}

/// A chart's time axis: where each step starts, as shown under the chart and in each bar's
/// tooltip (UTC).
#[derive(Clone, Debug, PartialEq)]
pub struct TimeAxis {
    pub starts: Vec<String>,
    pub step_seconds: i64,
}

impl TimeAxis {
    /// `points` steps of `step_seconds` from `from` (RFC 3339); labels are `HH:MM`, with the
    /// day when the range spans days.
    pub fn new(from: &str, step_seconds: i64, points: usize) -> TimeAxis {
        let start = chrono::DateTime::parse_from_rfc3339(from)
            .map(|at| at.to_utc())
            .ok();
        let with_day = step_seconds * points as i64 > 24 * 3600;
        let starts = (0..points)
            .map(|index| {
                start
                    .map(|start| {
                        let at = start + chrono::TimeDelta::seconds(step_seconds * index as i64);
                        at.format(if with_day { "%m-%d %H:%M" } else { "%H:%M" })
                            .to_string()
                    })
                    .unwrap_or_default()
            })
            .collect();
        TimeAxis { starts, step_seconds }
    }

    /// Five labels: the first step's start, three between, the last step's.
    fn ticks(&self) -> Vec<String> {
        let last = self.starts.len().saturating_sub(1);
        [0, last / 4, last / 2, 3 * last / 4, last]
            .into_iter()
            .filter_map(|index| self.starts.get(index).cloned())
            .collect()
    }
}

/// A time series as an SVG bar chart, drawn on the server: no script, no chart library. Each
/// bar's tooltip (its SVG `<title>`) says its time, count, rate and share; the caption says
/// the range's total, rate and share and the scale's top; `data-total` carries the sum for
/// tests.
#[component]
pub fn BarChart(
    #[prop(into)] label: String,
    #[prop(into)] outcome: String,
    points: Vec<u64>,
    /// Every outcome counted in each step, for the share.
    all: Vec<u64>,
    axis: TimeAxis,
    scale: ChartScale,
) -> impl IntoView {
    const WIDTH: f64 = 300.0;
    const HEIGHT: f64 = 64.0;
    let step = axis.step_seconds;
    let values: Vec<f64> = points
        .iter()
        .zip(all.iter().chain(std::iter::repeat(&0)))
        .map(|(count, all)| scale.value(*count, *all, step))
        .collect();
    let top = values.iter().copied().fold(0.0_f64, f64::max);
    let slot = WIDTH / points.len().max(1) as f64;
    let bars = points
        .iter()
        .enumerate()
        .filter(|(_, count)| **count > 0)
        .map(|(index, count)| {
            let height = (values[index] / top.max(f64::MIN_POSITIVE) * (HEIGHT - 4.0)).max(1.0);
            let all = all.get(index).copied().unwrap_or(0);
            let tooltip = format!(
                "{} UTC, {} min: {count} ({}, {} of requests)",
                axis.starts.get(index).map_or("", String::as_str),
                step / 60,
                ChartScale::PerMinute.show(ChartScale::PerMinute.value(*count, all, step)),
                ChartScale::Share.show(ChartScale::Share.value(*count, all, step)),
            );
            view! {
                <rect
                    x=format!("{:.1}", index as f64 * slot + 0.5)
                    y=format!("{:.1}", HEIGHT - height)
                    width=format!("{:.1}", (slot - 1.0).max(0.5))
                    height=format!("{height:.1}")
                >
                    <title>{tooltip}</title>
                </rect>
            }
        })
        .collect_view();
    let total: u64 = points.iter().sum();
    let range_seconds = step * points.len() as i64;
    let summary = format!(
        "{} · {} of requests",
        ChartScale::PerMinute.show(ChartScale::PerMinute.value(total, 0, range_seconds)),
        ChartScale::Share.show(ChartScale::Share.value(total, all.iter().sum(), range_seconds)),
    );
    let title = format!(
        "{label}: {total} in the range ({summary}); top of the scale {}",
        scale.show(top)
    );
    let ticks = axis
        .ticks()
        .into_iter()
        .map(|tick| view! { <span>{tick}</span> })
        .collect_view();
    view! {
        <figure class="chart" data-series=outcome data-total=total.to_string() data-scale=scale.as_str()>
            <figcaption>
                <span>{label}</span>
                <strong class="num">{total}</strong>
            </figcaption>
            <p class="chart-summary muted">
                <span>{summary}</span>
                <span class="chart-top">"top " {scale.show(top)}</span>
            </p>
            <svg viewBox=format!("0 0 {WIDTH} {HEIGHT}") role="img" preserveAspectRatio="none">
                <title>{title}</title>
                <line x1="0" y1=HEIGHT / 2.0 x2=WIDTH y2=HEIGHT / 2.0 class="grid" />
                <line x1="0" y1=HEIGHT x2=WIDTH y2=HEIGHT class="axis" />
                {bars}
            </svg>
            <div class="chart-axis" aria-label="Time (UTC)">
                {ticks}
            </div>
        </figure>
    }
}

/// Seconds as an operator reads them: `250 ms`, `42 s`, `7 min`, `3 h`, `2 d`.
pub fn age(seconds: f64) -> String {
    if seconds > 0.0 && seconds < 1.0 {
        return format!("{} ms", (seconds * 1000.0).round());
    }
    let seconds = seconds.max(0.0).round() as u64;
    match seconds {
        0..120 => format!("{seconds} s"),
        3600..172_800 if seconds.is_multiple_of(3600) => format!("{} h", seconds / 3600),
        120..7200 => format!("{} min", seconds / 60),
        7200..172_800 => format!("{} h", seconds / 3600),
        _ => format!("{} d", seconds / 86_400),
    }
}

/// A one-line text field bound to `value`, under its visible label.
#[component]
pub fn TextField(
    label: &'static str,
    name: &'static str,
    value: RwSignal<String>,
    #[prop(optional, into)] hidden: Signal<bool>,
) -> impl IntoView {
    view! {
        <label class="reason" hidden=move || hidden.get()>
            {label}
            <input
                type="text"
                name=name
                autocomplete="off"
                prop:value=move || value.get()
                on:input=move |event| value.set(event_target_value(&event))
            />
        </label>
    }
}

/// At least this many characters of reason (the server checks the same).
const MIN_REASON: usize = 5;

/// Whether `reason` says enough for the server to take it.
pub fn reason_given(reason: RwSignal<String>) -> bool {
    reason.get().trim().chars().count() >= MIN_REASON
}

/// The reason an audited action needs; `focused`: it takes the keyboard focus when it
/// appears (in a dialog that just opened).
#[component]
pub fn ReasonField(reason: RwSignal<String>, #[prop(optional)] focused: bool) -> impl IntoView {
    let field = NodeRef::<leptos::html::Textarea>::new();
    take_focus(field, focused);
    view! {
        <label class="reason">
            "Reason (goes into the audit log)"
            <textarea
                name="reason"
                rows="2"
                node_ref=field
                prop:value=move || reason.get()
                on:input=move |event| reason.set(event_target_value(&event))
            ></textarea>
        </label>
    }
}

/// Moves the keyboard focus to `element` once it is in the page, when `wanted`.
pub fn take_focus<E>(element: NodeRef<E>, wanted: bool)
where
    E: leptos::html::ElementType,
    E::Output: AsRef<leptos::web_sys::HtmlElement> + Clone + 'static,
    NodeRef<E>: Get<Value = Option<E::Output>>,
{
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        if let Some(element) = element.get().filter(|_| wanted) {
            let _ = element.as_ref().focus();
        }
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = (element, wanted);
}

/// The reason an audited action needs, and the button that applies it: enabled once the
/// reason says something and nothing is pending.
#[component]
pub fn ReasonAndApply(
    reason: RwSignal<String>,
    #[prop(into)] pending: Signal<bool>,
    #[prop(into)] label: String,
    on_apply: impl Fn() + Send + Sync + 'static,
    #[prop(optional)] focused: bool,
) -> impl IntoView {
    view! {
        <ReasonField reason focused />
        <button
            type="button"
            class="button primary"
            disabled=move || !reason_given(reason) || pending.get()
            on:click=move |_| on_apply()
        >
            {label}
        </button>
    }
}

/// A table's head: one column header a name, those in `numbers` right-aligned as numbers;
/// `select` adds a first column for row check boxes, headed "Select" when they can be used.
#[component]
pub fn Head(
    columns: &'static [&'static str],
    #[prop(optional)] numbers: &'static [&'static str],
    #[prop(optional)] select: Option<bool>,
) -> impl IntoView {
    view! {
        <thead>
            <tr>
                {select.map(|usable| view! { <th scope="col">{usable.then_some("Select")}</th> })}
                {columns
                    .iter()
                    .map(|name| {
                        let class = numbers.contains(name).then_some("num");
                        view! { <th scope="col" class=class>{*name}</th> }
                    })
                    .collect_view()}
            </tr>
        </thead>
    }
}
