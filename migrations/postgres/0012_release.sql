-- An operator may mark a payment the provider never charged as failed and release its
-- idempotency key (only with the provider's live word that no charge exists). The payment is
-- DECLINED and released: its merchant reference no longer holds the business key, so the
-- retry's new payment can take it.
alter table payments add column released_at timestamptz;
alter table payments drop constraint payments_tenant_id_account_id_merchant_reference_key;
create unique index payments_business_key on payments (tenant_id, account_id, merchant_reference)
    where released_at is null;

-- How the record's current execution began: the key's first request, a retry after the
-- window (policy new_operation), or a retry after an operator released the key.
alter table idempotency_records add column claimed_as text not null default 'new'
    check (claimed_as in ('new', 'after_expiry', 'after_release'));
