-- Every change of a record's status, step or lease as it commits: the console's step
-- timeline. The database writes it (so that no code path can forget it and the hot path makes
-- no extra round trip) and deletes it with the record.
create table record_steps (
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    at timestamptz not null default now(),
    status text not null,
    progress_step text not null,
    lease_version bigint not null,
    lease_owner text
);
create index record_steps_scope on record_steps (tenant_id, operation_name, idempotency_key, at);

create function record_steps_note() returns trigger language plpgsql as $$
begin
    insert into record_steps (tenant_id, operation_name, idempotency_key, status, progress_step,
        lease_version, lease_owner)
    values (new.tenant_id, new.operation_name, new.idempotency_key, new.status, new.progress_step,
        new.lease_version, new.lease_owner);
    return null;
end $$;

create function record_steps_forget() returns trigger language plpgsql as $$
begin
    delete from record_steps where tenant_id = old.tenant_id
        and operation_name = old.operation_name and idempotency_key = old.idempotency_key;
    return null;
end $$;

create trigger idempotency_records_step_inserted after insert on idempotency_records
    for each row execute function record_steps_note();
create trigger idempotency_records_step_changed after update of status, progress_step, lease_version
    on idempotency_records for each row
    when (old.status is distinct from new.status or old.progress_step is distinct from new.progress_step
          or old.lease_version is distinct from new.lease_version)
    execute function record_steps_note();
create trigger idempotency_records_steps_deleted after delete on idempotency_records
    for each row execute function record_steps_forget();

-- Records made before this migration start their timeline where they are now.
insert into record_steps (tenant_id, operation_name, idempotency_key, at, status, progress_step,
    lease_version, lease_owner)
select tenant_id, operation_name, idempotency_key, updated_at, status, progress_step, lease_version, lease_owner
from idempotency_records;
