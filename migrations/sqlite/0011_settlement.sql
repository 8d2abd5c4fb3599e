-- SQLite dialect of migrations/postgres/0011.
create index payments_pending on payments (updated_at) where status = 'PENDING';
create index outbox_events_created on outbox_events (created_at);
