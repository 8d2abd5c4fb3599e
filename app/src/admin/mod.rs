use crate::widgets::Head;
pub mod api;
pub mod model;

use crate::admin::api::{administer, get_administration};
use crate::admin::model::{AdminChange, AdminOutcome, ApiKeyView, OperatorView, TenantView};
use crate::sign_in::api::whoami;
use crate::widgets::{Loading, Panel, Time};
use domain::operator::OperatorRole;
use leptos::prelude::*;
use strum::VariantArray;

/// An admin's page: operators, tenants and API keys, with the command line's rules. A change
/// is one server call, audited on the server; a password or key it makes is shown here once.
#[component]
pub fn AdminPage() -> impl IntoView {
    let (refreshes, set_refreshes) = signal(0_u32);
    let administration = Resource::new(move || refreshes.get(), |_| get_administration());
    let me = Resource::new(|| (), |_| whoami());
    let change = Action::new(|change: &AdminChange| administer(change.clone()));
    Effect::new(move |_| {
        if change.value().get().is_some() {
            *set_refreshes.write() += 1;
        }
    });
    let apply = move |asked: AdminChange| {
        change.dispatch(asked);
    };
    view! {
        <Panel title="Administration" heading="Administration">
            <Outcome result=Signal::derive(move || change.value().get()) />
            <Loading>
                {move || Suspend::new(async move {
                    let me = me.await.map(|me| me.username).unwrap_or_default();
                    administration
                        .await
                        .map(|administration| {
                            view! {
                                <Operators operators=administration.operators me apply />
                                <Tenants tenants=administration.tenants apply />
                            }
                        })
                })}
            </Loading>
        </Panel>
    }
}

/// What the last change did, or why it was refused; a secret it made, shown this once.
#[component]
fn Outcome(result: Signal<Option<Result<AdminOutcome, ServerFnError>>>) -> impl IntoView {
    move || {
        result.get().map(|outcome| match outcome {
            Err(error) => view! { <p class="error" role="alert">{error.to_string()}</p> }.into_any(),
            Ok(outcome) => view! {
                <div class="ok" role="status" data-admin-done>
                    <p>{outcome.done}</p>
                    {outcome.shown_once.map(|secret| view! {
                        <p>
                            "Shown this once; copy it now: "
                            <code class="secret" data-shown-once>{secret}</code>
                        </p>
                    })}
                </div>
            }
            .into_any(),
        })
    }
}

fn role_options() -> impl IntoView {
    OperatorRole::VARIANTS
        .iter()
        .map(|role| view! { <option value=role.as_str()>{role.as_str()}</option> })
        .collect_view()
}

fn parse_role(text: &str) -> OperatorRole {
    text.parse().unwrap_or(OperatorRole::Viewer)
}

#[component]
fn Operators(
    operators: Vec<OperatorView>,
    me: String,
    apply: impl Fn(AdminChange) + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let username = RwSignal::new(String::new());
    let role = RwSignal::new(OperatorRole::Viewer.as_str().to_owned());
    let rows = operators
        .into_iter()
        .map(|operator| {
            let mine = operator.username == me;
            view! { <OperatorRow operator mine apply /> }
        })
        .collect_view();
    view! {
        <h2>"Operators"</h2>
        <table class="records" aria-label="Operators">
            <Head columns=&["Username", "Role", "Standing", "Created", "Change"] />
            <tbody>{rows}</tbody>
        </table>
        <form class="filters" aria-label="New operator" on:submit=move |event| {
            event.prevent_default();
            apply(AdminChange::CreateOperator {
                username: username.get_untracked(),
                role: parse_role(&role.get_untracked()),
            });
        }>
            <label>
                "Username"
                <input type="text" name="username" autocomplete="off" required
                    prop:value=move || username.get()
                    on:input=move |event| username.set(event_target_value(&event)) />
            </label>
            <label>
                "Role"
                <select name="role" on:change=move |event| role.set(event_target_value(&event))
                    prop:value=move || role.get()>
                    {role_options()}
                </select>
            </label>
            <button type="submit" class="button">"Create operator"</button>
        </form>
    }
}

