//! Statements written once for both dialects. Most of the store's SQL is the same text on
//! PostgreSQL and SQLite but for a few spellings, so a statement names them with placeholders,
//! and each dialect's spelling is filled in once per process:
//!
//! | placeholder | PostgreSQL | SQLite (times are RFC 3339 text) |
//! |---|---|---|
//! | `{now}` | `now()` | `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')` |
//! | `{now+$N}` | `now() + make_interval(secs => $N)` | `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', $N \|\| ' seconds')` |
//! | `{now-$N}` | `now() - make_interval(secs => $N)` | `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' \|\| $N \|\| ' seconds')` |
//! | `{seconds_since(X)}` | `cast(extract(epoch from now() - X) as double precision)` | `(julianday('now') - julianday(X)) * 86400.0` |
//! | `{time($N)}` | `$N::timestamptz` | `strftime('%Y-%m-%dT%H:%M:%fZ', $N)` |
//! | `{text($N)}` | `$N::text` | `$N` |
//! | `{json_strings($N)}` | `jsonb_array_elements_text(cast($N as jsonb))` | `json_each($N)` |
//! | `{json_rows($N)}` | `jsonb_array_elements(cast($N as jsonb))` | `json_each($N)` |
//! | `{for_update}` | `for update` | nothing |
//! | `{skip_locked}` | `for update skip locked` | nothing |
//!
//! `$N` is a placeholder of the statement, in seconds; for `{json_strings($N)}` a JSON array
//! of strings, read as rows of one column, `value` (a batch's ids in one statement); for
//! `{json_rows($N)}` a JSON array of arrays, whose fields `value->>0`, `value->>1`, … read alike
//! in both. The row locks are nothing on SQLite
//! because its one writer holds the whole database from a transaction's first write (the
//! claim's insert, `begin immediate`) until it ends, so no other transaction can read rows it
//! is about to change, and none can take the same rows. Statements that differ in more than
//! this (upserts from JSON, deletes by row id, epoch buckets) stay in each dialect's file.

use super::target::DialectName;
use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

/// `template` in `dialect`'s spelling, made once per process and kept.
pub fn expanded(dialect: DialectName, template: &'static str) -> &'static str {
    kept(Made::Expanded(dialect, template.as_ptr() as usize), || {
        expand(dialect, template)
    })
}

/// What a statement's text was made from. Addresses name the store's constants, and the
/// statements made from them, which are kept.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Made {
    /// A template in a dialect's spelling.
    Expanded(DialectName, usize),
    /// Two statements sent as one (SQLite's group commit: a savepoint's opening in front of a
    /// caller's first statement).
    Joined(usize, usize),
}

/// The statement `name` names, made by `make` the first time and kept for the process's life,
/// so that sqlx, which takes `&'static str` and caches prepared statements by their text, sees
/// the same text each time.
pub(super) fn kept(name: Made, make: impl FnOnce() -> String) -> &'static str {
    static MADE: LazyLock<RwLock<HashMap<Made, &'static str>>> =
        LazyLock::new(|| RwLock::new(HashMap::new()));
    if let Some(made) = MADE
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(&name)
    {
        return made;
    }
    let made: &'static str = Box::leak(make().into_boxed_str());
    let mut kept = MADE.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    kept.entry(name).or_insert(made)
}

/// The placeholders, by the text that opens them.
const PLACEHOLDERS: [&str; 8] = [
    "{now",
    "{seconds_since(",
    "{time(",
    "{text(",
    "{json_strings(",
    "{json_rows(",
    "{for_update}",
    "{skip_locked}",
];

