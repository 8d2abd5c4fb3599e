//! The recovery queue's filter, order and page cursor. The console sends them as text (what a
//! form and a link carry); they are parsed here once, and a field that does not parse is named
//! in the refusal, so that a malformed filter is a clear 400 and never a query.

use crate::money::{Amount, Currency};
use crate::recovery::{EvidenceKind, UnknownCause};
use crate::scope::Operation;
use chrono::TimeDelta;
use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr, VariantArray};

/// The filter as the console sends it: every field text, empty meaning "any".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueQuery {
    /// The tenant's name, exactly.
    pub tenant: String,
    pub operation: String,
    /// `needs_operator`, `worker_retrying` or `stale_in_progress`.
    pub attention: String,
    /// Age bounds in whole minutes since the record was created.
    pub min_age_minutes: String,
    pub max_age_minutes: String,
    /// The amount range's currency; needed with either bound.
    pub currency: String,
    /// Decimal amounts in the currency (`10.00`), inclusive.
    pub min_amount: String,
    pub max_amount: String,
    /// An [`UnknownCause`]'s name.
    pub cause: String,
    /// An [`EvidenceKind`]'s name, or `not_asked`.
    pub evidence: String,
    /// An exact idempotency key, payment or refund id, or merchant reference.
    pub search: String,
    /// A [`QueueOrder`]'s name; empty is oldest first.
    pub order: String,
    /// Where the page continues (the last page's `next`), empty for the first page.
    pub after: String,
}

/// Which records that need attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Attention {
    /// Unknown outcomes the recovery worker gave up on: only an operator moves them on.
    NeedsOperator,
    /// Unknown outcomes the worker still looks at.
    WorkerRetrying,
    /// In progress, with the owner's lease run out (a dead owner not yet taken over).
    StaleInProgress,
}

impl Attention {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The queue's orders; ties are broken by the scoped key, so that paging never skips a row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum QueueOrder {
    #[default]
    Oldest,
    Newest,
    Largest,
    Smallest,
}

impl QueueOrder {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What the provider was last seen to say, for the filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvidenceFilter {
    /// Nobody has asked the provider for an operator yet.
    NotAsked,
    Said(EvidenceKind),
}

impl EvidenceFilter {
    /// Its name in the filter (and in SQL).
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceFilter::NotAsked => "not_asked",
            EvidenceFilter::Said(kind) => kind.as_str(),
        }
    }
}

/// An amount range in one currency, in minor units, inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AmountRange {
    pub currency: Currency,
    pub min_minor: Option<i64>,
    pub max_minor: Option<i64>,
}

/// A parsed filter: what the store selects by.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueFilter {
    pub tenant_name: Option<String>,
    pub operation: Option<Operation>,
    pub attention: Option<Attention>,
    pub min_age: Option<TimeDelta>,
    pub max_age: Option<TimeDelta>,
    pub amount: Option<AmountRange>,
    pub cause: Option<UnknownCause>,
    pub evidence: Option<EvidenceFilter>,
    pub search: Option<String>,
    pub order: QueueOrder,
}

/// Where a queue page continues: strictly after this row in the filter's order. `sort_value`
/// is the row's position in that order as the store computed it.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueCursor {
    pub sort_value: i64,
    pub tenant_id: String,
    pub operation: String,
    pub key: String,
}

/// A filter field that does not parse, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("filter field `{field}`: {problem}")]
pub struct BadFilter {
    pub field: &'static str,
    pub problem: String,
}

fn bad(field: &'static str, problem: impl Into<String>) -> BadFilter {
    BadFilter {
        field,
        problem: problem.into(),
    }
}

/// A field's value, or `None` when empty.
fn given(text: &str) -> Option<&str> {
    let text = text.trim();
    (!text.is_empty()).then_some(text)
}

/// One of an enum's stored names.
fn one_of<T: VariantArray + Copy + Into<&'static str> + std::str::FromStr>(
    field: &'static str,
    text: &str,
) -> Result<Option<T>, BadFilter> {
    given(text)
        .map(|text| {
            text.parse::<T>().map_err(|_| {
                let names: Vec<&str> = T::VARIANTS.iter().map(|value| (*value).into()).collect();
                bad(field, format!("must be one of {}", names.join(", ")))
            })
        })
        .transpose()
}

/// Whole minutes, 0 to ten years.
fn minutes(field: &'static str, text: &str) -> Result<Option<TimeDelta>, BadFilter> {
    given(text)
        .map(|text| {
            text.parse::<i64>()
                .ok()
                .filter(|minutes| (0..=10 * 366 * 24 * 60).contains(minutes))
                .map(TimeDelta::minutes)
                .ok_or_else(|| bad(field, "must be a whole number of minutes"))
        })
        .transpose()
}

impl QueueFilter {
    /// The filter and the page's cursor, or the first field that does not parse.
    pub fn parse(query: &QueueQuery) -> Result<(QueueFilter, Option<QueueCursor>), BadFilter> {
        let tenant_name = given(&query.tenant).map(str::to_owned);
        if tenant_name
            .as_ref()
            .is_some_and(|name| name.chars().count() > 200)
        {
            return Err(bad("tenant", "is longer than a tenant's name can be"));
        }
        let min_age = minutes("min_age_minutes", &query.min_age_minutes)?;
        let max_age = minutes("max_age_minutes", &query.max_age_minutes)?;
        if let (Some(min), Some(max)) = (min_age, max_age)
            && min > max
        {
            return Err(bad("min_age_minutes", "is more than max_age_minutes"));
        }
        let evidence = match given(&query.evidence) {
            None => None,
            Some("not_asked") => Some(EvidenceFilter::NotAsked),
            Some(text) => Some(EvidenceFilter::Said(text.parse().map_err(|_| {
                bad(
                    "evidence",
                    "must be one of not_asked, succeeded, declined, no_charge, unreachable",
                )
            })?)),
        };
        let search = given(&query.search).map(str::to_owned);
        if search.as_ref().is_some_and(|search| search.len() > 255) {
            return Err(bad("search", "is longer than 255 bytes"));
        }
        let filter = QueueFilter {
            tenant_name,
            operation: one_of("operation", &query.operation)?,
            attention: one_of("attention", &query.attention)?,
            min_age,
            max_age,
            amount: amount_range(query)?,
            cause: one_of("cause", &query.cause)?,
            evidence,
            search,
            order: one_of("order", &query.order)?.unwrap_or_default(),
        };
        let after = given(&query.after)
            .map(|text| QueueCursor::parse(text).ok_or_else(|| bad("after", "is not a page cursor")))
            .transpose()?;
        Ok((filter, after))
    }
}

