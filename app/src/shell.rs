//! The document shell, the app's frame and its routes.

use crate::admin::AdminPage;
use crate::audit::AuditPage;
use crate::dashboard::DashboardPage;
use crate::events::EventsPage;
use crate::prefs;
use crate::records::{RecordPage, RecordsPage};
use crate::recovery::{BulkJobPage, BulkJobsPage, RecoveryPage};
use crate::sign_in::SignInPage;
use crate::widgets::Panel;
use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    ParamSegment, SsrMode, StaticSegment,
    components::{A, Route, Router, Routes},
};

/// The HTML document the server renders around the app.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    #[cfg(feature = "ssr")]
    set_content_security_policy();
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <AutoReload options=options.clone() />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// Every page may run only the console's own scripts, and inline ones only with this response's
/// nonce (Leptos puts it on its hydration and resource scripts); it loads nothing from
/// elsewhere and may not be framed.
#[cfg(feature = "ssr")]
fn set_content_security_policy() {
    let Some(nonce) = leptos::nonce::use_nonce() else {
        return;
    };
    let policy = format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
         base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    );
    if let (Some(response), Ok(value)) = (
        use_context::<leptos_axum::ResponseOptions>(),
        http::HeaderValue::from_str(&policy),
    ) {
        response.insert_header(http::header::CONTENT_SECURITY_POLICY, value);
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    prefs::provide_prefs();
    focus_search_on_slash();
    // Effects run only in the browser: this marks the moment the wasm app took over.
    let (hydrated, set_hydrated) = signal(false);
    Effect::new(move |_| set_hydrated.set(true));

    view! {
        <Stylesheet id="idem-style" href="/pkg/idem.css" />
        <Title formatter=|page: String| format!("{page} · Idem") />
        <Router>
            <header class="topbar" data-hydrated=move || hydrated.get().to_string()>
                <A href="/" attr:class="brand">
                    "Idem"
                </A>
                <nav>
                    <A href="/" exact=true>"Dashboard"</A>
                    <A href="/records">"Records"</A>
                    <A href="/recovery">"Recovery"</A>
                    <A href="/events">"Events"</A>
                    <A href="/audit">"Audit"</A>
                </nav>
                <prefs::PrefSwitches />
                <SignedInAs />
            </header>
            // Every page waits for its data on the server (SsrMode::Async): the HTML is complete
            // without JavaScript.
            <main>
                <Routes fallback=NotFound>
                    <Route path=StaticSegment("") view=DashboardPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("records") view=RecordsPage ssr=SsrMode::Async />
                    <Route
                        path=(
                            StaticSegment("records"),
                            ParamSegment("tenant"),
                            ParamSegment("operation"),
                            ParamSegment("key"),
                        )
                        view=RecordPage
                        ssr=SsrMode::Async
                    />
                    <Route path=StaticSegment("recovery") view=RecoveryPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("recovery"), StaticSegment("jobs")) view=BulkJobsPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("recovery"), StaticSegment("jobs"), ParamSegment("id")) view=BulkJobPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("events") view=EventsPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("audit") view=AuditPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("admin") view=AdminPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("sign-in") view=SignInPage ssr=SsrMode::Async />
                </Routes>
            </main>
        </Router>
    }
}

/// `/` anywhere outside a text field jumps to the record look-up.
fn focus_search_on_slash() {
    #[cfg(feature = "hydrate")]
    {
        use leptos::wasm_bindgen::JsCast;
        let handle = window_event_listener(leptos::ev::keydown, |event| {
            let typing = event
                .target()
                .and_then(|target| target.dyn_into::<leptos::web_sys::Element>().ok())
                .is_some_and(|element| {
                    matches!(element.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT")
                });
            if event.key() != "/" || typing {
                return;
            }
            event.prevent_default();
            match document().get_element_by_id("search") {
                Some(search) => {
                    if let Ok(search) = search.dyn_into::<leptos::web_sys::HtmlElement>() {
                        let _ = search.focus();
                    }
                }
                None => {
                    let _ = window().location().set_href("/records");
                }
            }
        });
        on_cleanup(move || handle.remove());
    }
}

/// The operator this console is signed in as, and the way out; a sign-in link otherwise.
#[component]
fn SignedInAs() -> impl IntoView {
    let operator = Resource::new(|| (), |_| crate::sign_in::api::whoami());
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match operator.await {
                    Ok(operator) => {
                        view! {
                            <div class="who">
                                {(operator.role == domain::operator::OperatorRole::Admin)
                                    .then(|| view! { <A href="/admin">"Administration"</A> })}
                                <span data-operator=operator.username.clone()>
                                    {operator.username.clone()}
                                    " "
                                    <span class="role">{operator.role.as_str()}</span>
                                </span>
                                <form method="post" action="/sign-out">
                                    <button type="submit" class="button link">
                                        "Sign out"
                                    </button>
                                </form>
                            </div>
                        }
                            .into_any()
                    }
                    Err(_) => {
                        view! {
                            <A href="/sign-in" attr:class="signin-link">
                                "Sign in"
                            </A>
                        }
                            .into_any()
                    }
                }
            })}
        </Transition>
    }
}

/// Rendered for unknown console paths; the server's fallback answers it with `404`.
#[component]
fn NotFound() -> impl IntoView {
    view! {
        <Panel title="Not found" heading="Not found">
            <p>"There is no console page at this address."</p>
            <A href="/">"Back to the dashboard"</A>
        </Panel>
    }
}
