-- Authorised payments waiting for the provider to settle them, oldest check first.
create index payments_pending on payments (updated_at) where status = 'PENDING';

-- The console's events page looks at recent events by time (consumer lag).
create index outbox_events_created on outbox_events (created_at);
