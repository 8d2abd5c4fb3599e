-- SQLite dialect of migrations/postgres/0014.
create table bulk_jobs (
    id text primary key,
    requested_by text not null,
    reason text not null,
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    runner_until text,
    finished_at text
) strict;
create index bulk_jobs_unfinished on bulk_jobs (created_at) where finished_at is null;

create table bulk_job_items (
    job_id text not null references bulk_jobs (id),
    position integer not null,
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    record_version integer not null,
    action text not null,
    ok integer,
    message text,
    record_status text,
    done_at text,
    primary key (job_id, position)
) strict;
