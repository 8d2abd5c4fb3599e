//! Money as the API speaks it: a decimal string and an ISO 4217 code on the wire, integer
//! minor units and the code in the database. Never a float.

use serde::{Serialize, Serializer};
use std::fmt;

/// The currencies Idem accepts, with their minor-unit digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Currency {
    Chf,
    Eur,
    Gbp,
    Jpy,
    Usd,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be one of CHF, EUR, GBP, JPY, USD")]
pub struct UnsupportedCurrency;

impl Currency {
    pub const ALL: [Currency; 5] = [
        Currency::Chf,
        Currency::Eur,
        Currency::Gbp,
        Currency::Jpy,
        Currency::Usd,
    ];

    /// Case-insensitive on input: `"eur"` is `EUR`.
    pub fn parse(code: &str) -> Result<Currency, UnsupportedCurrency> {
        Currency::ALL
            .into_iter()
            .find(|currency| currency.code().eq_ignore_ascii_case(code))
            .ok_or(UnsupportedCurrency)
    }

    pub const fn code(self) -> &'static str {
        match self {
            Currency::Chf => "CHF",
            Currency::Eur => "EUR",
            Currency::Gbp => "GBP",
            Currency::Jpy => "JPY",
            Currency::Usd => "USD",
        }
    }

    pub const fn minor_digits(self) -> u32 {
        match self {
            Currency::Jpy => 0,
            Currency::Chf | Currency::Eur | Currency::Gbp | Currency::Usd => 2,
        }
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl Serialize for Currency {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.code())
    }
}

/// A positive amount in a currency's minor units (cents for EUR, yen for JPY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Amount {
    minor_units: i64,
    currency: Currency,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    #[error("must be a decimal string such as \"10.00\"")]
    NotADecimal,
    #[error("must be greater than zero")]
    NotPositive,
    #[error("{currency} allows at most {digits} decimal places")]
    TooManyDecimals { currency: Currency, digits: u32 },
    #[error("is too large")]
    TooLarge,
}

impl Amount {
    /// Parses the API's decimal string. `"10"`, `"10.0"` and `"10.00"` are the same EUR amount.
    /// Strict: no sign, exponent, whitespace, leading zeros, or bare decimal point.
    pub fn parse(text: &str, currency: Currency) -> Result<Amount, AmountError> {
        Self::from_minor_units(parse_minor_units(text, currency)?, currency)
    }

    /// From the database: the stored minor units and currency.
    pub fn from_minor_units(minor_units: i64, currency: Currency) -> Result<Amount, AmountError> {
        if minor_units <= 0 {
            return Err(AmountError::NotPositive);
        }
        Ok(Amount {
            minor_units,
            currency,
        })
    }

    pub fn minor_units(self) -> i64 {
        self.minor_units
    }

    pub fn currency(self) -> Currency {
        self.currency
    }
}

/// The most digits before the decimal point: far above any real payment, far below i64.
const MAX_INTEGER_DIGITS: usize = 13;

/// A non-negative decimal string in minor units of `currency` (zero allowed: balances).
fn parse_minor_units(text: &str, currency: Currency) -> Result<i64, AmountError> {
    let (integer, fraction) = match text.split_once('.') {
        Some((integer, fraction)) => (integer, Some(fraction)),
        None => (text, None),
    };
    let all_digits = |part: &str| !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_digit());
    if !all_digits(integer) || fraction.is_some_and(|fraction| !all_digits(fraction)) {
        return Err(AmountError::NotADecimal);
    }
    if integer.len() > 1 && integer.starts_with('0') {
        return Err(AmountError::NotADecimal);
    }
    if integer.len() > MAX_INTEGER_DIGITS {
        return Err(AmountError::TooLarge);
    }
    let digits = currency.minor_digits();
    let fraction = fraction.unwrap_or("");
    // Trailing zeros beyond the currency's digits change nothing ("10.000" EUR is 10.00);
    // a significant digit there would be a fraction of a minor unit.
    let significant = fraction.trim_end_matches('0');
    if significant.len() > digits as usize {
        return Err(AmountError::TooManyDecimals { currency, digits });
    }
    let mut minor_units: i64 = 0;
    for byte in integer.bytes().chain(significant.bytes()) {
        minor_units = minor_units * 10 + i64::from(byte - b'0');
    }
    minor_units *= 10_i64.pow(digits - significant.len() as u32);
    Ok(minor_units)
}

