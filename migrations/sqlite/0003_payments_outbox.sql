-- SQLite dialect of migrations/postgres/0003.
create table payments (
    id text primary key,
    tenant_id text not null,
    account_id text not null,
    amount_minor integer not null check (amount_minor > 0),
    currency text not null,
    merchant_reference text not null,
    channel text not null check (channel in ('web', 'mobile', 'pos')),
    status text not null check (status in ('PROCESSING', 'PENDING', 'SETTLED', 'DECLINED')),
    provider_charge_id text,
    idempotency_key text,
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    foreign key (tenant_id, account_id) references accounts (tenant_id, id),
    unique (tenant_id, account_id, merchant_reference)
) strict;

create table outbox_events (
    id text primary key,
    payment_id text not null references payments (id),
    event_type text not null check (event_type in (
        'PaymentCreated', 'PaymentAuthorized', 'PaymentDeclined', 'PaymentSettled'
    )),
    payload text not null,
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    published_at text,
    attempts integer not null default 0
) strict;

create index outbox_events_unpublished on outbox_events (created_at) where published_at is null;
create index outbox_events_payment on outbox_events (payment_id);
