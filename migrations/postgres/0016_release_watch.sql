-- A released payment is watched for a day: should its provider key show a charge after all
-- (a provider that accepted the request after Idem's own call had given up), money moved for
-- a payment Idem declined, and an operator must refund it. The charge found is kept here.
alter table payments add column late_charge_id text;
alter table payments add column release_checked_at timestamptz;
create index payments_released_watch on payments (released_at)
    where released_at is not null and late_charge_id is null;
create index payments_late_charges on payments (released_at) where late_charge_id is not null;
-- The payments a key released, for its record page.
create index payments_released_by_key on payments (tenant_id, idempotency_key)
    where released_at is not null;
