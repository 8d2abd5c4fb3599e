-- Recovery bookkeeping: how often the provider was asked about an unknown outcome, and when
-- it may be asked next (backoff). Records past the worker's attempt limit need an operator.
alter table idempotency_records add column recovery_attempts integer not null default 0;
alter table idempotency_records add column next_recovery_at timestamptz;

create index idempotency_records_recovery on idempotency_records (status, next_recovery_at)
    where status in ('IN_PROGRESS', 'UNKNOWN_REQUIRES_RECOVERY');
