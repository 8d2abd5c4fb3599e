//! The console's pages and the document shell around them.

mod overview;
mod sign_in;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    StaticSegment,
    components::{A, Route, Router, Routes},
};

pub use overview::OverviewPage;
pub use sign_in::SignInPage;

/// The HTML document the server renders around the app.
pub fn shell(options: LeptosOptions) -> impl IntoView {
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

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();

    view! {
        <Stylesheet id="idem-style" href="/pkg/idem.css" />
        <Title formatter=|page: String| format!("{page} · Idem") />
        <Router>
            <header class="topbar">
                <A href="/" attr:class="brand">
                    "Idem"
                </A>
                <nav>
                    <A href="/">"Overview"</A>
                </nav>
                <SignedInAs />
            </header>
            <main>
                <Routes fallback=NotFound>
                    <Route path=StaticSegment("") view=OverviewPage />
                    <Route path=StaticSegment("sign-in") view=SignInPage />
                </Routes>
            </main>
        </Router>
    }
}

/// The operator this console is signed in as, and the way out; a sign-in link otherwise.
#[component]
fn SignedInAs() -> impl IntoView {
    let operator = Resource::new(|| (), |_| crate::api::whoami());
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match operator.await {
                    Ok(operator) => {
                        view! {
                            <div class="who">
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
        <Title text="Not found" />
        <section class="panel">
            <h1>"Not found"</h1>
            <p>"There is no console page at this address."</p>
            <A href="/">"Back to the overview"</A>
        </section>
    }
}
