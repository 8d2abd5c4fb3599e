//! Rate limits of the API (GCRA, the `governor` crate): per tenant for what its keys may do
//! (a tenant's quota, however many keys it holds: counting per key would give a tenant with N
//! keys N quotas), and per source for the bearer values it may try. A limited request is answered
//! `429 RATE_LIMITED` with `Retry-After` before anything is recorded.

use crate::auth::source::Source;
use domain::tenant::TenantId;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use moka::sync::Cache;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

pub struct ApiRateLimit {
    limiter: Option<DefaultKeyedRateLimiter<String>>,
    clock: DefaultClock,
}

impl ApiRateLimit {
    /// `per_second` requests per tenant, with bursts of as many; 0 turns limiting off.
    pub fn per_second(per_second: u32) -> ApiRateLimit {
        ApiRateLimit {
            limiter: NonZeroU32::new(per_second).map(|rate| RateLimiter::keyed(Quota::per_second(rate))),
            clock: DefaultClock::default(),
        }
    }

    /// `Err(wait)` when the tenant is over its quota.
    pub fn check(&self, tenant: &TenantId) -> Result<(), Duration> {
        match &self.limiter {
            None => Ok(()),
            Some(limiter) => limiter
                .check_key(&tenant.as_str().to_owned())
                .map_err(|not_until| not_until.wait_time_from(self.clock.now())),
        }
    }
}

/// Unknown bearer values one source may present per minute before its next ones are refused
/// unread. Each costs a database query (a known key is kept verified in memory), so a source
/// presenting random values would otherwise cost one query per request.
const FAILURES_PER_SOURCE: NonZeroU32 = NonZeroU32::new(30).expect("non-zero");
/// Sources refused at once, at most (each an address and a time).
const SOURCES_REFUSED: u64 = 100_000;

pub struct FailedAuthentications {
    failures: RateLimiter<Source, DefaultKeyedStateStore<Source>, DefaultClock, StateInformationMiddleware>,
    /// Sources over their budget, until when: checked before the database is.
    refused_until: Cache<Source, Instant>,
    clock: DefaultClock,
}

impl Default for FailedAuthentications {
    fn default() -> FailedAuthentications {
        FailedAuthentications {
            failures: RateLimiter::keyed(Quota::per_minute(FAILURES_PER_SOURCE))
                .with_middleware::<StateInformationMiddleware>(),
            refused_until: Cache::builder()
                .max_capacity(SOURCES_REFUSED)
                .time_to_live(Duration::from_secs(60))
                .build(),
            clock: DefaultClock::default(),
        }
    }
}

impl FailedAuthentications {
    /// `Err(wait)` while `source` has presented too many unknown keys.
    pub fn check(&self, source: Source) -> Result<(), Duration> {
        match self.refused_until.get(&source) {
            Some(until) if until > Instant::now() => Err(until - Instant::now()),
            _ => Ok(()),
        }
    }

    /// `source` presented a key that is not (or no longer) valid: once its budget is spent,
    /// it is refused until the budget gives it one more.
    pub fn failed(&self, source: Source) {
        let wait = match self.failures.check_key(&source) {
            Ok(left) if left.remaining_burst_capacity() > 0 => None,
            Ok(left) => Some(left.quota().replenish_interval()),
            Err(not_until) => Some(not_until.wait_time_from(self.clock.now())),
        };
        if let Some(wait) = wait {
            self.refused_until.insert(source, Instant::now() + wait);
        }
        if self.failures.len() > SOURCES_REFUSED as usize {
            self.failures.retain_recent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_presenting_unknown_keys_is_refused_unread_and_others_are_not() {
        let failed = FailedAuthentications::default();
        let (guesser, neighbour) = (
            Source::of([192, 0, 2, 66].into()),
            Source::of([192, 0, 2, 67].into()),
        );
        for _ in 0..FAILURES_PER_SOURCE.get() {
            assert!(failed.check(guesser).is_ok(), "within its budget");
            failed.failed(guesser);
        }
        let wait = failed
            .check(guesser)
            .expect_err("its budget spent: refused unread");
        assert!(wait <= Duration::from_secs(2), "{wait:?}");
        assert!(failed.check(neighbour).is_ok());
    }

    #[test]
    fn a_tenant_over_its_quota_is_told_how_long_to_wait_and_others_are_not_affected() {
        let limit = ApiRateLimit::per_second(2);
        let (a, b) = (
            TenantId::from_stored("ten_a".into()),
            TenantId::from_stored("ten_b".into()),
        );
        assert!(limit.check(&a).is_ok());
        assert!(limit.check(&a).is_ok());
        let wait = limit.check(&a).expect_err("third request within the second");
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        assert!(limit.check(&b).is_ok(), "quotas are per tenant");
        assert!(ApiRateLimit::per_second(0).check(&a).is_ok(), "0 means no limit");
    }
}
