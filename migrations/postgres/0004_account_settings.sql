-- An account's default currency (a setting; payments still name their currency), and the
-- audit trail of settings changes: one row per real change, none for a repeated request.
alter table accounts add column default_currency text;

create table account_audit (
    id text primary key,
    tenant_id text not null,
    account_id text not null,
    setting text not null,
    new_value text not null,
    changed_by text not null,
    created_at timestamptz not null default now(),
    foreign key (tenant_id, account_id) references accounts (tenant_id, id)
);
