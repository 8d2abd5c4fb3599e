-- Console operators: Argon2 password hashes, one role each (viewer < operator < admin).
create table operators (
    id text primary key,
    username text not null unique,
    password_hash text not null,
    role text not null check (role in ('viewer', 'operator', 'admin')),
    created_at timestamptz not null default now(),
    disabled_at timestamptz
);

-- Server-side sessions. Only the SHA-256 of a session id is stored: a copy of this table
-- cannot be replayed as cookies.
create table operator_sessions (
    id_hash text primary key,
    data text not null,
    expires_at timestamptz not null
);
create index operator_sessions_expires on operator_sessions (expires_at);

-- Who did what, when, why, and how it ended: sign-ins, reveals, reconciliations. Written in the
-- same transaction as the action it records.
create table audit_log (
    id text primary key,
    at timestamptz not null default now(),
    actor text not null,
    action text not null,
    target text,
    reason text,
    result text not null,
    details text
);
create index audit_log_at on audit_log (at, id);
create index audit_log_target on audit_log (target, at);
