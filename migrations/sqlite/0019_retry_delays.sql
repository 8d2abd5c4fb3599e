-- How long after its key's first request each retry arrived (a request that found its key's
-- record with the same command), in milliseconds; null for first requests and for conflicting
-- ones. The console sizes the idempotency window from these: the partial index serves its
-- range reads without touching first requests.
alter table idempotency_requests add column retry_delay_ms integer;
create index idempotency_requests_retries on idempotency_requests (at, operation_name, retry_delay_ms)
    where retry_delay_ms is not null;
