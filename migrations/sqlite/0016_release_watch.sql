-- SQLite dialect of migrations/postgres/0016.
alter table payments add column late_charge_id text;
alter table payments add column release_checked_at text;
create index payments_released_watch on payments (released_at)
    where released_at is not null and late_charge_id is null;
create index payments_late_charges on payments (released_at) where late_charge_id is not null;
create index payments_released_by_key on payments (tenant_id, idempotency_key)
    where released_at is not null;
