-- Retention. A settled record past its window becomes an EXPIRED tombstone: its response body
-- is purged and its canonical command emptied, while the scope, key, fingerprint, outcome
-- (settled_status), resource id and provider reference stay for the retention period; then
-- the row is deleted. Both steps run in small batches, each found through its own partial
-- index, so a backlog of tombstones never slows the search for bodies to purge.
alter table idempotency_records add column settled_status text;
alter table idempotency_records add column purged_at timestamptz;
-- Retries that arrived after the window: counted on the record itself as well.
alter table idempotency_records add column expired_retries integer not null default 0;

drop index idempotency_records_expires;
create index idempotency_records_to_purge on idempotency_records (expires_at)
    where status in ('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE');
create index idempotency_records_tombstones on idempotency_records (expires_at)
    where status = 'EXPIRED';

-- One row per response sealing key ever used against this database: a probe sealed with it,
-- and when an instance last sealed with it. An instance that starts without a key some other
-- instance may still be sealing with (or with a different secret under the same id) refuses
-- to start instead of answering replays with errors.
create table response_key_checks (
    key_id text primary key,
    probe bytea not null,
    last_sealed_at timestamptz not null default now()
);

-- A tombstone never keeps a body, whichever statement made it one.
create function idempotency_purge_body() returns trigger language plpgsql as $$
begin
    delete from idempotency_responses
    where tenant_id = new.tenant_id
      and operation_name = new.operation_name
      and idempotency_key = new.idempotency_key;
    return null;
end
$$;

create trigger idempotency_records_purge_body
    after update of status on idempotency_records
    for each row when (new.status = 'EXPIRED')
    execute function idempotency_purge_body();
