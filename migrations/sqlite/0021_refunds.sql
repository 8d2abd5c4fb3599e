-- SQLite dialect of migrations/postgres/0021. SQLite cannot change a table's constraints, so
-- outbox_events (its event types) and ledger_transactions (its uniqueness) are rebuilt inside
-- the migration's transaction. ledger_postings refers to ledger_transactions, so foreign keys
-- are checked at commit (deferred): the old table's rows are kept aside, the table dropped and
-- made again under its own name, and its rows put back, which leaves no posting orphaned.
pragma defer_foreign_keys = on;

create table refunds (
    id text primary key,
    tenant_id text not null,
    payment_id text not null references payments (id),
    amount_minor integer not null check (amount_minor > 0),
    currency text not null,
    reason text not null check (reason in ('requested_by_customer', 'duplicate', 'fraudulent')),
    reference text not null,
    status text not null check (status in ('PROCESSING', 'SUCCEEDED', 'FAILED')),
    provider_refund_id text,
    idempotency_key text,
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    unique (payment_id, reference)
) strict;
create index refunds_tenant_created on refunds (tenant_id, created_at);

alter table payments add column refunded_minor integer not null default 0
    check (refunded_minor >= 0 and refunded_minor <= amount_minor);

create table outbox_events_rebuilt (
    id text primary key,
    payment_id text not null references payments (id),
    event_type text not null check (event_type in (
        'PaymentCreated', 'PaymentAuthorized', 'PaymentDeclined', 'PaymentSettled',
        'RefundCreated', 'RefundSucceeded', 'RefundFailed'
    )),
    payload text not null,
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    published_at text,
    attempts integer not null default 0,
    claimed_until text,
    next_attempt_at text,
    last_error text,
    dead_at text
) strict;
insert into outbox_events_rebuilt (id, payment_id, event_type, payload, created_at, published_at,
    attempts, claimed_until, next_attempt_at, last_error, dead_at)
select id, payment_id, event_type, payload, created_at, published_at, attempts, claimed_until,
    next_attempt_at, last_error, dead_at from outbox_events;
drop table outbox_events;
alter table outbox_events_rebuilt rename to outbox_events;
create index outbox_events_unpublished on outbox_events (created_at) where published_at is null;
create index outbox_events_payment on outbox_events (payment_id);
create index outbox_events_created on outbox_events (created_at);

create temporary table ledger_transactions_kept as
select id, entry_type, source_payment_id, created_at from ledger_transactions;
drop table ledger_transactions;
create table ledger_transactions (
    id text primary key,
    entry_type text not null,
    source_payment_id text not null references payments (id),
    source_refund_id text references refunds (id),
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) strict;
insert into ledger_transactions (id, entry_type, source_payment_id, created_at)
select id, entry_type, source_payment_id, created_at from ledger_transactions_kept;
drop table ledger_transactions_kept;
create unique index ledger_transactions_payment_once on ledger_transactions (entry_type, source_payment_id)
    where source_refund_id is null;
create unique index ledger_transactions_refund_once on ledger_transactions (entry_type, source_refund_id)
    where source_refund_id is not null;
