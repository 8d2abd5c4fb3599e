-- A late charge (0016) is money to refund at the provider. An operator who has refunded it
-- says so here (who, when, with what reference), so that the alarm stops counting it; the
-- charge id stays.
alter table payments add column late_charge_resolved_at timestamptz;
alter table payments add column late_charge_resolved_by text;
alter table payments add column late_charge_resolution text;
drop index payments_late_charges;
create index payments_unresolved_late_charges on payments (released_at)
    where late_charge_id is not null and late_charge_resolved_at is null;
