-- The incident day: hundreds of unknown outcomes to settle against the provider's evidence.

-- Why a record's outcome is unknown, in the engine's words: the cause of the provider call
-- that made it unknown (a send: timed out, answered 5xx, ...), kept while look-ups fail after
-- it; and the most recent failure of any call (a send or a look-up), with its time.
alter table idempotency_records add column unknown_cause text;
alter table idempotency_records add column last_error text;
alter table idempotency_records add column last_error_at timestamptz;

-- The recovery queue lists records that need attention, oldest first, from this partial index
-- alone (the rest of the table, settled history, is never read).
create index idempotency_records_attention on idempotency_records (created_at)
    where status in ('IN_PROGRESS', 'UNKNOWN_REQUIRES_RECOVERY');

-- What the provider said about a record when it was last asked for an operator (a preview):
-- one row per record, replaced by each look, deleted with the record.
create table record_evidence (
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    kind text not null check (kind in ('succeeded', 'declined', 'no_charge', 'unreachable')),
    detail text not null,
    at timestamptz not null default now(),
    primary key (tenant_id, operation_name, idempotency_key),
    foreign key (tenant_id, operation_name, idempotency_key)
        references idempotency_records (tenant_id, operation_name, idempotency_key)
        on delete cascade
);
create index record_evidence_kind on record_evidence (kind);

-- Operators look payments and refunds up by their merchant reference (the business key's
-- index leads with the tenant and the account).
create index payments_merchant_reference on payments (merchant_reference);
create index refunds_reference on refunds (reference);

-- A bulk job is named, selected by a filter (or by hand) and frozen on the server: previewed
-- in the background (each item's evidence and the action proposed for it), then applied to
-- the groups the operator kept; it can be paused and aborted. Jobs from before this migration
-- were started already running.
alter table bulk_jobs add column name text not null default '';
alter table bulk_jobs add column state text not null default 'running'
    check (state in ('previewing', 'previewed', 'running', 'paused', 'aborted', 'finished'));
alter table bulk_jobs add column selection text not null default '';
alter table bulk_jobs add column applied_by text;
alter table bulk_jobs add column applied_at timestamptz;
update bulk_jobs set state = 'finished' where finished_at is not null;
create index bulk_jobs_created on bulk_jobs (created_at);

-- An item's evidence and proposal, as previewed; `action` is the one applied (none for an item
-- left out or with nothing to apply).
alter table bulk_job_items alter column action drop not null;
alter table bulk_job_items add column evidence text;
alter table bulk_job_items add column evidence_detail text;
alter table bulk_job_items add column previewed_at timestamptz;
alter table bulk_job_items add column included boolean not null default true;

-- A step that made the outcome unknown keeps why (the failure in words, with how long the
-- call took), and a step that settled the record with the provider's answer keeps the charge
-- (or refund) it answered with, so that the record's timeline shows every provider answer and
-- failure where it happened.
alter table record_steps add column note text;
create or replace function record_steps_note() returns trigger language plpgsql as $$
begin
    insert into record_steps (tenant_id, operation_name, idempotency_key, status, progress_step,
        lease_version, lease_owner, note)
    values (new.tenant_id, new.operation_name, new.idempotency_key, new.status, new.progress_step,
        new.lease_version, new.lease_owner,
        case when new.status = 'UNKNOWN_REQUIRES_RECOVERY' then new.last_error
             when new.status in ('COMPLETED', 'FAILED_REPLAYABLE') and new.provider_reference is not null
             then 'the provider answered with ' || new.provider_reference end);
    return null;
end $$;
