pub mod api;
pub mod model;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

/// The sign-in form: a plain HTML form posted to the server (it works without JavaScript).
#[component]
pub fn SignInPage() -> impl IntoView {
    let query = use_query_map();
    let next = move || query.read().get("next").unwrap_or_else(|| "/".to_owned());
    let problem = move || match query.read().get("error").as_deref() {
        Some("invalid") => Some("That username and password do not match an active operator."),
        Some("limited") => Some("Too many attempts. Wait a minute, then try again."),
        _ => None,
    };
    view! {
        <Title text="Sign in" />
        <section class="panel signin">
            <h1>"Sign in to the Idem console"</h1>
            {move || problem().map(|text| view! { <p class="error" role="alert">{text}</p> })}
            <form method="post" action="/sign-in" class="stack">
                <input type="hidden" name="next" value=next />
                <label>
                    "Username"
                    <input type="text" name="username" autocomplete="username" required autofocus />
                </label>
                <label>
                    "Password"
                    <input type="password" name="password" autocomplete="current-password" required />
                </label>
                <button type="submit" class="button primary">
                    "Sign in"
                </button>
            </form>
            <p class="muted">"Accounts are made with " <code>"idem operator create"</code> "."</p>
        </section>
    }
}
