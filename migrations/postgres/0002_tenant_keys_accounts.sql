-- API keys: only the SHA-256 of the key is stored; the key id is part of the key itself.
create table api_keys (
    id text primary key,
    tenant_id text not null references tenants (id),
    key_hash text not null unique,
    created_at timestamptz not null default now(),
    revoked_at timestamptz
);

create index api_keys_tenant on api_keys (tenant_id);

-- Accounts belong to a tenant; ids are chosen by the tenant and unique within it.
-- Money is integer minor units and a currency code, never a float.
create table accounts (
    tenant_id text not null references tenants (id),
    id text not null,
    currency text not null,
    balance_minor bigint not null check (balance_minor >= 0),
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    primary key (tenant_id, id)
);
