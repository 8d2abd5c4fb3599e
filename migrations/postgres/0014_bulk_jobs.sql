-- A bulk reconciliation runs in the background over the frozen set its preview showed: each
-- item is one record at the version previewed, with the action shown then. Progress and each
-- item's result live here, so that any instance can report them, and another instance resumes
-- a job whose runner died (its lease, `runner_until`, ran out).
create table bulk_jobs (
    id text primary key,
    requested_by text not null,
    reason text not null,
    created_at timestamptz not null default now(),
    runner_until timestamptz,
    finished_at timestamptz
);
create index bulk_jobs_unfinished on bulk_jobs (created_at) where finished_at is null;

create table bulk_job_items (
    job_id text not null references bulk_jobs (id),
    position integer not null,
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    record_version bigint not null,
    action text not null,
    ok boolean,
    message text,
    record_status text,
    done_at timestamptz,
    primary key (job_id, position)
);
