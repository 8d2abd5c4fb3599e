//! Payments and accounts as the local transaction writes them.

use crate::command::{AccountId, Channel, CreatePayment, MerchantReference};
use crate::money::{Amount, Balance};
use crate::tenant::TenantId;
use std::fmt;

/// `pay_`, its time and 16 random hex digits ([`crate::random::ordered_id`]), generated once per payment and never again for the same key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PaymentId(String);

impl PaymentId {
    #[cfg(feature = "random")]
    pub fn generate() -> PaymentId {
        PaymentId(crate::random::ordered_id("pay_"))
    }

    pub fn from_stored(id: String) -> PaymentId {
        PaymentId(id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PaymentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The payment row the local transaction creates (status PROCESSING).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPayment {
    pub id: PaymentId,
    pub tenant_id: TenantId,
    pub account_id: AccountId,
    pub amount: Amount,
    pub merchant_reference: MerchantReference,
    pub channel: Channel,
}

impl NewPayment {
    pub fn from_command(id: PaymentId, tenant_id: TenantId, command: &CreatePayment) -> NewPayment {
        NewPayment {
            id,
            tenant_id,
            account_id: command.account_id.clone(),
            amount: command.amount,
            merchant_reference: command.merchant_reference.clone(),
            channel: command.channel,
        }
    }

    /// The `PaymentCreated` event's payload, written in the same transaction as the row.
    pub fn created_event(&self, event_id: &str) -> String {
        serde_json::json!({
            "eventId": event_id,
            "type": "PaymentCreated",
            "paymentId": self.id.as_str(),
            "tenantId": self.tenant_id.as_str(),
            "accountId": self.account_id.as_str(),
            "amount": self.amount.to_string(),
            "currency": self.amount.currency().code(),
            "merchantReference": self.merchant_reference.as_str(),
            "channel": self.channel.as_str(),
            "status": "PROCESSING",
        })
        .to_string()
    }
}

/// `evt_`, its time and 16 random hex digits.
#[cfg(feature = "random")]
pub fn new_event_id() -> String {
    crate::random::ordered_id("evt_")
}

/// An account to create: it belongs to one tenant and starts with a balance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAccount {
    pub tenant_id: TenantId,
    pub id: AccountId,
    pub balance: Balance,
}
