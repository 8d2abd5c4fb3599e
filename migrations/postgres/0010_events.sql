-- Delivering the outbox: a claim lease (several publishers at once), backoff, dead letters.
alter table outbox_events add column claimed_until timestamptz;
alter table outbox_events add column next_attempt_at timestamptz;
alter table outbox_events add column last_error text;
alter table outbox_events add column dead_at timestamptz;

-- One row per message a consumer processed, written in the same transaction as its side
-- effect: a redelivery finds it and does nothing.
create table consumer_inbox (
    consumer_name text not null,
    message_id text not null,
    processed_at timestamptz not null default now(),
    primary key (consumer_name, message_id)
);

-- The ledger: one double-entry transaction per authorised payment; its postings sum to zero.
create table ledger_transactions (
    id text primary key,
    entry_type text not null,
    source_payment_id text not null references payments (id),
    created_at timestamptz not null default now(),
    unique (entry_type, source_payment_id)
);
create table ledger_postings (
    transaction_id text not null references ledger_transactions (id),
    account text not null,
    amount_minor bigint not null,
    currency text not null,
    primary key (transaction_id, account)
);

-- Receipts are recorded before they are sent; the sender marks them sent afterwards.
create table receipts (
    dedupe_key text primary key,
    payment_id text not null references payments (id),
    body text not null,
    created_at timestamptz not null default now(),
    sent_at timestamptz
);
create index receipts_pending on receipts (created_at) where sent_at is null;
