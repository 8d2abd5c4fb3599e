//! Statements written once for both dialects. Most of the store's SQL is the same text on
//! PostgreSQL and SQLite but for how the database's clock is spelled, so a statement names
//! the clock with a placeholder, and each dialect's spelling is filled in once per process:
//!
//! | placeholder | PostgreSQL | SQLite (times are RFC 3339 text) |
//! |---|---|---|
//! | `{now}` | `now()` | `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')` |
//! | `{now+$N}` | `now() + make_interval(secs => $N)` | `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', $N \|\| ' seconds')` |
//! | `{now-$N}` | `now() - make_interval(secs => $N)` | `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' \|\| $N \|\| ' seconds')` |
//!
//! `$N` is a placeholder of the statement, in seconds. Statements that differ in more than
//! this (row locks, upserts from JSON, epoch arithmetic) stay in each dialect's file, with why.

use super::target::DialectName;
use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

/// `template` in `dialect`'s spelling, made once per process and kept.
pub fn expanded(dialect: DialectName, template: &'static str) -> &'static str {
    static MADE: LazyLock<RwLock<HashMap<(DialectName, usize), &'static str>>> =
        LazyLock::new(|| RwLock::new(HashMap::new()));
    // The template's address names it: each is a constant of the store.
    let name = (dialect, template.as_ptr() as usize);
    if let Some(made) = MADE
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(&name)
    {
        return made;
    }
    let made: &'static str = Box::leak(expand(dialect, template).into_boxed_str());
    let mut kept = MADE.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    kept.entry(name).or_insert(made)
}

/// `template` with each placeholder in `dialect`'s spelling.
fn expand(dialect: DialectName, template: &str) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(start) = rest.find("{now") {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let Some(end) = after.find('}') else {
            break;
        };
        let placeholder = &after[1..end];
        out.push_str(&spelling(dialect, placeholder));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

fn spelling(dialect: DialectName, placeholder: &str) -> String {
    let (sign, seconds) = match placeholder.strip_prefix("now") {
        Some("") | None => (None, ""),
        Some(shifted) => (shifted.chars().next(), &shifted[1..]),
    };
    match (dialect, sign) {
        (DialectName::Postgres, None) => "now()".to_owned(),
        (DialectName::Postgres, Some(sign)) => format!("now() {sign} make_interval(secs => {seconds})"),
        (DialectName::Sqlite, None) => "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')".to_owned(),
        (DialectName::Sqlite, Some('-')) => {
            format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || {seconds} || ' seconds')")
        }
        (DialectName::Sqlite, Some(_)) => {
            format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', {seconds} || ' seconds')")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = "update t set at = {now}, until = {now+$1} where seen <= {now-$2} and x = '{}'";

    #[test]
    fn each_placeholder_is_spelled_as_its_dialect_spells_the_clock() {
        assert_eq!(
            expand(DialectName::Postgres, TEMPLATE),
            "update t set at = now(), until = now() + make_interval(secs => $1) \
             where seen <= now() - make_interval(secs => $2) and x = '{}'"
        );
        assert_eq!(
            expand(DialectName::Sqlite, TEMPLATE),
            "update t set at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), \
             until = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', $1 || ' seconds') \
             where seen <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $2 || ' seconds') and x = '{}'"
        );
    }

    #[test]
    fn a_statement_without_placeholders_is_left_as_it_is() {
        let plain = "select id from tenants where name = $1";
        assert_eq!(expand(DialectName::Postgres, plain), plain);
        assert_eq!(expand(DialectName::Sqlite, plain), plain);
    }

    #[test]
    fn a_template_is_expanded_once_per_dialect_and_kept() {
        let first = expanded(DialectName::Sqlite, TEMPLATE);
        assert!(std::ptr::eq(first, expanded(DialectName::Sqlite, TEMPLATE)));
        assert_ne!(first, expanded(DialectName::Postgres, TEMPLATE));
    }
}
