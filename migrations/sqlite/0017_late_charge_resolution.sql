-- SQLite dialect of migrations/postgres/0017.
alter table payments add column late_charge_resolved_at text;
alter table payments add column late_charge_resolved_by text;
alter table payments add column late_charge_resolution text;
drop index payments_late_charges;
create index payments_unresolved_late_charges on payments (released_at)
    where late_charge_id is not null and late_charge_resolved_at is null;
