//! Refunds: the second keyed operation (`POST /payments/{paymentId}/refunds`). Its command is
//! read in two steps, because an amount can only be judged in its payment's currency: the
//! body first (`RefundBody`, every problem of its own), then the amount in the currency of
//! the payment the path names (`RefundBody::command`).

use crate::command::{BodyFields, FieldProblem, ValidationFailed, reference_text};
use crate::fingerprint::{CanonicalCommand, CanonicalValue};
use crate::money::{Amount, Currency};
use crate::payment::PaymentId;
use crate::scope::Operation;
use crate::tenant::TenantId;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt;
use strum::{EnumString, IntoStaticStr, VariantArray};

/// `rf_`, its time and 16 random hex digits, generated once per refund and never again for the same key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RefundId(String);

impl RefundId {
    #[cfg(feature = "random")]
    pub fn generate() -> RefundId {
        RefundId(crate::random::ordered_id("rf_"))
    }

    pub fn from_stored(id: String) -> RefundId {
        RefundId(id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RefundId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why the merchant refunds; absent means `requested_by_customer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum RefundReason {
    #[default]
    RequestedByCustomer,
    Duplicate,
    Fraudulent,
}

impl RefundReason {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    fn parse(text: &str) -> Result<RefundReason, &'static str> {
        text.parse()
            .map_err(|_| "must be one of \"requested_by_customer\", \"duplicate\", \"fraudulent\"")
    }
}

/// The merchant's refund reference: with the payment, the business key of a refund.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RefundReference(String);

impl RefundReference {
    pub fn parse(text: &str) -> Result<RefundReference, &'static str> {
        reference_text(text).map(RefundReference)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

const KNOWN_FIELDS: &[&str] = &["amount", "reason", "reference"];

/// A refund's body as read before its payment is known: everything but the amount is parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundBody {
    amount: String,
    pub reason: RefundReason,
    pub reference: RefundReference,
}

impl RefundBody {
    /// Parses the JSON body strictly, every problem at once (the amount must be a decimal
    /// string; how many decimals it may have is judged with the payment's currency).
    pub fn parse_json(body: &[u8]) -> Result<RefundBody, ValidationFailed> {
        let mut fields = BodyFields::read(body, KNOWN_FIELDS)?;
        let amount = fields.text("amount", true);
        let reason = fields.text("reason", false);
        let reference = fields.text("reference", true);
        let reason = match reason {
            None => Some(RefundReason::default()),
            Some(text) => fields.parsed("reason", Some(text), RefundReason::parse),
        };
        let reference = fields.parsed("reference", reference, RefundReference::parse);
        let body = match (amount, reason, reference) {
            (Some(amount), Some(reason), Some(reference)) => Some(RefundBody {
                amount,
                reason,
                reference,
            }),
            _ => None,
        };
        fields.finish(body)
    }

    /// The command for the payment `payment_id`, whose currency the amount is in.
    pub fn command(
        self,
        payment_id: PaymentId,
        currency: Currency,
    ) -> Result<CreateRefund, ValidationFailed> {
        let amount = Amount::parse(&self.amount, currency).map_err(|problem| ValidationFailed {
            problems: vec![FieldProblem::new("amount", problem)],
        })?;
        Ok(CreateRefund {
            payment_id,
            amount,
            reason: self.reason,
            reference: self.reference,
        })
    }
}

/// `POST /payments/{paymentId}/refunds`, version 1 of the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRefund {
    /// From the path: part of the fingerprint as a path parameter, not a body field.
    pub payment_id: PaymentId,
    pub amount: Amount,
    pub reason: RefundReason,
    pub reference: RefundReference,
}

impl CreateRefund {
    pub const OPERATION: Operation = Operation::CreateRefund;

    /// The fingerprint's path parameters.
    pub fn path_params(&self) -> BTreeMap<&'static str, String> {
        BTreeMap::from([("paymentId", self.payment_id.as_str().to_owned())])
    }
}

impl CanonicalCommand for CreateRefund {
    fn canonical_fields(&self) -> BTreeMap<&'static str, CanonicalValue> {
        BTreeMap::from([
            ("amount", self.amount.to_string().into()),
            ("currency", self.amount.currency().code().into()),
            ("reason", self.reason.as_str().into()),
            ("reference", self.reference.as_str().into()),
        ])
    }
}

/// A refund's public status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum RefundStatus {
    /// The provider's outcome is not known yet; counts against what remains refundable.
    Processing,
    Succeeded,
    Failed,
}

impl RefundStatus {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What a refund gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundOf {
    /// The payment's charge: the API's refunds, of PENDING and SETTLED payments.
    Payment,
    /// A charge the provider made after an operator released the payment (a late charge):
    /// only the console refunds those, and only released payments that have one.
    LateCharge,
}

/// The refund row the claim creates (status PROCESSING).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRefund {
    pub id: RefundId,
    pub tenant_id: TenantId,
    pub command: CreateRefund,
    pub of: RefundOf,
}

impl NewRefund {
    /// The `RefundCreated` event's payload, written in the same transaction as the row.
    pub fn created_event(&self, event_id: &str) -> String {
        json!({
            "eventId": event_id,
            "type": "RefundCreated",
            "refundId": self.id.as_str(),
            "paymentId": self.command.payment_id.as_str(),
            "tenantId": self.tenant_id.as_str(),
            "amount": self.command.amount.to_string(),
            "currency": self.command.amount.currency().code(),
            "reason": self.command.reason.as_str(),
            "reference": self.command.reference.as_str(),
            "status": "PROCESSING",
        })
        .to_string()
    }
}

/// A refund as the API shows it (the same in every API version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundView {
    pub id: String,
    pub payment_id: String,
    pub amount: Amount,
    pub reason: RefundReason,
    pub reference: String,
    pub status: RefundStatus,
    pub created_at: DateTime<Utc>,
}

impl RefundView {
    pub fn of_new(refund: &NewRefund, status: RefundStatus, created_at: DateTime<Utc>) -> RefundView {
        RefundView {
            id: refund.id.to_string(),
            payment_id: refund.command.payment_id.to_string(),
            amount: refund.command.amount,
            reason: refund.command.reason,
            reference: refund.command.reference.as_str().to_owned(),
            status,
            created_at,
        }
    }

    /// The representation's bytes.
    pub fn body(&self) -> Vec<u8> {
        json!({
            "refundId": self.id,
            "paymentId": self.payment_id,
            "amount": self.amount.to_string(),
            "currency": self.amount.currency().code(),
            "reason": self.reason.as_str(),
            "reference": self.reference,
            "status": self.status.as_str(),
            "createdAt": self.created_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        })
        .to_string()
        .into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(body: &str) -> Vec<(String, String)> {
        RefundBody::parse_json(body.as_bytes())
            .expect_err("invalid")
            .pairs()
    }

    #[test]
    fn a_refund_body_is_normalised_in_its_payments_currency() {
        let body = RefundBody::parse_json(br#"{"amount":"4","reference":"rf-1"}"#).expect("valid");
        assert_eq!(body.reason, RefundReason::RequestedByCustomer);
        let command = body
            .command(PaymentId::from_stored("pay_1".into()), Currency::Eur)
            .expect("valid");
        assert_eq!(command.amount.to_string(), "4.00");
        let in_yen = RefundBody::parse_json(br#"{"amount":"4.5","reference":"r"}"#)
            .expect("valid body")
            .command(PaymentId::from_stored("pay_1".into()), Currency::Jpy)
            .expect_err("JPY has no decimals");
        assert_eq!(in_yen.problems[0].field, "amount");
    }

    #[test]
    fn every_problem_of_a_refund_body_is_reported_with_its_field() {
        let found = problems(r#"{"amount":4,"reason":"because","extra":true}"#);
        let fields: Vec<&str> = found.iter().map(|(field, _)| field.as_str()).collect();
        assert_eq!(fields, ["extra", "amount", "reason", "reference"], "{found:?}");
        assert!(found[1].1.contains("not a JSON number"), "{found:?}");
    }

    #[test]
    fn equal_refunds_have_equal_canonical_fields_whatever_their_spelling() {
        let command = |body: &str| {
            RefundBody::parse_json(body.as_bytes())
                .expect("valid")
                .command(PaymentId::from_stored("pay_1".into()), Currency::Eur)
                .expect("valid")
                .canonical_fields()
        };
        assert_eq!(
            command(r#"{"amount":"4","reference":"r"}"#),
            command(r#"{"reference":"r","reason":"requested_by_customer","amount":"4.00"}"#)
        );
        assert_ne!(
            command(r#"{"amount":"4","reference":"r"}"#),
            command(r#"{"amount":"4","reference":"r","reason":"duplicate"}"#)
        );
    }
}
