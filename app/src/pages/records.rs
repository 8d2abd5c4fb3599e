use super::overrides::OverrideRequestForm;
use super::reconcile::ReconcilePanel;
use super::recovery::{cause_text, next_look_text};
use super::widgets::{
    Choice, Loading, Panel, ReasonAndApply, StatusBadge, TextField, Time, load_error, named, reason_given,
};
use crate::api::{
    find_records, get_record, list_records, preview_late_charge_refund, refund_late_charge,
    resolve_late_charge, reveal_response, whoami,
};
use crate::dto::{
    NextLook, ReconcileResult, RecordDetail, RecordFilter, RecordRef, RecordSummary, ReleasedPaymentView,
};
use domain::operator::OperatorRole;
use domain::record::{ProgressStep, RecordStatus};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use strum::VariantArray;

/// The records browser: exact look-up (key, payment id, provider charge id) or a filtered,
/// keyset-paginated list, newest first. Filters are a GET form, so every view has a link.
#[component]
pub fn RecordsPage() -> impl IntoView {
    let query = use_query_map();
    let param = move |name: &str| query.read().get(name).unwrap_or_default();
    let filter = move || RecordFilter {
        status: param("status"),
        step: param("step"),
        tenant: param("tenant"),
        operation: param("operation"),
        key_prefix: param("key_prefix"),
        from: param("from"),
        to: param("to"),
        after: param("after"),
    };
    let needle = move || param("q");
    let page = Resource::new(filter, list_records);
    let found = Resource::new(needle, find_records);

    view! {
        <Panel title="Records" heading="Idempotency records">
            <form method="get" action="/records" class="search" role="search">
                <label>
                    "Look up "
                    <input
                        type="search"
                        name="q"
                        id="search"
                        placeholder="idempotency key, payment id, provider charge id or merchant reference   ( / )"
                        value=needle
                        autocomplete="off"
                    />
                </label>
                <button type="submit" class="button">
                    "Find"
                </button>
            </form>
            <Show when=move || !needle().is_empty()>
                <Transition fallback=|| view! { <p class="muted">"Looking…"</p> }>
                    <ErrorBoundary fallback=load_error>
                        {move || Suspend::new(async move {
                            found.await.map(|rows| view! { <RecordTable rows caption="Exact matches" /> })
                        })}
                    </ErrorBoundary>
                </Transition>
            </Show>
            <form method="get" action="/records" class="filters" aria-label="Filter records">
                <Choice label="Status" name="status" any="any" options=named(RecordStatus::VARIANTS.iter().map(|status| status.as_str())) selected=Signal::derive(move || param("status")) />
                <Choice label="Step" name="step" any="any" options=named(ProgressStep::VARIANTS.iter().map(|step| step.as_str())) selected=Signal::derive(move || param("step")) />
                <label>"Operation " <input name="operation" value=move || param("operation") size="14" /></label>
                <label>"Tenant (name or id) " <input name="tenant" value=move || param("tenant") size="14" /></label>
                <label>"Key prefix " <input name="key_prefix" value=move || param("key_prefix") size="14" /></label>
                <label>"From " <input name="from" placeholder="2026-11-29T00:00:00Z" value=move || param("from") size="20" /></label>
                <label>"To " <input name="to" value=move || param("to") size="20" /></label>
                <button type="submit" class="button">
                    "Filter"
                </button>
            </form>
            <Loading>
                {move || Suspend::new(async move {
                    page.await
                        .map(|page| {
                            let next = page.next.map(|cursor| {
                                let mut link = query.read_untracked().clone();
                                link.replace("after", cursor);
                                format!("/records{}", link.to_query_string())
                            });
                            let mut download = query.read_untracked().clone();
                            download.remove("after");
                            download.remove("q");
                            let download = format!("/console/records.csv{}", download.to_query_string());
                            view! {
                                <RecordTable rows=page.rows caption="Newest first" />
                                <a class="button" href=download download="" data-records-file>
                                    "Download every matching record (CSV, at most 100,000)"
                                </a>
                                {next.map(|href| view! { <a class="button" href=href rel="next">"Next page"</a> })}
                            }
                        })
                })}
            </Loading>
        </Panel>
    }
}

