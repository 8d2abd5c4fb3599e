//! How often sign-in may be tried, so that passwords cannot be guessed and one source cannot
//! lock others out. Three buckets, each of bounded keys:
//!
//! - per client address (an IPv6 address by its /64, which one host usually holds whole):
//!   one source's whole budget, whatever names it types;
//! - per client address and username: what one source may try against one operator, well
//!   under the next bucket, so that a single source can never spend an operator's budget;
//! - per username, across all sources: what a distributed guesser gets against one operator.
//!   Locking an operator out this way takes several sources at once;
//! - everyone's: the password checks the whole console runs, whatever the sources (a crowd
//!   of sources, each within its own budget, would otherwise take the cores payments need).
//!
//! Only a valid username ([`OperatorUsername`]: short, of a fixed alphabet) gets a bucket of its
//! own; anything else typed into the field spends its source's budget only. Buckets back at
//! their full state are dropped every few hundred attempts, so memory follows the recent
//! attempt rate, not the history.

use crate::auth::source::Source;
use domain::operator::OperatorUsername;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};

type Bucket<K, C> = RateLimiter<K, DefaultKeyedStateStore<K>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// Attempts per minute from one client address (an office behind one NAT is one source).
const PER_SOURCE: NonZeroU32 = NonZeroU32::new(60).expect("non-zero");
/// Attempts per minute from one client address against one username.
const PER_SOURCE_AND_USERNAME: NonZeroU32 = NonZeroU32::new(5).expect("non-zero");
/// Attempts per minute against one username, from anywhere.
const PER_USERNAME: NonZeroU32 = NonZeroU32::new(30).expect("non-zero");
/// Password checks per second across all sources, in bursts of [`EVERYONE_BURST`]: a few
/// tenths of a core of Argon2 at most.
const EVERYONE_PER_SECOND: NonZeroU32 = NonZeroU32::new(10).expect("non-zero");
const EVERYONE_BURST: NonZeroU32 = NonZeroU32::new(60).expect("non-zero");
/// Attempts between two prunings of buckets that are full again.
const PRUNE_EVERY: u32 = 256;

pub struct SignInLimits<C: Clock = DefaultClock> {
    per_source: Bucket<Source, C>,
    per_source_and_username: Bucket<(Source, OperatorUsername), C>,
    per_username: Bucket<OperatorUsername, C>,
    everyone: RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>,
    attempts: AtomicU32,
}

impl Default for SignInLimits {
    fn default() -> SignInLimits {
        SignInLimits::with_clock(DefaultClock::default())
    }
}

fn bucket<K: Hash + Eq + Clone, C: Clock + Clone>(per_minute: NonZeroU32, clock: &C) -> Bucket<K, C> {
    RateLimiter::new(Quota::per_minute(per_minute), Default::default(), clock.clone())
}

impl<C: Clock + Clone> SignInLimits<C> {
    pub fn with_clock(clock: C) -> SignInLimits<C> {
        SignInLimits {
            per_source: bucket(PER_SOURCE, &clock),
            per_source_and_username: bucket(PER_SOURCE_AND_USERNAME, &clock),
            per_username: bucket(PER_USERNAME, &clock),
            everyone: RateLimiter::direct_with_clock(
                Quota::per_second(EVERYONE_PER_SECOND).allow_burst(EVERYONE_BURST),
                clock.clone(),
            ),
            attempts: AtomicU32::new(0),
        }
    }

    /// Whether `source` may try to sign in as `typed` now; the attempt is counted either way.
    /// The source's own budget is spent first, so a source that is refused spends nobody
    /// else's.
    pub fn allow(&self, source: Source, typed: &str) -> bool {
        if self.attempts.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.prune();
        }
        if self.per_source.check_key(&source).is_err() {
            return false;
        }
        let username_allowed = match OperatorUsername::parse(typed) {
            Ok(username) => {
                self.per_source_and_username
                    .check_key(&(source, username.clone()))
                    .is_ok()
                    && self.per_username.check_key(&username).is_ok()
            }
            Err(_) => true,
        };
        username_allowed && self.everyone.check().is_ok()
    }

    /// Drops the buckets that are full again (indistinguishable from new ones).
    pub fn prune(&self) {
        self.per_source.retain_recent();
        self.per_source_and_username.retain_recent();
        self.per_username.retain_recent();
        self.per_source.shrink_to_fit();
        self.per_source_and_username.shrink_to_fit();
        self.per_username.shrink_to_fit();
    }

    /// Buckets held: sources, source-and-username pairs, usernames.
    pub fn held(&self) -> (usize, usize, usize) {
        (
            self.per_source.len(),
            self.per_source_and_username.len(),
            self.per_username.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;
    use std::time::Duration;

    fn source(address: &str) -> Source {
        Source::of(address.parse().expect("an address"))
    }

    #[test]
    fn what_is_not_a_username_gets_no_bucket_of_its_own() {
        let limits = SignInLimits::with_clock(FakeRelativeClock::default());
        let long = "a".repeat(60_000);
        for typed in [long.as_str(), "hunter2 hunter2", "ADMIN\u{0}", ""] {
            limits.allow(source("192.0.2.1"), typed);
        }
        assert_eq!(limits.held(), (1, 0, 0));
    }

    #[test]
    fn one_source_cannot_lock_out_an_operator_or_another_source() {
        let limits = SignInLimits::with_clock(FakeRelativeClock::default());
        let attacker = source("192.0.2.66");
        let refused = (0..100)
            .filter(|attempt| {
                let typed = if attempt % 2 == 0 {
                    "admin".to_owned()
                } else {
                    format!("user{attempt}")
                };
                !limits.allow(attacker, &typed)
            })
            .count();
        // 5 of the 50 tries of admin pass, and the source's budget ends the rest.
        assert_eq!(
            refused,
            100 - 5 - (PER_SOURCE.get() as usize - 30),
            "the attacker is limited"
        );
        assert!(
            limits.allow(source("198.51.100.7"), "admin"),
            "admin from elsewhere"
        );
        assert!(limits.allow(source("198.51.100.8"), "bob"), "anyone else");
    }

    #[test]
    fn an_operator_under_a_distributed_guess_is_limited_across_sources() {
        let limits = SignInLimits::with_clock(FakeRelativeClock::default());
        let allowed = (0..100)
            .filter(|host| limits.allow(source(&format!("203.0.113.{host}")), "admin"))
            .count();
        assert_eq!(allowed, PER_USERNAME.get() as usize);
    }

    #[test]
    fn a_crowd_of_sources_within_their_own_budgets_shares_one_bound() {
        let clock = FakeRelativeClock::default();
        let limits = SignInLimits::with_clock(clock.clone());
        let allowed = |limits: &SignInLimits<FakeRelativeClock>| {
            (0..=255u8)
                .filter(|host| limits.allow(source(&format!("127.0.0.{host}")), &format!("user{host}")))
                .count()
        };
        assert_eq!(allowed(&limits), EVERYONE_BURST.get() as usize);
        clock.advance(Duration::from_secs(1));
        assert_eq!(allowed(&limits), EVERYONE_PER_SECOND.get() as usize);
    }

    #[test]
    fn buckets_full_again_are_dropped() {
        let clock = FakeRelativeClock::default();
        let limits = SignInLimits::with_clock(clock.clone());
        for host in 0..50 {
            limits.allow(source(&format!("203.0.113.{host}")), &format!("user{host}"));
        }
        assert_eq!(limits.held(), (50, 50, 50));
        clock.advance(Duration::from_secs(61));
        limits.prune();
        assert_eq!(limits.held(), (0, 0, 0));
    }
}