#[component]
fn OperatorRow(
    operator: OperatorView,
    mine: bool,
    apply: impl Fn(AdminChange) + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let role = RwSignal::new(operator.role.as_str().to_owned());
    let name = operator.username.clone();
    let change = move |make: fn(String) -> AdminChange| {
        let name = name.clone();
        move |_| apply(make(name.clone()))
    };
    let set_role = {
        let name = operator.username.clone();
        move |_| {
            apply(AdminChange::SetRole {
                username: name.clone(),
                role: parse_role(&role.get_untracked()),
            })
        }
    };
    let standing = if operator.disabled { "disabled" } else { "enabled" };
    view! {
        <tr data-operator-row=operator.username.clone()>
            <th scope="row">{operator.username.clone()}</th>
            <td>{operator.role.as_str()}</td>
            <td>{standing}</td>
            <td><Time at=operator.created_at.clone() /></td>
            <td class="actions">
                {if mine {
                    view! { <span class="muted">"you: another admin changes this"</span> }.into_any()
                } else {
                    view! {
                        <select aria-label=format!("role of {}", operator.username)
                            on:change=move |event| role.set(event_target_value(&event))
                            prop:value=move || role.get()>
                            {role_options()}
                        </select>
                        <button type="button" class="button" on:click=set_role>"Set role"</button>
                        {if operator.disabled {
                            view! {
                                <button type="button" class="button"
                                    on:click=change(|username| AdminChange::EnableOperator { username })>
                                    "Enable"
                                </button>
                            }.into_any()
                        } else {
                            view! {
                                <button type="button" class="button"
                                    on:click=change(|username| AdminChange::DisableOperator { username })>
                                    "Disable"
                                </button>
                            }.into_any()
                        }}
                        <button type="button" class="button"
                            on:click=change(|username| AdminChange::ResetPassword { username })>
                            "Reset password"
                        </button>
                    }.into_any()
                }}
            </td>
        </tr>
    }
}

#[component]
fn Tenants(
    tenants: Vec<TenantView>,
    apply: impl Fn(AdminChange) + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let optional = RwSignal::new(false);
    view! {
        <h2>"Tenants and API keys"</h2>
        {tenants.into_iter().map(|tenant| view! { <TenantSection tenant apply /> }).collect_view()}
        <form class="filters" aria-label="New tenant" on:submit=move |event| {
            event.prevent_default();
            apply(AdminChange::CreateTenant {
                name: name.get_untracked(),
                require_idempotency_key: !optional.get_untracked(),
            });
        }>
            <label>
                "Tenant name"
                <input type="text" name="tenant" autocomplete="off" required
                    prop:value=move || name.get()
                    on:input=move |event| name.set(event_target_value(&event)) />
            </label>
            <label class="check">
                <input type="checkbox" name="optional"
                    prop:checked=move || optional.get()
                    on:change=move |event| optional.set(event_target_checked(&event)) />
                "Payments without an Idempotency-Key allowed"
            </label>
            <button type="submit" class="button">"Create tenant"</button>
        </form>
    }
}

#[component]
fn TenantSection(
    tenant: TenantView,
    apply: impl Fn(AdminChange) + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let required = tenant.require_idempotency_key;
    let (toggle_id, key_tenant) = (tenant.id.clone(), tenant.id.clone());
    let rule = if required {
        "Idempotency-Key required"
    } else {
        "Idempotency-Key optional"
    };
    let keys = tenant
        .api_keys
        .into_iter()
        .map(|key| view! { <ApiKeyRow key apply /> })
        .collect_view();
    view! {
        <section class="tenant" data-tenant=tenant.name.clone() aria-label=format!("Tenant {}", tenant.name)>
            <h3>{tenant.name.clone()} " " <code class="muted">{tenant.id.clone()}</code></h3>
            <p>
                <span data-keys-rule>{rule}</span>
                " · created " <Time at=tenant.created_at />
                " "
                <button type="button" class="button" on:click=move |_| apply(AdminChange::SetKeysRequired {
                    tenant_id: toggle_id.clone(),
                    required: !required,
                })>
                    {if required { "Make keys optional" } else { "Require keys" }}
                </button>
                " "
                <button type="button" class="button" on:click=move |_| apply(AdminChange::CreateApiKey {
                    tenant_id: key_tenant.clone(),
                })>
                    "Create API key"
                </button>
            </p>
            <table class="records" aria-label=format!("API keys of {}", tenant.name)>
                <Head columns=&["Key id", "Created by", "Created", "Last used", "Standing"] />
                <tbody>{keys}</tbody>
            </table>
        </section>
    }
}

#[component]
fn ApiKeyRow(key: ApiKeyView, apply: impl Fn(AdminChange) + Copy + Send + Sync + 'static) -> impl IntoView {
    let id = key.id.clone();
    view! {
        <tr data-api-key=key.id.clone()>
            <th scope="row"><code>{key.id.clone()}</code></th>
            <td>{if key.created_by.is_empty() { "unknown".to_owned() } else { key.created_by }}</td>
            <td><Time at=key.created_at /></td>
            <td>{match key.last_used_at {
                Some(at) => view! { <Time at /> }.into_any(),
                None => view! { <span class="muted">"never"</span> }.into_any(),
            }}</td>
            <td>{match key.revoked_at {
                Some(at) => view! { "revoked " <Time at /> }.into_any(),
                None => view! {
                    "active "
                    <button type="button" class="button"
                        on:click=move |_| apply(AdminChange::RevokeApiKey { key_id: id.clone() })>
                        "Revoke"
                    </button>
                }.into_any(),
            }}</td>
        </tr>
    }
}
