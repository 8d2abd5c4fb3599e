-- SQLite dialect of migrations/postgres/0008.
create table operators (
    id text primary key,
    username text not null unique,
    password_hash text not null,
    role text not null check (role in ('viewer', 'operator', 'admin')),
    created_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    disabled_at text
) strict;

create table operator_sessions (
    id_hash text primary key,
    data text not null,
    expires_at text not null
) strict;
create index operator_sessions_expires on operator_sessions (expires_at);

create table audit_log (
    id text primary key,
    at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    actor text not null,
    action text not null,
    target text,
    reason text,
    result text not null,
    details text
) strict;
create index audit_log_at on audit_log (at, id);
create index audit_log_target on audit_log (target, at);
