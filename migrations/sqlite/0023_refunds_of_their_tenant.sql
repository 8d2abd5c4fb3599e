-- SQLite dialect of migrations/postgres/0023. SQLite cannot add a constraint to a table:
-- refunds is rebuilt with its tenant's foreign key and its currency check (its rows kept
-- aside and put back; ledger_transactions refers to it, so foreign keys are checked at
-- commit), and payments, which many tables refer to, gets its currency check as triggers
-- that fail as a CHECK constraint would.
pragma defer_foreign_keys = on;

create unique index payments_id_tenant on payments (id, tenant_id);

create temporary table refunds_kept as select * from refunds;
drop table refunds;
create table refunds (
    id text primary key,
    tenant_id text not null,
    payment_id text not null references payments (id),
    amount_minor integer not null check (amount_minor > 0),
    currency text not null check (length(currency) = 3 and currency not glob '*[^A-Z]*'),
    reason text not null check (reason in ('requested_by_customer', 'duplicate', 'fraudulent')),
    reference text not null,
    status text not null check (status in ('PROCESSING', 'SUCCEEDED', 'FAILED')),
    provider_refund_id text,
    idempotency_key text,
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    unique (payment_id, reference),
    foreign key (payment_id, tenant_id) references payments (id, tenant_id)
) strict;
insert into refunds select * from refunds_kept;
drop table refunds_kept;
create index refunds_tenant_created on refunds (tenant_id, created_at);
create index refunds_reference on refunds (reference);

create trigger payments_currency_code_on_insert before insert on payments
when length(new.currency) <> 3 or new.currency glob '*[^A-Z]*'
begin
    select raise(abort, 'CHECK constraint failed: payments_currency_code');
end;
create trigger payments_currency_code_on_update before update of currency on payments
when length(new.currency) <> 3 or new.currency glob '*[^A-Z]*'
begin
    select raise(abort, 'CHECK constraint failed: payments_currency_code');
end;
