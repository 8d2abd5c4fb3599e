-- Payments: one row per payment, whatever key created it. The business key
-- (tenant, account, merchant reference) stops a second payment even without an
-- idempotency key, or with a new one.
create table payments (
    id text primary key,
    tenant_id text not null,
    account_id text not null,
    amount_minor bigint not null check (amount_minor > 0),
    currency text not null,
    merchant_reference text not null,
    channel text not null check (channel in ('web', 'mobile', 'pos')),
    status text not null check (status in ('PROCESSING', 'PENDING', 'SETTLED', 'DECLINED')),
    provider_charge_id text,
    idempotency_key text,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    foreign key (tenant_id, account_id) references accounts (tenant_id, id),
    unique (tenant_id, account_id, merchant_reference)
);

-- Events are written in the same transaction as the change they announce.
create table outbox_events (
    id text primary key,
    payment_id text not null references payments (id),
    event_type text not null check (event_type in (
        'PaymentCreated', 'PaymentAuthorized', 'PaymentDeclined', 'PaymentSettled'
    )),
    payload text not null,
    created_at timestamptz not null default now(),
    published_at timestamptz,
    attempts integer not null default 0
);

create index outbox_events_unpublished on outbox_events (created_at) where published_at is null;
create index outbox_events_payment on outbox_events (payment_id);
