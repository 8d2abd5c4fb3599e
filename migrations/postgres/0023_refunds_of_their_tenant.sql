-- A refund's payment is its own tenant's: the schema says so, not only the code that inserts
-- refunds. (payment id, tenant) is unique already through the id; the constraint makes it a
-- key a foreign key can name. Currencies are ISO 4217 codes on both money tables.
alter table payments add constraint payments_id_tenant unique (id, tenant_id);
alter table refunds add constraint refunds_payment_of_its_tenant
    foreign key (payment_id, tenant_id) references payments (id, tenant_id);
alter table payments add constraint payments_currency_code check (currency ~ '^[A-Z]{3}$');
alter table refunds add constraint refunds_currency_code check (currency ~ '^[A-Z]{3}$');