/// An account balance: like an amount, but zero is a balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Balance {
    pub minor_units: i64,
    pub currency: Currency,
}

impl Balance {
    pub fn parse(text: &str, currency: Currency) -> Result<Balance, AmountError> {
        Ok(Balance {
            minor_units: parse_minor_units(text, currency)?,
            currency,
        })
    }
}

/// The canonical decimal string: exactly the currency's minor digits (`"10.00"`, `"1000"` for JPY).
impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_decimal(f, self.minor_units, self.currency)
    }
}

/// Like an amount's (`"0.00"` for nothing).
impl fmt::Display for Balance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_decimal(f, self.minor_units, self.currency)
    }
}

fn write_decimal(f: &mut fmt::Formatter<'_>, minor_units: i64, currency: Currency) -> fmt::Result {
    let digits = currency.minor_digits();
    if digits == 0 {
        return write!(f, "{minor_units}");
    }
    let scale = 10_i64.pow(digits);
    write!(
        f,
        "{}.{:0width$}",
        minor_units / scale,
        minor_units % scale,
        width = digits as usize
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eur(text: &str) -> Result<Amount, AmountError> {
        Amount::parse(text, Currency::Eur)
    }

    #[test]
    fn equal_amounts_in_different_scales_are_equal() {
        let ten = eur("10.00").expect("valid");
        assert_eq!(ten.minor_units(), 1000);
        assert_eq!(eur("10"), Ok(ten));
        assert_eq!(eur("10.0"), Ok(ten));
        assert_eq!(eur("10.000"), Ok(ten));
        assert_eq!(ten.to_string(), "10.00");
        assert_eq!(eur("0.01").expect("valid").to_string(), "0.01");
    }

    #[test]
    fn jpy_has_no_minor_digits() {
        let yen = Amount::parse("1500", Currency::Jpy).expect("valid");
        assert_eq!(yen.minor_units(), 1500);
        assert_eq!(yen.to_string(), "1500");
        assert_eq!(
            Amount::parse("1500.5", Currency::Jpy),
            Err(AmountError::TooManyDecimals {
                currency: Currency::Jpy,
                digits: 0
            })
        );
        assert_eq!(Amount::parse("1500.0", Currency::Jpy), Ok(yen));
    }

    #[test]
    fn malformed_amounts_are_refused() {
        for text in [
            "", ".", "10.", ".5", "+10", "-10", "1e3", " 10", "10 ", "1,00", "010", "0x10", "١٠",
        ] {
            assert_eq!(eur(text), Err(AmountError::NotADecimal), "{text:?}");
        }
        assert_eq!(eur("0"), Err(AmountError::NotPositive));
        assert_eq!(eur("0.00"), Err(AmountError::NotPositive));
        assert!(matches!(eur("10.001"), Err(AmountError::TooManyDecimals { .. })));
        assert_eq!(eur("99999999999999"), Err(AmountError::TooLarge));
        assert_eq!(
            Balance::parse("0.00", Currency::Eur).map(|b| b.minor_units),
            Ok(0)
        );
        assert_eq!(Balance::parse("-1", Currency::Eur), Err(AmountError::NotADecimal));
        assert!(
            eur("9999999999999.99").is_ok(),
            "the largest accepted amount fits in i64"
        );
    }

    #[test]
    fn currencies_are_case_insensitive_on_input() {
        assert_eq!(Currency::parse("eur"), Ok(Currency::Eur));
        assert_eq!(Currency::parse("Jpy"), Ok(Currency::Jpy));
        assert_eq!(Currency::parse("XXX"), Err(UnsupportedCurrency));
        assert_eq!(Currency::parse(""), Err(UnsupportedCurrency));
    }
}
