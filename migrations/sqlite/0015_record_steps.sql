-- SQLite dialect of migrations/postgres/0015.
create table record_steps (
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    status text not null,
    progress_step text not null,
    lease_version integer not null,
    lease_owner text
) strict;
create index record_steps_scope on record_steps (tenant_id, operation_name, idempotency_key, at);

create trigger idempotency_records_step_inserted after insert on idempotency_records
begin
    insert into record_steps (tenant_id, operation_name, idempotency_key, status, progress_step,
        lease_version, lease_owner)
    values (new.tenant_id, new.operation_name, new.idempotency_key, new.status, new.progress_step,
        new.lease_version, new.lease_owner);
end;

create trigger idempotency_records_step_changed after update of status, progress_step, lease_version
    on idempotency_records
    when old.status is not new.status or old.progress_step is not new.progress_step
        or old.lease_version is not new.lease_version
begin
    insert into record_steps (tenant_id, operation_name, idempotency_key, status, progress_step,
        lease_version, lease_owner)
    values (new.tenant_id, new.operation_name, new.idempotency_key, new.status, new.progress_step,
        new.lease_version, new.lease_owner);
end;

create trigger idempotency_records_steps_deleted after delete on idempotency_records
begin
    delete from record_steps where tenant_id = old.tenant_id
        and operation_name = old.operation_name and idempotency_key = old.idempotency_key;
end;

insert into record_steps (tenant_id, operation_name, idempotency_key, at, status, progress_step,
    lease_version, lease_owner)
select tenant_id, operation_name, idempotency_key, updated_at, status, progress_step, lease_version, lease_owner
from idempotency_records;
