-- SQLite dialect of migrations/postgres/0022.
alter table idempotency_records add column unknown_cause text;
alter table idempotency_records add column last_error text;
alter table idempotency_records add column last_error_at text;

create index idempotency_records_attention on idempotency_records (created_at)
    where status in ('IN_PROGRESS', 'UNKNOWN_REQUIRES_RECOVERY');

create table record_evidence (
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    kind text not null check (kind in ('succeeded', 'declined', 'no_charge', 'unreachable')),
    detail text not null,
    at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    primary key (tenant_id, operation_name, idempotency_key),
    foreign key (tenant_id, operation_name, idempotency_key)
        references idempotency_records (tenant_id, operation_name, idempotency_key)
        on delete cascade
) strict;
create index record_evidence_kind on record_evidence (kind);

create index payments_merchant_reference on payments (merchant_reference);
create index refunds_reference on refunds (reference);

alter table bulk_jobs add column name text not null default '';
alter table bulk_jobs add column state text not null default 'running'
    check (state in ('previewing', 'previewed', 'running', 'paused', 'aborted', 'finished'));
alter table bulk_jobs add column selection text not null default '';
alter table bulk_jobs add column applied_by text;
alter table bulk_jobs add column applied_at text;
update bulk_jobs set state = 'finished' where finished_at is not null;
create index bulk_jobs_created on bulk_jobs (created_at);

-- SQLite cannot drop a column's `not null`: the items table is made again with `action`
-- nullable and its rows copied.
create table bulk_job_items_new (
    job_id text not null references bulk_jobs (id),
    position integer not null,
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    record_version integer not null,
    action text,
    ok integer,
    message text,
    record_status text,
    done_at text,
    evidence text,
    evidence_detail text,
    previewed_at text,
    included integer not null default 1,
    primary key (job_id, position)
) strict;
insert into bulk_job_items_new (job_id, position, tenant_id, operation_name, idempotency_key,
    record_version, action, ok, message, record_status, done_at)
select job_id, position, tenant_id, operation_name, idempotency_key, record_version, action, ok,
    message, record_status, done_at from bulk_job_items;
drop table bulk_job_items;
alter table bulk_job_items_new rename to bulk_job_items;

alter table record_steps add column note text;
drop trigger idempotency_records_step_changed;
create trigger idempotency_records_step_changed after update of status, progress_step, lease_version
    on idempotency_records
    when old.status is not new.status or old.progress_step is not new.progress_step
        or old.lease_version is not new.lease_version
begin
    insert into record_steps (tenant_id, operation_name, idempotency_key, status, progress_step,
        lease_version, lease_owner, note)
    values (new.tenant_id, new.operation_name, new.idempotency_key, new.status, new.progress_step,
        new.lease_version, new.lease_owner,
        case when new.status = 'UNKNOWN_REQUIRES_RECOVERY' then new.last_error
             when new.status in ('COMPLETED', 'FAILED_REPLAYABLE') and new.provider_reference is not null
             then 'the provider answered with ' || new.provider_reference end);
end;
