//! Per-API-key rate limiting (GCRA, the `governor` crate). A limited request is answered
//! `429 RATE_LIMITED` with `Retry-After` before anything is recorded.

use domain::tenant::ApiKeyId;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;
use std::time::Duration;

pub struct ApiRateLimit {
    limiter: Option<DefaultKeyedRateLimiter<String>>,
    clock: DefaultClock,
}

impl ApiRateLimit {
    /// `per_second` requests per API key, with bursts of as many; 0 turns limiting off.
    pub fn per_second(per_second: u32) -> ApiRateLimit {
        ApiRateLimit {
            limiter: NonZeroU32::new(per_second).map(|rate| RateLimiter::keyed(Quota::per_second(rate))),
            clock: DefaultClock::default(),
        }
    }

    /// `Err(wait)` when the key is over its quota.
    pub fn check(&self, key: &ApiKeyId) -> Result<(), Duration> {
        match &self.limiter {
            None => Ok(()),
            Some(limiter) => limiter
                .check_key(&key.as_str().to_owned())
                .map_err(|not_until| not_until.wait_time_from(self.clock.now())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_over_its_quota_is_told_how_long_to_wait_and_others_are_not_affected() {
        let limit = ApiRateLimit::per_second(2);
        let (a, b) = (
            ApiKeyId::from_stored("key_a".into()),
            ApiKeyId::from_stored("key_b".into()),
        );
        assert!(limit.check(&a).is_ok());
        assert!(limit.check(&a).is_ok());
        let wait = limit.check(&a).expect_err("third request within the second");
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        assert!(limit.check(&b).is_ok(), "quotas are per key");
        assert!(ApiRateLimit::per_second(0).check(&a).is_ok(), "0 means no limit");
    }
}
