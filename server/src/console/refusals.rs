//! Refused sign-ins are counted, not written one row each. A refused attempt costs a counter
//! and a map entry; once a minute the audit log gets one summary per source that was refused
//! (how many times, why, and which operators' names it tried). Writing a row per refusal let
//! anyone who reaches the port queue thousands of writes a second in front of payments
//! (SQLite has one writer), and grew the audit log without bound.

use crate::auth::source::Source;
use crate::metrics::Buffered;
use crate::store::Store;
use domain::operator::{AuditEntry, OperatorUsername};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Why a sign-in was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Over a sign-in limit (the source's, an operator's, or everyone's).
    RateLimited,
    /// Every password check was taken.
    Busy,
    WrongPassword,
}

impl Refusal {
    fn as_str(self) -> &'static str {
        match self {
            Refusal::RateLimited => "rate_limited",
            Refusal::Busy => "busy",
            Refusal::WrongPassword => "wrong_password",
        }
    }
}

/// Sources summed up one by one in a minute, at most; the refusals of any more are summed up
/// together, so that memory stays bounded whatever addresses a flood comes from.
const SOURCES_KEPT: usize = 4_096;
/// Operators' names kept per source (names typed that are not usernames are never kept).
const USERNAMES_KEPT: usize = 8;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Tally {
    rate_limited: u64,
    busy: u64,
    wrong_password: u64,
    usernames: BTreeSet<String>,
    /// Names beyond [`USERNAMES_KEPT`].
    more_usernames: bool,
}

impl Tally {
    fn add(&mut self, refusal: Refusal, typed: &str, times: u64) {
        match refusal {
            Refusal::RateLimited => self.rate_limited += times,
            Refusal::Busy => self.busy += times,
            Refusal::WrongPassword => self.wrong_password += times,
        }
        // A password typed into the username field must not be written down.
        if let Ok(username) = OperatorUsername::parse(typed) {
            self.note_username(username.to_string());
        }
    }

    fn note_username(&mut self, username: String) {
        if self.usernames.len() < USERNAMES_KEPT || self.usernames.contains(&username) {
            self.usernames.insert(username);
        } else {
            self.more_usernames = true;
        }
    }

    fn merge(&mut self, other: Tally) {
        self.rate_limited += other.rate_limited;
        self.busy += other.busy;
        self.wrong_password += other.wrong_password;
        self.more_usernames |= other.more_usernames;
        for username in other.usernames {
            self.note_username(username);
        }
    }

    fn summary(&self) -> String {
        let names = match (self.usernames.is_empty(), self.more_usernames) {
            (true, _) => "no operator's name".to_owned(),
            (false, false) => self.usernames.iter().cloned().collect::<Vec<_>>().join(", "),
            (false, true) => format!(
                "{} and more",
                self.usernames.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        };
        format!(
            "{} wrong password, {} over a limit, {} while every check was busy; names tried: {names}",
            self.wrong_password, self.rate_limited, self.busy
        )
    }
}

/// Whose refusals a summary is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Who {
    Source(Source),
    /// Every source past [`SOURCES_KEPT`] in one minute.
    Others,
}

#[derive(Default)]
pub struct SignInRefusals {
    tallies: Mutex<HashMap<Who, Tally>>,
}

/// `console_sign_in_refusals_total{reason}` at zero, so that a rate reads from the start.
pub fn register_metrics() {
    for refusal in [Refusal::RateLimited, Refusal::Busy, Refusal::WrongPassword] {
        metrics::counter!("console_sign_in_refusals_total", "reason" => refusal.as_str()).increment(0);
    }
}

impl SignInRefusals {
    /// `source` was refused signing in as `typed`.
    pub fn count(&self, source: Source, typed: &str, refusal: Refusal) {
        metrics::counter!("console_sign_in_refusals_total", "reason" => refusal.as_str()).increment(1);
        let mut tallies = self.tallies();
        let who = match tallies.contains_key(&Who::Source(source)) || tallies.len() < SOURCES_KEPT {
            true => Who::Source(source),
            false => Who::Others,
        };
        tallies.entry(who).or_default().add(refusal, typed, 1);
    }

