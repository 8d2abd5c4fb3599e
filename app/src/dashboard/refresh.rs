//! The dashboard's refresh: by hand, or every chosen interval while the tab is visible.

use leptos::prelude::*;

/// The refresh button and the auto-refresh interval (remembered in this browser).
#[component]
pub(super) fn RefreshControls(
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
pub(crate) fn auto_refresh(visible: RwSignal<bool>, refresh: impl Fn() + Clone + Send + Sync + 'static) {
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