fn amount_range(query: &QueueQuery) -> Result<Option<AmountRange>, BadFilter> {
    let (min, max) = (given(&query.min_amount), given(&query.max_amount));
    let Some(code) = given(&query.currency) else {
        return match (min, max) {
            (None, None) => Ok(None),
            _ => Err(bad("currency", "is needed with an amount bound")),
        };
    };
    let currency = Currency::parse(code).map_err(|error| bad("currency", error.to_string()))?;
    let bound = |field: &'static str, text: Option<&str>| {
        text.map(|text| {
            Amount::parse(text, currency)
                .map(Amount::minor_units)
                .map_err(|error| bad(field, error.to_string()))
        })
        .transpose()
    };
    let range = AmountRange {
        currency,
        min_minor: bound("min_amount", min)?,
        max_minor: bound("max_amount", max)?,
    };
    if let (Some(min), Some(max)) = (range.min_minor, range.max_minor)
        && min > max
    {
        return Err(bad("min_amount", "is more than max_amount"));
    }
    Ok(Some(range))
}

impl QueueCursor {
    /// `[sort value, tenant, operation, key]`.
    pub fn parse(text: &str) -> Option<QueueCursor> {
        let (sort_value, tenant_id, operation, key): (i64, String, String, String) =
            serde_json::from_str(text).ok()?;
        Some(QueueCursor {
            sort_value,
            tenant_id,
            operation,
            key,
        })
    }

    pub fn to_text(&self) -> String {
        serde_json::json!([self.sort_value, self.tenant_id, self.operation, self.key]).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_query_is_everything_oldest_first() {
        let (filter, after) = QueueFilter::parse(&QueueQuery::default()).expect("parses");
        assert_eq!(filter, QueueFilter::default());
        assert_eq!(filter.order, QueueOrder::Oldest);
        assert!(after.is_none());
    }

    #[test]
    fn each_malformed_field_is_named() {
        type Spoil = fn(&mut QueueQuery);
        let cases: [(&str, Spoil); 10] = [
            ("operation", |query| query.operation = "create_charge".into()),
            ("attention", |query| query.attention = "stuck".into()),
            ("min_age_minutes", |query| query.min_age_minutes = "ten".into()),
            ("max_age_minutes", |query| query.max_age_minutes = "-1".into()),
            ("currency", |query| query.min_amount = "10.00".into()),
            ("currency", |query| {
                query.currency = "XXX".into();
                query.max_amount = "1".into();
            }),
            ("min_amount", |query| {
                query.currency = "EUR".into();
                query.min_amount = "10.001".into();
            }),
            ("cause", |query| query.cause = "gremlins".into()),
            ("evidence", |query| query.evidence = "maybe".into()),
            ("after", |query| query.after = "[1, 2]".into()),
        ];
        for (field, spoil) in cases {
            let mut query = QueueQuery::default();
            spoil(&mut query);
            let refused = QueueFilter::parse(&query).expect_err(field);
            assert_eq!(refused.field, field, "{refused}");
        }
    }

    #[test]
    fn bounds_parse_in_the_currency_and_must_be_in_order() {
        let query = QueueQuery {
            currency: "JPY".into(),
            min_amount: "1000".into(),
            max_amount: "2000".into(),
            min_age_minutes: "5".into(),
            evidence: "not_asked".into(),
            order: "largest".into(),
            ..QueueQuery::default()
        };
        let (filter, _) = QueueFilter::parse(&query).expect("parses");
        assert_eq!(
            filter.amount,
            Some(AmountRange {
                currency: Currency::Jpy,
                min_minor: Some(1000),
                max_minor: Some(2000)
            })
        );
        assert_eq!(filter.min_age, Some(TimeDelta::minutes(5)));
        assert_eq!(filter.evidence, Some(EvidenceFilter::NotAsked));
        assert_eq!(filter.order, QueueOrder::Largest);
        let reversed = QueueQuery {
            min_amount: "3000".into(),
            ..query
        };
        assert_eq!(
            QueueFilter::parse(&reversed).expect_err("reversed").field,
            "min_amount"
        );
    }

    #[test]
    fn a_cursor_round_trips_and_garbage_is_not_one() {
        let cursor = QueueCursor {
            sort_value: -1_764_000_000_123_456,
            tenant_id: "ten_1".into(),
            operation: "create_payment".into(),
            key: "k\"1".into(),
        };
        assert_eq!(QueueCursor::parse(&cursor.to_text()), Some(cursor));
        for garbage in [
            "",
            "[]",
            "[\"x\", \"a\", \"b\", \"c\"]",
            "{}",
            "[1.5, \"a\", \"b\", \"c\"]",
        ] {
            assert_eq!(QueueCursor::parse(garbage), None, "{garbage}");
        }
    }
}
