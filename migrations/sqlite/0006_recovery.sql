-- SQLite dialect of migrations/postgres/0006.
alter table idempotency_records add column recovery_attempts integer not null default 0;
alter table idempotency_records add column next_recovery_at text;

create index idempotency_records_recovery on idempotency_records (status, next_recovery_at)
    where status in ('IN_PROGRESS', 'UNKNOWN_REQUIRES_RECOVERY');
