//! The `Prefer` request header (RFC 7240) as the payments API reads it: `return=minimal` (a
//! `201` without a body) and `wait=N` (hold a keyed request while another request owns its
//! key, up to N seconds). Preferences the API does not know, and values it cannot read, are
//! ignored, as the RFC asks; a preference named twice counts the first time.

use std::time::Duration;

/// The longest wait a request may ask for, in seconds; a longer one is capped to it.
pub const LONGEST_WAIT_SECS: u8 = 10;

/// `wait=N`, capped into 1 to [`LONGEST_WAIT_SECS`] seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    secs: u8,
}

impl Wait {
    /// The wait a `wait` preference's value asks for: a whole number of seconds, capped into
    /// 1 to 10; `None` for anything else (a sign, a fraction, no digits).
    pub fn requested(value: &str) -> Option<Wait> {
        if value.is_empty() || !value.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        // Digits too many for a u64 are far past the cap all the same.
        let asked = value.parse::<u64>().unwrap_or(u64::MAX);
        let secs = asked.clamp(1, u64::from(LONGEST_WAIT_SECS));
        Some(Wait {
            secs: u8::try_from(secs).unwrap_or(LONGEST_WAIT_SECS),
        })
    }

    pub fn secs(self) -> u64 {
        u64::from(self.secs)
    }

    pub fn duration(self) -> Duration {
        Duration::from_secs(self.secs())
    }

    /// The `Preference-Applied` value that says how long the server was prepared to wait.
    pub fn applied(self) -> String {
        format!("wait={}", self.secs)
    }
}

/// What a request's `Prefer` header values ask for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Preferences {
    /// `return=minimal`.
    pub minimal: bool,
    /// `wait=N`.
    pub wait: Option<Wait>,
}

impl Preferences {
    /// The preferences in every `Prefer` header value of a request, in order.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Preferences {
        let mut preferences = Preferences::default();
        let mut named_return = false;
        let mut named_wait = false;
        for preference in values.into_iter().flat_map(|value| value.split(',')) {
            // Parameters after `;` qualify a preference; neither of these takes any.
            let preference = preference.split(';').next().unwrap_or_default();
            let (name, value) = match preference.split_once('=') {
                Some((name, value)) => (name.trim(), unquoted(value.trim())),
                None => (preference.trim(), ""),
            };
            if name.eq_ignore_ascii_case("return") && !named_return {
                named_return = true;
                preferences.minimal = value.eq_ignore_ascii_case("minimal");
            } else if name.eq_ignore_ascii_case("wait") && !named_wait {
                named_wait = true;
                preferences.wait = Wait::requested(value);
            }
        }
        preferences
    }
}

/// A `word` (RFC 7230): a token, or a quoted string without its quotes.
fn unquoted(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or(value)
}

#[cfg(test)]
mod tests {
    use super::{Preferences, Wait};

    fn wait_of(header: &str) -> Option<u64> {
        Preferences::parse([header]).wait.map(Wait::secs)
    }

    #[test]
    fn a_wait_is_whole_seconds_capped_into_one_to_ten() {
        for (header, secs) in [
            ("wait=5", Some(5)),
            ("wait=1", Some(1)),
            ("wait=10", Some(10)),
            ("wait=11", Some(10)),
            ("wait=600", Some(10)),
            ("wait=99999999999999999999999", Some(10)),
            ("wait=0", Some(1)),
            ("WAIT=3", Some(3)),
            ("wait = 4", Some(4)),
            ("wait=\"7\"", Some(7)),
            ("wait=2;foo=bar", Some(2)),
            ("wait=-1", None),
            ("wait=1.5", None),
            ("wait=", None),
            ("wait", None),
            ("wait=soon", None),
            ("waiting=3", None),
            ("", None),
        ] {
            assert_eq!(wait_of(header), secs, "{header:?}");
        }
    }

    #[test]
    fn preferences_are_read_across_values_and_the_first_of_a_name_counts() {
        let both = Preferences::parse(["return=minimal, wait=3"]);
        assert!(both.minimal);
        assert_eq!(both.wait.map(Wait::secs), Some(3));
        let split = Preferences::parse(["respond-async", "wait=2", "wait=9", "return=minimal"]);
        assert_eq!(split.wait.map(Wait::secs), Some(2));
        assert!(split.minimal);
        let first_return = Preferences::parse(["return=representation, return=minimal"]);
        assert!(!first_return.minimal);
        assert!(Preferences::parse(["Return=Minimal"]).minimal);
        assert_eq!(Preferences::parse(Vec::<&str>::new()), Preferences::default());
    }

    #[test]
    fn the_applied_preference_names_the_capped_wait() {
        assert_eq!(
            Preferences::parse(["wait=60"]).wait.map(Wait::applied).as_deref(),
            Some("wait=10")
        );
        assert_eq!(
            Preferences::parse(["wait=4"]).wait.map(Wait::applied).as_deref(),
            Some("wait=4")
        );
    }
}
