//! How long after its key's first request a retry came, kept in log buckets so that a replay
//! costs no row of its own: the console sizes the idempotency window from these.
//!
//! A bucket is named by its exclusive lower bound in milliseconds (every delay in it is longer
//! than that, and at most the next bound). The bounds are 0, 100 ms doubling up to about 39
//! days, every window the dashboard compares with ([`OTHER_WINDOWS`]), and the operation's
//! own window when the retry came. So the count of retries longer than any of those windows
//! is exact; a quantile is the longest delay of the bucket it falls in: at least the true value,
//! and less than twice it (or at most 100 ms).

use std::time::Duration;

/// The windows a retry window is compared with besides the operation's current one: from an
/// hour to a month.
pub const OTHER_WINDOWS: [Duration; 8] = [
    Duration::from_secs(3600),
    Duration::from_secs(6 * 3600),
    Duration::from_secs(12 * 3600),
    Duration::from_secs(24 * 3600),
    Duration::from_secs(2 * 24 * 3600),
    Duration::from_secs(3 * 24 * 3600),
    Duration::from_secs(7 * 24 * 3600),
    Duration::from_secs(30 * 24 * 3600),
];

/// The first doubling bound, and how many doublings follow it (100 ms · 2^25 ≈ 38.8 days).
const FIRST_DOUBLING_MS: i64 = 100;
const DOUBLINGS: u32 = 25;

/// Milliseconds, saturating.
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Every bound but the operation's own window, ascending.
fn fixed_bounds() -> impl Iterator<Item = i64> {
    let doublings = (0..=DOUBLINGS).map(|power| FIRST_DOUBLING_MS << power);
    std::iter::once(0)
        .chain(doublings)
        .chain(OTHER_WINDOWS.map(millis))
}

/// The bucket of a retry `delay_ms` long that came under a window `window_ms` long: the
/// largest bound shorter than the delay, `-1` for a delay of 0 (or less).
pub fn bucket_above_ms(delay_ms: i64, window_ms: i64) -> i64 {
    fixed_bounds()
        .chain(std::iter::once(window_ms))
        .filter(|bound| *bound < delay_ms)
        .max()
        .unwrap_or(-1)
}

/// The retries of one bucket: how many, and the longest of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayBucket {
    pub above_ms: i64,
    pub retries: i64,
    pub longest_ms: i64,
}

/// Retries summed from their buckets, against `N` windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelaySummary<const N: usize> {
    pub retries: i64,
    /// Nearest-rank p50, p90, p99 and p99.9, each the longest delay of the bucket it falls in.
    pub quantiles_ms: [i64; 4],
    pub longest_ms: i64,
    /// Per window, in its order: the retries longer than it (exact for every bound).
    pub outside: [i64; N],
}

