-- SQLite dialect of migrations/postgres/0002.
create table api_keys (
    id text primary key,
    tenant_id text not null references tenants (id),
    key_hash text not null unique,
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    revoked_at text
) strict;

create index api_keys_tenant on api_keys (tenant_id);

create table accounts (
    tenant_id text not null references tenants (id),
    id text not null,
    currency text not null,
    balance_minor integer not null check (balance_minor >= 0),
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    primary key (tenant_id, id)
) strict;