/// `template` with each placeholder in `dialect`'s spelling.
fn expand(dialect: DialectName, template: &str) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(start) = PLACEHOLDERS.iter().filter_map(|opening| rest.find(opening)).min() {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let Some(end) = after.find('}') else {
            break;
        };
        out.push_str(&spelling(dialect, &after[1..end]));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The placeholders written as a call, `name(argument)`: their PostgreSQL and SQLite forms,
/// `{}` where the argument goes.
const CALLS: [(&str, &str, &str); 5] = [
    (
        "seconds_since",
        "cast(extract(epoch from now() - {}) as double precision)",
        "(julianday('now') - julianday({})) * 86400.0",
    ),
    ("time", "{}::timestamptz", "strftime('%Y-%m-%dT%H:%M:%fZ', {})"),
    // PostgreSQL cannot infer the type of a parameter compared only with a literal
    // (`$1 = ''`); SQLite's parameters need no type.
    ("text", "{}::text", "{}"),
    (
        "json_strings",
        "jsonb_array_elements_text(cast({} as jsonb))",
        "json_each({})",
    ),
    (
        "json_rows",
        "jsonb_array_elements(cast({} as jsonb))",
        "json_each({})",
    ),
];

/// The argument of a placeholder written as a call, `name(argument)`.
fn call_argument<'p>(placeholder: &'p str, name: &str) -> Option<&'p str> {
    placeholder
        .strip_prefix(name)?
        .strip_prefix('(')?
        .strip_suffix(')')
}

fn spelling(dialect: DialectName, placeholder: &str) -> String {
    let postgres = dialect == DialectName::Postgres;
    for (name, postgres_form, sqlite_form) in CALLS {
        if let Some(argument) = call_argument(placeholder, name) {
            return if postgres { postgres_form } else { sqlite_form }.replace("{}", argument);
        }
    }
    match (placeholder, postgres) {
        ("for_update", true) => "for update".to_owned(),
        ("skip_locked", true) => "for update skip locked".to_owned(),
        ("for_update" | "skip_locked", false) => String::new(),
        ("now", true) => "now()".to_owned(),
        ("now", false) => "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')".to_owned(),
        (shifted, postgres) => {
            let (sign, seconds) = shifted
                .strip_prefix("now")
                .and_then(|rest| rest.split_at_checked(1))
                .unwrap_or_default();
            match (postgres, sign) {
                (true, _) => format!("now() {sign} make_interval(secs => {seconds})"),
                (false, "-") => {
                    format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || {seconds} || ' seconds')")
                }
                (false, _) => format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', {seconds} || ' seconds')"),
            }
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
    fn row_locks_and_ages_are_spelled_for_each_dialect() {
        let template = "select {seconds_since(min(created_at))} as age from t where id = $1 {for_update}; \
                        select id from t limit 1 {skip_locked}";
        assert_eq!(
            expand(DialectName::Postgres, template),
            "select cast(extract(epoch from now() - min(created_at)) as double precision) as age \
             from t where id = $1 for update; select id from t limit 1 for update skip locked"
        );
        assert_eq!(
            expand(DialectName::Sqlite, template),
            "select (julianday('now') - julianday(min(created_at))) * 86400.0 as age \
             from t where id = $1 ; select id from t limit 1 "
        );
    }

    #[test]
    fn time_and_text_parameters_are_typed_as_each_dialect_needs() {
        let cases = [
            (
                "delete from s where expires_at < {time($1)}",
                "delete from s where expires_at < $1::timestamptz",
                "delete from s where expires_at < strftime('%Y-%m-%dT%H:%M:%fZ', $1)",
            ),
            (
                "select 1 where ({text($1)} = '' or name = $1)",
                "select 1 where ($1::text = '' or name = $1)",
                "select 1 where ($1 = '' or name = $1)",
            ),
        ];
        for (template, postgres, sqlite) in cases {
            assert_eq!(expand(DialectName::Postgres, template), postgres);
            assert_eq!(expand(DialectName::Sqlite, template), sqlite);
        }
    }

    #[test]
    fn a_json_array_parameter_is_read_as_rows_of_one_column_named_value() {
        let template = "select value from {json_strings($2)} where true order by value; \
                        select value->>0, value->>1 from {json_rows($1)}";
        assert_eq!(
            expand(DialectName::Postgres, template),
            "select value from jsonb_array_elements_text(cast($2 as jsonb)) where true order by value; \
             select value->>0, value->>1 from jsonb_array_elements(cast($1 as jsonb))"
        );
        assert_eq!(
            expand(DialectName::Sqlite, template),
            "select value from json_each($2) where true order by value; \
             select value->>0, value->>1 from json_each($1)"
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
