-- SQLite dialect of migrations/postgres/0004.
alter table accounts add column default_currency text;

create table account_audit (
    id text primary key,
    tenant_id text not null,
    account_id text not null,
    setting text not null,
    new_value text not null,
    changed_by text not null,
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    foreign key (tenant_id, account_id) references accounts (tenant_id, id)
) strict;
