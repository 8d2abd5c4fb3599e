//! The create-payment command, parsed strictly from the request body and normalised, so that
//! every equivalent spelling of one payment is one value (and so one fingerprint).

use crate::fingerprint::{CanonicalCommand, CanonicalValue, FingerprintInput};
use crate::money::{Amount, Currency};
use crate::scope::Operation;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// An account id: 1 to 64 of `A-Z a-z 0-9 _ -`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct AccountId(String);

impl AccountId {
    pub fn parse(text: &str) -> Result<AccountId, &'static str> {
        let valid = (1..=64).contains(&text.len())
            && text
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
        if valid {
            Ok(AccountId(text.to_owned()))
        } else {
            Err("must be 1 to 64 characters of letters, digits, '_' or '-'")
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The merchant's own reference: 1 to 128 characters, no control characters, compared exactly.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct MerchantReference(String);

impl MerchantReference {
    pub fn parse(text: &str) -> Result<MerchantReference, &'static str> {
        reference_text(text).map(MerchantReference)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A merchant's reference as the contract allows it: 1 to 128 characters, no control
/// characters.
pub(crate) fn reference_text(text: &str) -> Result<String, &'static str> {
    let length = text.chars().count();
    if !(1..=128).contains(&length) {
        return Err("must be 1 to 128 characters");
    }
    if text.chars().any(char::is_control) {
        return Err("must not contain control characters");
    }
    Ok(text.to_owned())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Channel {
    #[default]
    Web,
    Mobile,
    Pos,
}

impl Channel {
    pub fn parse(text: &str) -> Result<Channel, &'static str> {
        match text {
            "web" => Ok(Channel::Web),
            "mobile" => Ok(Channel::Mobile),
            "pos" => Ok(Channel::Pos),
            _ => Err("must be one of \"web\", \"mobile\", \"pos\""),
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Channel::Web => "web",
            Channel::Mobile => "mobile",
            Channel::Pos => "pos",
        }
    }
}

/// `POST /payments`, version 1 of the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePayment {
    pub account_id: AccountId,
    pub amount: Amount,
    pub merchant_reference: MerchantReference,
    pub channel: Channel,
}

/// One problem with one field of a request body (`details.fields` of `VALIDATION_FAILED`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldProblem {
    pub field: String,
    pub problem: String,
}

