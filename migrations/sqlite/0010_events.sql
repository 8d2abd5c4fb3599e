-- SQLite dialect of migrations/postgres/0010.
alter table outbox_events add column claimed_until text;
alter table outbox_events add column next_attempt_at text;
alter table outbox_events add column last_error text;
alter table outbox_events add column dead_at text;

create table consumer_inbox (
    consumer_name text not null,
    message_id text not null,
    processed_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    primary key (consumer_name, message_id)
) strict;

create table ledger_transactions (
    id text primary key,
    entry_type text not null,
    source_payment_id text not null references payments (id),
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    unique (entry_type, source_payment_id)
) strict;
create table ledger_postings (
    transaction_id text not null references ledger_transactions (id),
    account text not null,
    amount_minor integer not null,
    currency text not null,
    primary key (transaction_id, account)
) strict;

create table receipts (
    dedupe_key text primary key,
    payment_id text not null references payments (id),
    body text not null,
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    sent_at text
) strict;
create index receipts_pending on receipts (created_at) where sent_at is null;
