-- Refunds: the second keyed operation. A refund belongs to one payment; its business key is
-- (payment, reference). What a payment has refunded or is refunding (succeeded and
-- processing refunds) is kept on the payment, and the database itself refuses more than the
-- payment's amount: a conditional update on the payment row decides every race.
create table refunds (
    id text primary key,
    tenant_id text not null,
    payment_id text not null references payments (id),
    amount_minor bigint not null check (amount_minor > 0),
    currency text not null,
    reason text not null check (reason in ('requested_by_customer', 'duplicate', 'fraudulent')),
    reference text not null,
    status text not null check (status in ('PROCESSING', 'SUCCEEDED', 'FAILED')),
    provider_refund_id text,
    idempotency_key text,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    unique (payment_id, reference)
);
create index refunds_tenant_created on refunds (tenant_id, created_at);

alter table payments add column refunded_minor bigint not null default 0;
alter table payments add constraint payments_refunded_within_amount
    check (refunded_minor >= 0 and refunded_minor <= amount_minor);

alter table outbox_events drop constraint outbox_events_event_type_check;
alter table outbox_events add constraint outbox_events_event_type_check check (event_type in (
    'PaymentCreated', 'PaymentAuthorized', 'PaymentDeclined', 'PaymentSettled',
    'RefundCreated', 'RefundSucceeded', 'RefundFailed'
));

-- The ledger books a payment once (unique per entry type and payment) and each refund once
-- (unique per entry type and refund); a payment may have several refunds.
alter table ledger_transactions add column source_refund_id text references refunds (id);
alter table ledger_transactions drop constraint ledger_transactions_entry_type_source_payment_id_key;
create unique index ledger_transactions_payment_once on ledger_transactions (entry_type, source_payment_id)
    where source_refund_id is null;
create unique index ledger_transactions_refund_once on ledger_transactions (entry_type, source_refund_id)
    where source_refund_id is not null;
