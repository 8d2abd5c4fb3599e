-- Tenants own API keys, accounts and idempotency records.
create table tenants (
    id text primary key,
    name text not null unique,
    require_idempotency_key boolean not null default true,
    pinned_api_version text not null default '2026-05-01',
    created_at timestamptz not null default now()
);

-- One row per scoped key: what the first request meant (fingerprint, canonical command),
-- how far it got (status, progress step, lease) and what it answered (response_* columns;
-- the body itself lives in idempotency_responses so that it can be purged on its own).
create table idempotency_records (
    tenant_id text not null references tenants (id),
    operation_name text not null,
    idempotency_key text not null,
    fingerprint_version smallint not null,
    request_fingerprint text not null,
    canonical_command text not null,
    status text not null check (status in (
        'IN_PROGRESS', 'COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE',
        'UNKNOWN_REQUIRES_RECOVERY', 'EXPIRED'
    )),
    progress_step text not null,
    resource_type text,
    resource_id text,
    provider_reference text,
    response_status_code integer,
    response_schema_version text,
    lease_owner text,
    lease_version bigint not null default 0,
    locked_until timestamptz,
    created_by text not null,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    completed_at timestamptz,
    expires_at timestamptz not null,
    primary key (tenant_id, operation_name, idempotency_key)
);

create index idempotency_records_status_updated on idempotency_records (status, updated_at);
create index idempotency_records_expires on idempotency_records (expires_at);

create table idempotency_responses (
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    headers text not null,
    body bytea not null,
    created_at timestamptz not null default now(),
    primary key (tenant_id, operation_name, idempotency_key),
    foreign key (tenant_id, operation_name, idempotency_key)
        references idempotency_records (tenant_id, operation_name, idempotency_key)
        on delete cascade
);
