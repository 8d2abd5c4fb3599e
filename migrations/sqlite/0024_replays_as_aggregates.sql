-- Replays are journalled as aggregates, not a row each (issue 30): a replay costs its
-- instance a counter, not a row. Per key and minute, how many replays, the first and the last,
-- and the longest delay; first requests, conflicts and errors keep their row each in
-- idempotency_requests.
--
-- The window sizing reads retry delays (replays and other retries alike) from per-minute log
-- buckets per tenant and operation, like outcome_buckets. A bucket is named by its exclusive
-- lower bound in milliseconds (`domain::retry_delay`): 0, 100 ms doubling up to 2^25 of them,
-- and every window the dashboard compares with, so that counts past each of those windows are
-- exact. Rows already journalled are moved into both (their own window unknown here, the
-- default day is among the bounds).
create table idempotency_replays (
    tenant_id text not null,
    operation_name text not null,
    idempotency_key text not null,
    minute text not null,
    replays integer not null check (replays > 0),
    first_at text not null,
    last_at text not null,
    longest_delay_ms integer not null,
    status_code integer not null,
    primary key (tenant_id, operation_name, idempotency_key, minute)
) strict;
create index idempotency_replays_minute on idempotency_replays (minute);

create table retry_delay_buckets (
    bucket_start text not null,
    tenant_id text not null,
    operation_name text not null,
    above_ms integer not null,
    retries integer not null check (retries > 0),
    longest_ms integer not null,
    primary key (bucket_start, tenant_id, operation_name, above_ms)
) strict;

-- Times are RFC 3339 text with milliseconds (`2026-12-03T21:15:42.123Z`): the minute is its
-- first 17 characters.
insert into retry_delay_buckets (bucket_start, tenant_id, operation_name, above_ms, retries, longest_ms)
select substr(at, 1, 17) || '00.000Z', tenant_id, operation_name,
    coalesce((select max(column1) from (values (0), (100), (200), (400), (800), (1600), (3200), (6400), (12800), (25600), (51200), (102400), (204800), (409600), (819200), (1638400), (3276800), (3600000), (6553600), (13107200), (21600000), (26214400), (43200000), (52428800), (86400000), (104857600), (172800000), (209715200), (259200000), (419430400), (604800000), (838860800), (1677721600), (2592000000), (3355443200)) as bounds where column1 < retry_delay_ms), -1),
    count(*), max(retry_delay_ms)
from idempotency_requests where retry_delay_ms is not null
group by 1, 2, 3, 4;

insert into idempotency_replays (tenant_id, operation_name, idempotency_key, minute, replays, first_at, last_at,
    longest_delay_ms, status_code)
select tenant_id, operation_name, idempotency_key, substr(at, 1, 17) || '00.000Z', count(*), min(at), max(at),
    coalesce(max(retry_delay_ms), 0), max(status_code)
from idempotency_requests where replayed
group by 1, 2, 3, 4;

delete from idempotency_requests where replayed;
drop index idempotency_requests_retries;
-- Every row left is a request that was not replayed.
alter table idempotency_requests drop column replayed;