    fn tallies(&self) -> MutexGuard<'_, HashMap<Who, Tally>> {
        self.tallies.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn summary_entry(who: Who, tally: &Tally) -> AuditEntry {
    let target = match who {
        Who::Source(source) => format!("source {source}"),
        Who::Others => format!("sources beyond the first {SOURCES_KEPT}"),
    };
    AuditEntry::new("anonymous", "sign_in.refused")
        .on(target)
        .ended("refused")
        .details(tally.summary())
}

#[async_trait::async_trait]
impl Buffered for SignInRefusals {
    /// One audit entry per source refused since the last flush, all in one transaction (one
    /// commit a minute, however many sources); kept for the next try when it fails.
    async fn flush(&self, store: &dyn Store) {
        let mut drained: Vec<(Who, Tally)> = self.tallies().drain().collect();
        if drained.is_empty() {
            return;
        }
        drained.sort_by_key(|(who, _)| *who);
        let entries: Vec<AuditEntry> = drained
            .iter()
            .map(|(who, tally)| summary_entry(*who, tally))
            .collect();
        if let Err(error) = store.append_audit_entries(&entries).await {
            tracing::warn!(%error, sources = entries.len(), "refused sign-ins not summed up; kept for the next try");
            let mut tallies = self.tallies();
            for (who, tally) in drained {
                tallies.entry(who).or_default().merge(tally);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(host: u8) -> Source {
        Source::of([127, 0, 0, host].into())
    }

    #[test]
    fn a_source_is_summed_up_once_whatever_it_typed() {
        let refusals = SignInRefusals::default();
        for attempt in 0..1_000 {
            let typed = match attempt % 3 {
                0 => "admin".to_owned(),
                1 => format!("user{}", attempt % 30),
                _ => "hunter2 hunter2".to_owned(),
            };
            let refusal = match attempt % 2 {
                0 => Refusal::RateLimited,
                _ => Refusal::WrongPassword,
            };
            refusals.count(source(1), &typed, refusal);
        }
        refusals.count(source(2), "bob", Refusal::Busy);
        let tallies = refusals.tallies();
        assert_eq!(tallies.len(), 2);
        let flood = &tallies[&Who::Source(source(1))];
        assert_eq!(
            (flood.rate_limited, flood.wrong_password, flood.busy),
            (500, 500, 0)
        );
        assert_eq!(flood.usernames.len(), USERNAMES_KEPT);
        assert!(flood.usernames.contains("admin") && flood.more_usernames);
        let summary = flood.summary();
        assert!(
            summary.starts_with("500 wrong password, 500 over a limit, 0 while"),
            "{summary}"
        );
        assert!(
            !summary.contains("hunter2"),
            "typed passwords are never kept: {summary}"
        );
        assert!(summary.ends_with("and more"), "{summary}");
        assert_eq!(
            tallies[&Who::Source(source(2))].summary(),
            "0 wrong password, 0 over a limit, 1 while every check was busy; names tried: bob"
        );
    }

    #[test]
    fn sources_past_the_bound_are_summed_up_together() {
        let refusals = SignInRefusals::default();
        for host in 0..(SOURCES_KEPT as u32 + 100) {
            let address = std::net::Ipv4Addr::from(0x0a00_0000 + host);
            refusals.count(Source::of(address.into()), "x y", Refusal::RateLimited);
        }
        let tallies = refusals.tallies();
        assert_eq!(tallies.len(), SOURCES_KEPT + 1);
        assert_eq!(tallies[&Who::Others].rate_limited, 100);
        assert_eq!(
            summary_entry(Who::Others, &tallies[&Who::Others])
                .target
                .as_deref(),
            Some("sources beyond the first 4096")
        );
    }
}
