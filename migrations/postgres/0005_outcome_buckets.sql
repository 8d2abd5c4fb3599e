-- What the idempotency layer answered, counted per minute, tenant, operation and outcome.
-- Every `serve` instance adds its own counts (upsert), so the sums are across instances and
-- survive restarts; dashboards read these buckets instead of counting records.
create table outcome_buckets (
    bucket_start timestamptz not null,
    tenant_id text not null,
    operation_name text not null,
    outcome text not null,
    count bigint not null check (count >= 0),
    primary key (bucket_start, tenant_id, operation_name, outcome)
);