#[component]
pub fn RecordTable(rows: Vec<RecordSummary>, #[prop(into)] caption: String) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="muted">"No records."</p> }.into_any();
    }
    view! {
        <table class="records">
            <caption>{caption}</caption>
            <thead>
                <tr>
                    <th scope="col">"Key"</th>
                    <th scope="col">"Tenant"</th>
                    <th scope="col">"Operation"</th>
                    <th scope="col">"Status"</th>
                    <th scope="col">"Step"</th>
                    <th scope="col" class="num">"Amount"</th>
                    <th scope="col">"Merchant reference"</th>
                    <th scope="col">"Payment or refund"</th>
                    <th scope="col">"Created"</th>
                    <th scope="col" class="num">"Recovery tries"</th>
                </tr>
            </thead>
            <tbody>
                {rows
                    .into_iter()
                    .map(|row| {
                        view! {
                            <tr data-key=row.record.key.clone()>
                                <th scope="row">
                                    <a href=row.record.href()>{row.record.key.clone()}</a>
                                </th>
                                <td title=row.record.tenant_id.clone()>{row.tenant_name.clone()}</td>
                                <td>{row.record.operation.clone()}</td>
                                <td>
                                    <StatusBadge status=row.status />
                                </td>
                                <td>{row.step}</td>
                                <td class="num">{match (&row.amount, &row.currency) {
                                    (Some(amount), Some(currency)) => format!("{amount} {currency}"),
                                    _ => "—".to_owned(),
                                }}</td>
                                <td>{row.merchant_reference.clone().unwrap_or_default()}</td>
                                <td>{row.resource_id.unwrap_or_default()}</td>
                                <td>
                                    <Time at=row.created_at />
                                </td>
                                <td class="num">{row.recovery_attempts}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// One record's whole story: scope, fingerprint and command, every request that came with
/// the key (a different one with what it changed), the timeline and lease, the payment, its
/// events, the audit trail, and, for operators, reconciliation.
#[component]
pub fn RecordPage() -> impl IntoView {
    let params = use_params_map();
    let record = move || RecordRef {
        tenant_id: params.read().get("tenant").unwrap_or_default(),
        operation: params.read().get("operation").unwrap_or_default(),
        key: params.read().get("key").unwrap_or_default(),
    };
    let (applied, set_applied) = signal(None::<ReconcileResult>);
    let detail = Resource::new(
        move || (record(), applied.get()),
        |(record, _)| get_record(record),
    );
    let operator = Resource::new(|| (), |_| whoami());
    view! {
        <Title text="Record" />
        {move || {
            applied
                .get()
                .map(|result| {
                    view! {
                        <p class=if result.ok { "ok" } else { "error" } role="status" data-result=result.ok.to_string()>
                            "Reconciliation: "
                            {result.message}
                            {result.status.map(|status| format!("; the record is {status}"))}
                        </p>
                    }
                })
        }}
        <Loading>
            {move || Suspend::new(async move {
                let role = operator.await.map_or(OperatorRole::Viewer, |operator| operator.role);
                detail
                    .await
                    .map(|detail| match detail {
                        Some(detail) => {
                            view! {
                                <RecordView detail role applied=set_applied />
                            }
                                .into_any()
                        }
                        None => {
                            view! {
                                <section class="panel">
                                    <h1>"No such record"</h1>
                                    <p>"It may have expired and been deleted after its retention period."</p>
                                </section>
                            }
                                .into_any()
                        }
                    })
            })}
        </Loading>
    }
}

/// A payment the key released, and a charge the provider showed for it after all: for an
/// operator to refund from here (guarded, through create_refund), or, refunded by other means,
/// to mark refunded with the refund's reference.
#[component]
fn ReleasedPayment(
    payment: ReleasedPaymentView,
    record: RecordRef,
    role: OperatorRole,
    applied: WriteSignal<Option<ReconcileResult>>,
) -> impl IntoView {
    let unresolved = payment.late_charge_id.is_some() && payment.late_charge_resolved.is_none();
    let reference = RwSignal::new(String::new());
    let payment_id = payment.id.clone();
    let target = record.clone();
    let resolve = Action::new(move |reference: &String| {
        resolve_late_charge(target.clone(), payment_id.clone(), reference.clone())
    });
    let failed_on = record.clone();
    Effect::new(move |_| {
        if let Some(outcome) = resolve.value().get() {
            applied.set(Some(outcome.unwrap_or_else(|error| ReconcileResult {
                record: failed_on.clone(),
                ok: false,
                status: None,
                message: error.to_string(),
            })));
        }
    });
    view! {
        <li data-released=payment.id.clone() class:alarm=unresolved>
            <code>{payment.id.clone()}</code>
            " declined and released "
            <Time at=payment.released_at />
            {payment
                .late_charge_id
                .map(|charge| format!(": the provider charged it after all ({charge})"))}
            {match payment.late_charge_resolved {
                Some(resolution) => {
                    view! {
                        <span data-late-charge="resolved">
                            {format!("; refunded: “{}”, said {} ", resolution.reference, resolution.by)}
                            <Time at=resolution.at />
                        </span>
                    }
                        .into_any()
                }
                None if unresolved && role >= OperatorRole::Operator => {
                    view! {
                        <span data-late-charge="unresolved">"; refund it:"</span>
                        <LateChargeRefund record=record.clone() payment_id=payment.id.clone() applied />
                        <span>"or, once refunded at the provider by other means:"</span>
                        <TextField
                            label="Refund reference (goes into the audit log)"
                            name="reference"
                            value=reference
                        />
                        <button
                            type="button"
                            class="button"
                            disabled=move || !reason_given(reference) || resolve.pending().get()
                            on:click=move |_| {
                                resolve.dispatch(reference.get_untracked());
                            }
                        >
                            "Mark refunded"
                        </button>
                    }
                        .into_any()
                }
                None if unresolved => view! { <span data-late-charge="unresolved">"; refund it"</span> }.into_any(),
                None => ().into_any(),
            }}
        </li>
    }
}

/// The guarded refund of a late charge: a preview of what the provider will be asked, a typed
/// reason, then the refund (through create_refund, under a key derived from the charge, so a
/// second click or operator cannot refund twice).
#[component]
fn LateChargeRefund(
    record: RecordRef,
    payment_id: String,
    applied: WriteSignal<Option<ReconcileResult>>,
) -> impl IntoView {
    let target = (record.clone(), payment_id.clone());
    let preview = Action::new(move |(): &()| {
        let (record, payment_id) = target.clone();
        preview_late_charge_refund(record, payment_id)
    });
    let reason = RwSignal::new(String::new());
    let target = (record.clone(), payment_id);
    let refund = Action::new(move |reason: &String| {
        let (record, payment_id) = target.clone();
        refund_late_charge(record, payment_id, reason.clone())
    });
    Effect::new(move |_| {
        if let Some(outcome) = refund.value().get() {
            applied.set(Some(outcome.unwrap_or_else(|error| ReconcileResult {
                record: record.clone(),
                ok: false,
                status: None,
                message: error.to_string(),
            })));
        }
    });
    view! {
        <div class="late-charge-refund" role="group" aria-label="Refund the late charge">
            <button type="button" class="button" on:click=move |_| { preview.dispatch(()); }>
                "Preview the refund"
            </button>
            {move || {
                preview
                    .value()
                    .get()
                    .map(|previewed| match previewed {
                        Err(error) => view! { <p class="error" role="alert">{error.to_string()}</p> }.into_any(),
                        Ok(previewed) => {
                            view! {
                                <div data-refund-preview=previewed.key.clone()>
                                    <ul class="changes">
                                        {previewed.steps.into_iter().map(|step| view! { <li>{step}</li> }).collect_view()}
                                    </ul>
                                    <ReasonAndApply
                                        reason
                                        pending=refund.pending()
                                        label="Refund"
                                        on_apply=move || {
                                            refund.dispatch(reason.get_untracked());
                                        }
                                    />
                                </div>
                            }
                                .into_any()
                        }
                    })
            }}
        </div>
    }
}

/// Why the record's outcome is unknown, in words, and whether the worker still looks: the
/// first thing an operator reads on an unresolved record (and the history on a settled one).
fn why_unknown_view(detail: &RecordDetail) -> Option<impl IntoView + use<>> {
    if detail.unknown_cause.is_none() && detail.last_error.is_none() {
        return None;
    }
    let unresolved = detail.status == RecordStatus::UnknownRequiresRecovery;
    let heading = if unresolved {
        "Why the outcome is unknown"
    } else {
        "Why the outcome was unknown"
    };
    let cause = cause_text(detail.unknown_cause);
    let last = detail.last_error.clone().map(|error| {
        view! {
            <p data-last-error>
                "Latest failure: " {error} " ("
                <Time at=detail.last_error_at.clone().unwrap_or_default() />
                ")"
            </p>
        }
    });
    let next = detail.next_look.clone().map(|next| {
        let gave_up = matches!(next, NextLook::GaveUp(_));
        view! {
            <p data-next-look data-gave-up=gave_up.to_string()>
                {next_look_text(&next)}
            </p>
        }
    });
    Some(view! {
        <section class="panel why" data-why-unknown>
            <h2>{heading}</h2>
            <p data-cause>{cause}</p>
            {last}
            {next}
        </section>
    })
}

#[component]
fn RecordView(
    detail: RecordDetail,
    role: OperatorRole,
    applied: WriteSignal<Option<ReconcileResult>>,
) -> impl IntoView {
    let needs_operator = matches!(
        detail.status,
        RecordStatus::UnknownRequiresRecovery | RecordStatus::InProgress
    );
    let command = serde_json_pretty(&detail.canonical_command);
    let field = |name: &'static str, value: String| {
        view! {
            <dt>{name}</dt>
            <dd>{value}</dd>
        }
    };
    let optional = |value: &Option<String>| value.clone().unwrap_or_else(|| "—".to_owned());
    view! {
        <section class="panel" data-record-status=detail.status.as_str()>
            <div class="panel-head">
                <h1>"Record " <code>{detail.record.key.clone()}</code></h1>
                <StatusBadge status=detail.status />
            </div>
            <dl class="fields">
                {field("Tenant", detail.record.tenant_id.clone())}
                {field("Operation", detail.record.operation.clone())}
                {field("Step", detail.step.clone())}
                {field("Outcome kept by the tombstone", optional(&detail.settled_status))}
                {field("Fingerprint", format!("v{} {}", detail.fingerprint_version, detail.fingerprint))}
                {field(resource_name(&detail.record.operation), optional(&detail.resource_id))}
                {field(provider_reference_name(&detail.record.operation), optional(&detail.provider_reference))}
                {field("Stored answer", detail.response_status_code.map_or_else(|| "—".to_owned(), |code| code.to_string()))}
                {field("Created by API key", detail.created_by.clone())}
            </dl>
            <h2>"Command"</h2>
            <pre class="command">{command}</pre>
        </section>
        {why_unknown_view(&detail)}
        <section class="panel">
            <h2>"What happened, in order"</h2>
            <ol class="timeline" aria-label="Everything that happened to the record, oldest first">
                {detail
                    .timeline
                    .iter()
                    .map(|entry| {
                        view! {
                            <li data-kind=entry.kind.as_str()>
                                <Time at=entry.at.clone() />
                                " "
                                <span class="kind">{entry.kind.as_str()}</span>
                                " "
                                {entry.text.clone()}
                            </li>
                        }
                    })
                    .collect_view()}
            </ol>
        </section>
        {(role >= OperatorRole::Operator && needs_operator)
            .then(|| view! { <ReconcilePanel record=detail.record.clone() applied /> })}
        {(role >= OperatorRole::Admin && needs_operator)
            .then(|| view! { <OverrideRequestForm record=detail.record.clone() version=detail.lease_version /> })}
        <section class="panel">
            <h2>"Requests with this key"</h2>
            {detail
                .replays
                .as_ref()
                .map(|replays| {
                    view! {
                        <p class="replays" data-replays=replays.count.to_string()>
                            {replays.text()}
                        </p>
                    }
                })}
            <table class="requests">
                <thead>
                    <tr>
                        <th scope="col">"At"</th>
                        <th scope="col">"Answer"</th>
                        <th scope="col">"Request"</th>
                    </tr>
                </thead>
                <tbody>
                    {detail
                        .requests
                        .into_iter()
                        .map(|request| {
                            let answer = match &request.error_code {
                                Some(code) => format!("{} {code}", request.status_code),
                                None => request.status_code.to_string(),
                            };
                            view! {
                                <tr data-same=request.same_request.to_string()>
                                    <td>
                                        <Time at=request.at />
                                    </td>
                                    <td>{answer}</td>
                                    <td>
                                        {if request.same_request {
                                            view! { <span class="muted">"same request"</span> }.into_any()
                                        } else {
                                            view! {
                                                <ul class="diff">
                                                    {request
                                                        .changes
                                                        .into_iter()
                                                        .map(|change| {
                                                            view! {
                                                                <li data-field=change.field.clone()>
                                                                    <code>{change.field.clone()}</code>
                                                                    " "
                                                                    <del>{change.before}</del>
                                                                    " -> "
                                                                    <ins>{change.after}</ins>
                                                                </li>
                                                            }
                                                        })
                                                        .collect_view()}
                                                </ul>
                                            }
                                                .into_any()
                                        }}
                                    </td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </section>
        <StoredResponse record=detail.record.clone() can_reveal={role >= OperatorRole::Operator} />
        <section class="panel">
            <h2>"Timeline and lease"</h2>
            <ol class="steps" aria-label="Steps, oldest first">
                {detail
                    .steps
                    .into_iter()
                    .map(|step| {
                        let owner = step.lease_owner.map(|owner| format!(", owner {owner}")).unwrap_or_default();
                        let status = step.status.clone();
                        view! {
                            <li data-status=status>
                                <Time at=step.at />
                                " "
                                <strong>{step.status}</strong>
                                " at step "
                                <code>{step.step}</code>
                                {format!(" (lease version {}{owner})", step.lease_version)}
                            </li>
                        }
                    })
                    .collect_view()}
            </ol>
            <dl class="fields">
                {field("This execution began as", claimed_as_text(&detail.claimed_as).to_owned())}
                {field("Created", detail.created_at)}
                {field("Updated", detail.updated_at)}
                {field("Completed", optional(&detail.completed_at))}
                {field("Window ends", detail.expires_at)}
                {field("Lease owner", optional(&detail.lease_owner))}
                {field("Lease version", detail.lease_version.to_string())}
                {field("Lease until", optional(&detail.locked_until))}
                {field("Recovery attempts", detail.recovery_attempts.to_string())}
                {field("Next recovery", detail.next_look.as_ref().map_or_else(|| "—".to_owned(), next_look_text))}
                {field("Retries after expiry", detail.expired_retries.to_string())}
            </dl>
        </section>
        {(!detail.released_payments.is_empty())
            .then(|| {
                view! {
                    <section class="panel">
                        <h2>"Payments this key released"</h2>
                        <ul class="released">
                            {detail
                                .released_payments
                                .into_iter()
                                .map(|payment| {
                                    view! { <ReleasedPayment payment record=detail.record.clone() role applied /> }
                                })
                                .collect_view()}
                        </ul>
                    </section>
                }
            })}
        {detail
            .refund
            .map(|refund| {
                let (id, status) = (refund.id.clone(), refund.status.clone());
                view! {
                    <section class="panel" data-refund=id>
                        <h2>"Refund"</h2>
                        <dl class="fields" data-refund-status=status>
                            {field("Refund", refund.id)}
                            {field("Payment", refund.payment_id)}
                            {field("Amount", format!("{} {}", refund.amount, refund.currency))}
                            {field("Reason", refund.reason)}
                            {field("Reference", refund.reference)}
                            {field("Status", refund.status)}
                            {field("Provider refund", refund.provider_refund_id.unwrap_or_else(|| "—".to_owned()))}
                        </dl>
                    </section>
                }
            })}
        <section class="panel">
            <h2>"Payment and events"</h2>
            {detail
                .payment
                .map(|payment| {
                    let status = payment.status.clone();
                    view! {
                        <dl class="fields" data-payment-status=status>
                            {field("Payment", payment.id)}
                            {field("Account", payment.account_id)}
                            {field("Amount", format!("{} {}", payment.amount, payment.currency))}
                            {field("Merchant reference", payment.merchant_reference)}
                            {field("Status", payment.status)}
                            {field("Provider charge", payment.provider_charge_id.unwrap_or_else(|| "—".to_owned()))}
                        </dl>
                    }
                })}
            {(!detail.refunds.is_empty())
                .then(|| {
                    view! {
                        <h3>"Refunds of this payment"</h3>
                        <table class="refunds">
                            <thead>
                                <tr>
                                    <th scope="col">"Refund"</th>
                                    <th scope="col">"Amount"</th>
                                    <th scope="col">"Reason"</th>
                                    <th scope="col">"Reference"</th>
                                    <th scope="col">"Status"</th>
                                    <th scope="col">"Made"</th>
                                </tr>
                            </thead>
                            <tbody>
                                {detail
                                    .refunds
                                    .into_iter()
                                    .map(|refund| {
                                        let (row, id, status) = (refund.id.clone(), refund.id.clone(), refund.status.clone());
                                        view! {
                                            <tr data-payment-refund=row data-refund-status=status>
                                                <td>
                                                    {match refund.record {
                                                        Some(record) => view! { <a href=record.href()><code>{id}</code></a> }.into_any(),
                                                        None => view! { <code>{id}</code> }.into_any(),
                                                    }}
                                                </td>
                                                <td>{format!("{} {}", refund.amount, refund.currency)}</td>
                                                <td>{refund.reason}</td>
                                                <td>{refund.reference}</td>
                                                <td>{refund.status}</td>
                                                <td><Time at=refund.created_at /></td>
                                            </tr>
                                        }
                                    })
                                    .collect_view()}
                            </tbody>
                        </table>
                    }
                })}
            <ul class="events">
                {detail
                    .events
                    .into_iter()
                    .map(|event| {
                        view! {
                            <li>
                                <code>{event.event_type}</code>
                                " "
                                <Time at=event.created_at />
                                {event.published_at.map_or(" (not yet published)".to_owned(), |_| " (published)".to_owned())}
                            </li>
                        }
                    })
                    .collect_view()}
            </ul>
        </section>
        <section class="panel">
            <h2>"Audit"</h2>
            <super::audit::AuditTable entries=detail.audit />
        </section>
    }
}

/// What a record of `operation` made, as its field is named.
fn resource_name(operation: &str) -> &'static str {
    match operation {
        "create_refund" => "Refund",
        _ => "Payment",
    }
}

/// The provider's reference for it, as its field is named.
fn provider_reference_name(operation: &str) -> &'static str {
    match operation {
        "create_refund" => "Provider refund",
        _ => "Provider charge",
    }
}

fn claimed_as_text(claimed_as: &str) -> &str {
    match claimed_as {
        "new" => "the key's first request",
        "after_expiry" => "a retry after the window (a new operation)",
        "after_release" => "a retry after an operator released the key",
        other => other,
    }
}

/// The stored response stays masked until an operator reveals it; the server audits every
/// reveal before it returns anything.
#[component]
fn StoredResponse(record: RecordRef, can_reveal: bool) -> impl IntoView {
    let reveal = Action::new(|record: &RecordRef| reveal_response(record.clone()));
    view! {
        <section class="panel">
            <h2>"Stored response"</h2>
            {move || match reveal.value().get() {
                None => {
                    let record = record.clone();
                    view! {
                        <p class="muted">"Masked: stored responses are sensitive."</p>
                        {can_reveal
                            .then(|| {
                                view! {
                                    <button type="button" class="button" on:click=move |_| { reveal.dispatch(record.clone()); }>
                                        "Reveal (audited)"
                                    </button>
                                }
                            })}
                    }
                        .into_any()
                }
                Some(Ok(Some(response))) => {
                    view! {
                        <p>"Status " <strong data-revealed-status>{response.status}</strong></p>
                        <pre class="command" data-revealed-body>{response.body}</pre>
                    }
                        .into_any()
                }
                Some(Ok(None)) => view! { <p class="muted">"No stored response (not settled, or purged after the window)."</p> }.into_any(),
                Some(Err(error)) => view! { <p class="error" role="alert">{error.to_string()}</p> }.into_any(),
            }}
        </section>
    }
}

/// The canonical command, indented for reading (it is stored compact).
fn serde_json_pretty(canonical: &str) -> String {
    if canonical.is_empty() {
        return "(purged when the record expired)".to_owned();
    }
    serde_json::from_str::<serde_json::Value>(canonical)
        .and_then(|value| serde_json::to_string_pretty(&value))
        .unwrap_or_else(|_| canonical.to_owned())
}
