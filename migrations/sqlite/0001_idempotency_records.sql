-- SQLite dialect of migrations/postgres/0001. Timestamps are UTC RFC 3339 text with
-- milliseconds ('YYYY-MM-DDTHH:MM:SS.sssZ'), so that text order is time order.
create table tenants (
    id text primary key,
    name text not null unique,
    require_idempotency_key integer not null default 1 check (require_idempotency_key in (0, 1)),
    pinned_api_version text not null default '2026-05-01',
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) strict;

create table idempotency_records (
    tenant_id text not null references tenants (id),
    operation_name text not null,
    idempotency_key text not null,
    fingerprint_version integer not null,
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
    lease_version integer not null default 0,
    locked_until text,
    created_by text not null,
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    completed_at text,
    expires_at text not null,
    primary key (tenant_id, operation_name, idempotency_key)
) strict;

create index idempotency_records_status_updated on idempotency_records (status, updated_at);
create index idempotency_records_expires on idempotency_records (expires_at);

create table idempotency_responses (
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    headers text not null,
    body blob not null,
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    primary key (tenant_id, operation_name, idempotency_key),
    foreign key (tenant_id, operation_name, idempotency_key)
        references idempotency_records (tenant_id, operation_name, idempotency_key)
        on delete cascade
) strict;
