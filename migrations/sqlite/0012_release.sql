-- SQLite dialect of migrations/postgres/0012. A table constraint cannot be dropped here: the
-- payments table is rebuilt (inside the migration's transaction, foreign keys checked at
-- commit, so every event, ledger and receipt row must find its payment again).
pragma defer_foreign_keys = on;

create table payments_before_0012 as select * from payments;
drop table payments;
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
    released_at text,
    foreign key (tenant_id, account_id) references accounts (tenant_id, id)
) strict;
insert into payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference, channel,
    status, provider_charge_id, idempotency_key, created_at, updated_at)
select id, tenant_id, account_id, amount_minor, currency, merchant_reference, channel,
    status, provider_charge_id, idempotency_key, created_at, updated_at
from payments_before_0012;
drop table payments_before_0012;
create unique index payments_business_key on payments (tenant_id, account_id, merchant_reference)
    where released_at is null;
create index payments_pending on payments (updated_at) where status = 'PENDING';

alter table idempotency_records add column claimed_as text not null default 'new'
    check (claimed_as in ('new', 'after_expiry', 'after_release'));
