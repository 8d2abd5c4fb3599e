-- SQLite dialect of migrations/postgres/0005.
create table outcome_buckets (
    bucket_start text not null,
    tenant_id text not null,
    operation_name text not null,
    outcome text not null,
    count integer not null check (count >= 0),
    primary key (bucket_start, tenant_id, operation_name, outcome)
) strict;