impl FieldProblem {
    pub(crate) fn new(field: &str, problem: impl fmt::Display) -> FieldProblem {
        FieldProblem {
            field: field.to_owned(),
            problem: problem.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the request body is not a valid command")]
pub struct ValidationFailed {
    pub problems: Vec<FieldProblem>,
}

#[cfg(test)]
impl ValidationFailed {
    /// Each problem as (field, problem), for a test to compare with a list.
    pub(crate) fn pairs(self) -> Vec<(String, String)> {
        self.problems
            .into_iter()
            .map(|problem| (problem.field, problem.problem))
            .collect()
    }
}

const KNOWN_FIELDS: &[&str] = &["accountId", "amount", "currency", "merchantReference", "channel"];

impl CreatePayment {
    pub const OPERATION: Operation = Operation::CreatePayment;

    /// What this command's fingerprint is computed from, sent in `api_version` (empty when
    /// the request named none and the tenant's pinned version was used): create_payment has
    /// no path parameters.
    pub fn fingerprint_input<'a>(&'a self, api_version: &'a str) -> FingerprintInput<'a, CreatePayment> {
        FingerprintInput {
            operation: CreatePayment::OPERATION,
            path_params: BTreeMap::new(),
            api_version,
            command: self,
        }
    }

    /// Parses the JSON body. Every problem is reported at once, each with its field: unknown
    /// fields, repeated fields, missing fields, wrong types (a JSON number for an amount is
    /// refused: money is never a float) and invalid values.
    pub fn parse_json(body: &[u8]) -> Result<CreatePayment, ValidationFailed> {
        let mut fields = BodyFields::read(body, KNOWN_FIELDS)?;
        let account_id = fields.text("accountId", true);
        let amount = fields.text("amount", true);
        let currency = fields.text("currency", true);
        let merchant_reference = fields.text("merchantReference", true);
        let channel = fields.text("channel", false);

        let account_id = fields.parsed("accountId", account_id, AccountId::parse);
        let currency = fields.parsed("currency", currency, Currency::parse);
        // An amount can only be judged in its currency (how many decimals it may have).
        let amount = match (amount, currency) {
            (Some(text), Some(currency)) => {
                fields.parsed("amount", Some(text), |text| Amount::parse(text, currency))
            }
            _ => None,
        };
        let merchant_reference =
            fields.parsed("merchantReference", merchant_reference, MerchantReference::parse);
        let channel = match channel {
            None => Some(Channel::default()),
            Some(text) => fields.parsed("channel", Some(text), Channel::parse),
        };
        let command = match (account_id, amount, merchant_reference, channel) {
            (Some(account_id), Some(amount), Some(merchant_reference), Some(channel)) => {
                Some(CreatePayment {
                    account_id,
                    amount,
                    merchant_reference,
                    channel,
                })
            }
            _ => None,
        };
        fields.finish(command)
    }
}

/// A strict JSON object body being read field by field: every problem is noted with its
/// field, and reported together at the end (unknown fields first, then the known ones in
/// their documented order).
pub(crate) struct BodyFields {
    known: &'static [&'static str],
    values: BTreeMap<&'static str, Value>,
    problems: Vec<FieldProblem>,
}

impl BodyFields {
    /// The body's members; unknown and repeated fields are problems already.
    pub(crate) fn read(body: &[u8], known: &'static [&'static str]) -> Result<BodyFields, ValidationFailed> {
        let fields = serde_json::from_slice::<JsonObjectFields>(body).map_err(|error| ValidationFailed {
            problems: vec![FieldProblem::new("body", body_problem(&error))],
        })?;
        let mut read = BodyFields {
            known,
            values: BTreeMap::new(),
            problems: Vec::new(),
        };
        for (name, value) in fields.0 {
            match known.iter().find(|known| **known == name) {
                None => read
                    .problems
                    .push(FieldProblem::new(&name, "is not a field of this request")),
                Some(known) if read.values.contains_key(known) => read
                    .problems
                    .push(FieldProblem::new(known, "appears more than once")),
                Some(known) => {
                    read.values.insert(known, value);
                }
            }
        }
        Ok(read)
    }

    /// A text field's value (`None`, with its problem noted, when it is missing but required,
    /// or not a string; an amount given as a JSON number is told so).
    pub(crate) fn text(&mut self, name: &str, required: bool) -> Option<String> {
        match self.values.remove(name) {
            None if required => {
                self.problems.push(FieldProblem::new(name, "is required"));
                None
            }
            None => None,
            Some(Value::String(text)) => Some(text),
            Some(Value::Number(_)) if name == "amount" => {
                self.problems.push(FieldProblem::new(
                    name,
                    "must be a decimal string such as \"10.00\", not a JSON number",
                ));
                None
            }
            Some(_) => {
                self.problems.push(FieldProblem::new(name, "must be a string"));
                None
            }
        }
    }

    /// `text` parsed, its problem noted under `name` when it does not parse.
    pub(crate) fn parsed<T, E: fmt::Display>(
        &mut self,
        name: &str,
        text: Option<String>,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Option<T> {
        parse(&text?)
            .map_err(|problem| self.problems.push(FieldProblem::new(name, problem)))
            .ok()
    }

    /// The command, when every field was read without a problem.
    pub(crate) fn finish<T>(mut self, command: Option<T>) -> Result<T, ValidationFailed> {
        let known = self.known;
        self.problems
            .sort_by_key(|problem| known.iter().position(|known| *known == problem.field));
        match command {
            Some(command) if self.problems.is_empty() => Ok(command),
            _ => Err(ValidationFailed {
                problems: self.problems,
            }),
        }
    }
}

impl CanonicalCommand for CreatePayment {
    fn canonical_fields(&self) -> BTreeMap<&'static str, CanonicalValue> {
        BTreeMap::from([
            ("accountId", self.account_id.as_str().into()),
            ("amount", self.amount.to_string().into()),
            ("channel", self.channel.as_str().into()),
            ("currency", self.amount.currency().code().into()),
            ("merchantReference", self.merchant_reference.as_str().into()),
        ])
    }
}

fn body_problem(error: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match error.classify() {
        Category::Syntax | Category::Eof => format!("is not valid JSON ({error})"),
        Category::Data => "must be a JSON object".to_owned(),
        Category::Io => "could not be read".to_owned(),
    }
}

/// A JSON object's members in arrival order, repeats included (a plain map would silently
/// keep one of two `amount`s, and a proxy may have read the other).
struct JsonObjectFields(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for JsonObjectFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;

        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = JsonObjectFields;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    fields.push(entry);
                }
                Ok(JsonObjectFields(fields))
            }
        }

        deserializer.deserialize_map(FieldsVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(body: &str) -> Vec<(String, String)> {
        CreatePayment::parse_json(body.as_bytes())
            .expect_err("invalid")
            .pairs()
    }

    #[test]
    fn a_valid_body_is_normalised() {
        let command = CreatePayment::parse_json(
            br#"{"accountId":"acc_1","amount":"10","currency":"eur","merchantReference":"invoice-7781"}"#,
        )
        .expect("valid");
        assert_eq!(command.amount.to_string(), "10.00");
        assert_eq!(command.amount.currency(), Currency::Eur);
        assert_eq!(command.channel, Channel::Web);
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let found =
            problems(r#"{"accountId":"","amount":10.5,"currency":"XXX","foo":"bar","channel":"fax"}"#);
        let fields: Vec<&str> = found.iter().map(|(field, _)| field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "foo",
                "accountId",
                "amount",
                "currency",
                "merchantReference",
                "channel"
            ],
            "{found:?}"
        );
        assert!(found[2].1.contains("not a JSON number"), "{found:?}");
    }

    #[test]
    fn an_amount_is_judged_in_its_currency() {
        let found = problems(r#"{"accountId":"a","amount":"10.5","currency":"JPY","merchantReference":"r"}"#);
        assert_eq!(
            found,
            [(
                "amount".to_owned(),
                "JPY allows at most 0 decimal places".to_owned()
            )]
        );
    }

    #[test]
    fn a_repeated_field_is_refused_rather_than_guessed() {
        let found = problems(
            r#"{"accountId":"a","amount":"10.00","amount":"100.00","currency":"EUR","merchantReference":"r"}"#,
        );
        assert_eq!(
            found,
            [("amount".to_owned(), "appears more than once".to_owned())]
        );
    }

    #[test]
    fn bodies_that_are_not_objects_are_refused() {
        assert_eq!(problems("{")[0].0, "body");
        assert!(problems("{")[0].1.starts_with("is not valid JSON"));
        assert_eq!(
            problems("[1]"),
            [("body".to_owned(), "must be a JSON object".to_owned())]
        );
        assert_eq!(problems("")[0].0, "body");
        assert_eq!(
            problems(r#"{"accountId":"a","amount":"1","currency":"EUR","merchantReference":"r"} x"#)[0].0,
            "body"
        );
    }

    #[test]
    fn merchant_references_are_checked_by_characters_not_bytes() {
        assert!(MerchantReference::parse(&"é".repeat(128)).is_ok());
        assert!(MerchantReference::parse(&"é".repeat(129)).is_err());
        assert!(MerchantReference::parse("line\nbreak").is_err());
    }
}
