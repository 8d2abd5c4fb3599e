-- What the console looks records up by (every look-up is an index probe, never a scan):
-- newest first for the browser, and exact key, payment id or provider charge id.
create index idempotency_records_created on idempotency_records (created_at);
create index idempotency_records_key on idempotency_records (idempotency_key);
create index idempotency_records_resource on idempotency_records (resource_id);
create index idempotency_records_provider_reference on idempotency_records (provider_reference);

-- Every request that arrived with a key and what it was answered, for the record page. The
-- canonical command is kept only when it differs from the record's (a conflicting retry), so
-- that the console can show what changed. Written in batches by each instance (like outcome
-- counts): the last seconds before a crash may be missing, never a payment.
create table idempotency_requests (
    id text primary key,
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    at timestamptz not null,
    fingerprint text not null,
    canonical_command text,
    status_code integer not null,
    error_code text,
    replayed boolean not null
);
create index idempotency_requests_scope on idempotency_requests (tenant_id, operation_name, idempotency_key, at);
create index idempotency_requests_at on idempotency_requests (at);
