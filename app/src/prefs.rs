//! The operator's display preferences, remembered in this browser: theme (system, light,
//! dark) and whether times show in UTC or local time. The server always renders UTC and the
//! system theme; the browser applies the stored choice once it has taken over.

use leptos::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Theme {
    System,
    Light,
    Dark,
}

impl Theme {
    const fn as_str(self) -> &'static str {
        match self {
            Theme::System => "system",
            Theme::Light => "light",
            Theme::Dark => "dark",
        }
    }

    const fn next(self) -> Theme {
        match self {
            Theme::System => Theme::Light,
            Theme::Light => Theme::Dark,
            Theme::Dark => Theme::System,
        }
    }

    #[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
    fn parse(text: &str) -> Theme {
        [Theme::Light, Theme::Dark]
            .into_iter()
            .find(|theme| theme.as_str() == text)
            .unwrap_or(Theme::System)
    }
}

#[derive(Clone, Copy)]
pub struct Prefs {
    pub theme: RwSignal<Theme>,
    /// Local time instead of UTC.
    pub local_times: RwSignal<bool>,
}

/// Provides the preferences; in the browser, loads them, applies the theme to the document,
/// and stores every change.
pub fn provide_prefs() {
    let prefs = Prefs {
        theme: RwSignal::new(Theme::System),
        local_times: RwSignal::new(false),
    };
    provide_context(prefs);
    #[cfg(feature = "hydrate")]
    {
        let storage = || window().local_storage().ok().flatten();
        Effect::new(move |_| {
            if let Some(storage) = storage() {
                if let Ok(Some(theme)) = storage.get_item("idem.theme") {
                    prefs.theme.set(Theme::parse(&theme));
                }
                if let Ok(Some(zone)) = storage.get_item("idem.times") {
                    prefs.local_times.set(zone == "local");
                }
            }
        });
        Effect::new(move |_| {
            let theme = prefs.theme.get();
            if let Some(root) = document().document_element() {
                let _ = root.set_attribute("data-theme", theme.as_str());
            }
            if let Some(storage) = storage() {
                let _ = storage.set_item("idem.theme", theme.as_str());
                let _ = storage.set_item(
                    "idem.times",
                    if prefs.local_times.get() { "local" } else { "utc" },
                );
            }
        });
    }
}

pub fn prefs() -> Prefs {
    use_context::<Prefs>().unwrap_or(Prefs {
        theme: RwSignal::new(Theme::System),
        local_times: RwSignal::new(false),
    })
}

/// An RFC 3339 UTC time as the operator chose to read it.
pub fn shown_time(utc: &str, local: bool) -> String {
    if !local {
        return utc.to_owned();
    }
    #[cfg(feature = "hydrate")]
    {
        let date = js_sys::Date::new(&leptos::wasm_bindgen::JsValue::from_str(utc));
        if !date.get_time().is_nan() {
            return String::from(date.to_locale_string("default", &leptos::wasm_bindgen::JsValue::UNDEFINED));
        }
    }
    utc.to_owned()
}

/// The topbar's switches.
#[component]
pub fn PrefSwitches() -> impl IntoView {
    let prefs = prefs();
    view! {
        <div class="prefs">
            <button
                type="button"
                class="button link"
                title="Theme: system, light or dark"
                on:click=move |_| prefs.theme.update(|theme| *theme = theme.next())
            >
                {move || format!("Theme: {}", prefs.theme.get().as_str())}
            </button>
            <button
                type="button"
                class="button link"
                title="Show times in UTC or in this browser's time zone"
                on:click=move |_| prefs.local_times.update(|local| *local = !*local)
            >
                {move || if prefs.local_times.get() { "Times: local" } else { "Times: UTC" }}
            </button>
        </div>
    }
}
