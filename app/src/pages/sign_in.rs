use leptos::prelude::*;
use leptos_meta::Title;

/// The sign-in form's layout. Operator accounts, sessions and roles arrive with the console
/// access work; until then the form is shown disabled and says so, rather than pretending.
#[component]
pub fn SignInPage() -> impl IntoView {
    view! {
        <Title text="Sign in" />
        <section class="panel signin">
            <h1>"Sign in to the Idem console"</h1>
            <form method="post" action="/sign-in" class="stack">
                <fieldset disabled>
                    <label>
                        "E-mail" <input type="email" name="email" autocomplete="username" required />
                    </label>
                    <label>
                        "Password"
                        <input
                            type="password"
                            name="password"
                            autocomplete="current-password"
                            required
                        />
                    </label>
                    <button type="submit" class="button primary">
                        "Sign in"
                    </button>
                </fieldset>
            </form>
            <p class="muted">
                "Operator sign-in is not enabled in this build: operator accounts ("
                <code>"idem operator create"</code> ") are not available yet."
            </p>
        </section>
    }
}
