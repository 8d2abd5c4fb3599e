-- SQLite dialect of migrations/postgres/0013.
create table override_requests (
    id text primary key,
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    record_version integer not null,
    outcome text not null check (outcome in ('charged', 'declined', 'not_charged')),
    provider_charge_id text,
    requested_by text not null,
    reason text not null,
    requested_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    state text not null default 'pending'
        check (state in ('pending', 'approved', 'applied', 'failed', 'rejected')),
    decided_by text,
    decision_reason text,
    decided_at text,
    result text,
    check ((outcome = 'not_charged') = (provider_charge_id is null)),
    check (decided_by is null or decided_by <> requested_by)
) strict;
create unique index override_requests_one_pending
    on override_requests (tenant_id, operation_name, idempotency_key) where state = 'pending';
create index override_requests_requested on override_requests (requested_at);
