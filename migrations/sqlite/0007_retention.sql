-- SQLite dialect of migrations/postgres/0007.
alter table idempotency_records add column settled_status text;
alter table idempotency_records add column purged_at text;
alter table idempotency_records add column expired_retries integer not null default 0;

drop index idempotency_records_expires;
create index idempotency_records_to_purge on idempotency_records (expires_at)
    where status in ('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE');
create index idempotency_records_tombstones on idempotency_records (expires_at)
    where status = 'EXPIRED';

create table response_key_checks (
    key_id text primary key,
    probe blob not null,
    last_sealed_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) strict;

create trigger idempotency_records_purge_body
    after update of status on idempotency_records
    for each row when new.status = 'EXPIRED'
begin
    delete from idempotency_responses
    where tenant_id = new.tenant_id
      and operation_name = new.operation_name
      and idempotency_key = new.idempotency_key;
end;
