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
    let prefs = super::prefs::prefs();
    let (datetime, title) = (at.clone(), at.clone());
    view! {
        <time datetime=datetime class="ts" title=title>
            {move || super::prefs::shown_time(&at, prefs.local_times.get())}
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

/// A time series as an SVG bar chart, drawn on the server: no script, no chart library.
/// `data-total` carries the sum for tests and screen readers get it as the title.
#[component]
pub fn BarChart(
    #[prop(into)] label: String,
    points: Vec<u64>,
    total: u64,
    #[prop(into)] outcome: String,
) -> impl IntoView {
    const WIDTH: f64 = 300.0;
    const HEIGHT: f64 = 64.0;
    let max = points.iter().copied().max().unwrap_or(0).max(1) as f64;
    let slot = WIDTH / points.len().max(1) as f64;
    let bars = points
        .iter()
        .enumerate()
        .filter(|(_, value)| **value > 0)
        .map(|(index, value)| {
            let height = (*value as f64 / max * (HEIGHT - 4.0)).max(1.0);
            view! {
                <rect
                    x=format!("{:.1}", index as f64 * slot + 0.5)
                    y=format!("{:.1}", HEIGHT - height)
                    width=format!("{:.1}", (slot - 1.0).max(0.5))
                    height=format!("{height:.1}")
                >
                    <title>{value.to_string()}</title>
                </rect>
            }
        })
        .collect_view();
    let title = format!("{label}: {total} in the range, at most {} per step", max as u64);
    view! {
        <figure class="chart" data-series=outcome data-total=total.to_string()>
            <figcaption>
                <span>{label}</span>
                <strong class="num">{total}</strong>
            </figcaption>
            <svg viewBox=format!("0 0 {WIDTH} {HEIGHT}") role="img" preserveAspectRatio="none">
                <title>{title}</title>
                <line x1="0" y1=HEIGHT x2=WIDTH y2=HEIGHT class="axis" />
                {bars}
            </svg>
        </figure>
    }
}

/// Seconds as an operator reads them: `42 s`, `7 min`, `3 h`.
pub fn age(seconds: f64) -> String {
    let seconds = seconds.max(0.0).round() as u64;
    match seconds {
        0..120 => format!("{seconds} s"),
        120..7200 => format!("{} min", seconds / 60),
        _ => format!("{} h", seconds / 3600),
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