impl<const N: usize> DelaySummary<N> {
    /// `buckets` in any order, one or more rows per bucket; `None` without retries.
    pub fn of(buckets: &[DelayBucket], windows_ms: [i64; N]) -> Option<DelaySummary<N>> {
        let mut sorted = buckets.to_vec();
        sorted.sort_by_key(|bucket| bucket.above_ms);
        let retries: i64 = sorted.iter().map(|bucket| bucket.retries).sum();
        if retries <= 0 {
            return None;
        }
        // The rank of quantile `per` of `parts` (p50 is 1 of 2): ceil(per * retries / parts).
        let rank = |per: i64, parts: i64| (per * retries + parts - 1) / parts;
        let quantile = |rank: i64| {
            let mut seen = 0;
            sorted
                .iter()
                .find(|bucket| {
                    seen += bucket.retries;
                    seen >= rank
                })
                .map_or(0, |bucket| {
                    // Rows of one bucket from several minutes: the bucket's longest.
                    sorted
                        .iter()
                        .filter(|other| other.above_ms == bucket.above_ms)
                        .map(|other| other.longest_ms)
                        .max()
                        .unwrap_or(bucket.longest_ms)
                })
        };
        Some(DelaySummary {
            retries,
            quantiles_ms: [rank(1, 2), rank(9, 10), rank(99, 100), rank(999, 1000)].map(quantile),
            longest_ms: sorted.iter().map(|bucket| bucket.longest_ms).max().unwrap_or(0),
            outside: windows_ms.map(|window| {
                sorted
                    .iter()
                    .filter(|bucket| bucket.above_ms >= window)
                    .map(|bucket| bucket.retries)
                    .sum()
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY_MS: i64 = 86_400_000;

    /// Buckets of `delays`, as the journal writes them, one row per retry.
    fn bucketed(delays: &[i64], window_ms: i64) -> Vec<DelayBucket> {
        delays
            .iter()
            .map(|delay| DelayBucket {
                above_ms: bucket_above_ms(*delay, window_ms),
                retries: 1,
                longest_ms: *delay,
            })
            .collect()
    }

    #[test]
    fn a_delay_falls_in_the_bucket_of_the_largest_bound_below_it() {
        assert_eq!(bucket_above_ms(0, DAY_MS), -1);
        assert_eq!(bucket_above_ms(1, DAY_MS), 0);
        assert_eq!(bucket_above_ms(100, DAY_MS), 0);
        assert_eq!(bucket_above_ms(101, DAY_MS), 100);
        assert_eq!(bucket_above_ms(3_600_000, DAY_MS), 3_276_800);
        assert_eq!(bucket_above_ms(3_600_001, DAY_MS), 3_600_000);
        assert_eq!(
            bucket_above_ms(500_001, 500_000),
            500_000,
            "the operation's window is a bound"
        );
        assert_eq!(bucket_above_ms(i64::MAX, DAY_MS), 100 << 25, "the last doubling");
        assert_eq!(
            bucket_above_ms(millis(OTHER_WINDOWS[7]) + 1, DAY_MS),
            millis(OTHER_WINDOWS[7])
        );
    }

    #[test]
    fn counts_past_every_bound_are_exact_and_quantiles_within_their_bucket() {
        let window_ms = 500_000;
        // 1,000 retries 5 minutes apart: from 5 minutes to about 3.5 days.
        let delays: Vec<i64> = (1..=1_000).map(|index| index * 300_000).collect();
        let mut windows = [0; 9];
        windows[0] = window_ms;
        windows[1..].copy_from_slice(&OTHER_WINDOWS.map(millis));
        let summary = DelaySummary::of(&bucketed(&delays, window_ms), windows).expect("retries");
        let exact = windows.map(|window| delays.iter().filter(|delay| **delay > window).count() as i64);
        assert_eq!(summary.outside, exact);
        assert_eq!(summary.retries, 1_000);
        assert_eq!(summary.longest_ms, 300_000_000);
        for (quantile, rank) in summary.quantiles_ms.iter().zip([500, 900, 990, 999]) {
            let true_value = delays[rank - 1];
            assert!(
                *quantile >= true_value && *quantile < 2 * true_value && delays.contains(quantile),
                "{quantile} for {true_value}"
            );
        }
    }

    #[test]
    fn rows_of_one_bucket_from_several_minutes_add_up() {
        let rows = [
            DelayBucket {
                above_ms: 100,
                retries: 3,
                longest_ms: 150,
            },
            DelayBucket {
                above_ms: 100,
                retries: 2,
                longest_ms: 190,
            },
            DelayBucket {
                above_ms: 3_600_000,
                retries: 1,
                longest_ms: 4_000_000,
            },
        ];
        let summary = DelaySummary::of(&rows, [100, 3_600_000]).expect("retries");
        assert_eq!(summary.retries, 6);
        assert_eq!(summary.quantiles_ms, [190, 4_000_000, 4_000_000, 4_000_000]);
        assert_eq!(summary.outside, [6, 1]);
        assert_eq!(DelaySummary::of(&[], [1]), None);
    }
}
