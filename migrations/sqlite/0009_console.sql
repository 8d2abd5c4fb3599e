-- SQLite dialect of migrations/postgres/0009.
create index idempotency_records_created on idempotency_records (created_at);
create index idempotency_records_key on idempotency_records (idempotency_key);
create index idempotency_records_resource on idempotency_records (resource_id);
create index idempotency_records_provider_reference on idempotency_records (provider_reference);

create table idempotency_requests (
    id text primary key,
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    at text not null,
    fingerprint text not null,
    canonical_command text,
    status_code integer not null,
    error_code text,
    replayed integer not null check (replayed in (0, 1))
) strict;
create index idempotency_requests_scope on idempotency_requests (tenant_id, operation_name, idempotency_key, at);
create index idempotency_requests_at on idempotency_requests (at);
