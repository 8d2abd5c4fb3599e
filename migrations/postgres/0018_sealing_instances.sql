-- The instances sealing stored responses against this database and the response keys each
-- holds, renewed by a heartbeat: an instance may seal only with a key every live instance can
-- open, and an instance gone quiet for a few heartbeats is no longer counted.
create table sealing_instances (
    instance_id text primary key,
    key_ids text not null,
    heartbeat_at timestamptz not null default now()
);
