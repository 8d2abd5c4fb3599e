-- Authorised payments waiting for the provider to settle them, oldest check first.
create index payments_pending on payments (updated_at) where status = 'PENDING';
