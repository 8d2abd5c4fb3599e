//! What the dashboard shows.

use domain::outcome::Outcome;
use domain::scope::Operation;
use serde::{Deserialize, Serialize};

/// The dashboard's time ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum DashboardRange {
    #[serde(rename = "15m")]
    FifteenMinutes,
    #[default]
    #[serde(rename = "1h")]
    OneHour,
    #[serde(rename = "24h")]
    OneDay,
    #[serde(rename = "7d")]
    SevenDays,
}

impl DashboardRange {
    pub const ALL: [DashboardRange; 4] = [
        DashboardRange::FifteenMinutes,
        DashboardRange::OneHour,
        DashboardRange::OneDay,
        DashboardRange::SevenDays,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            DashboardRange::FifteenMinutes => "15m",
            DashboardRange::OneHour => "1h",
            DashboardRange::OneDay => "24h",
            DashboardRange::SevenDays => "7d",
        }
    }

    pub fn parse(text: &str) -> Option<DashboardRange> {
        DashboardRange::ALL
            .into_iter()
            .find(|range| range.as_str() == text)
    }

    pub const fn seconds(self) -> i64 {
        match self {
            DashboardRange::FifteenMinutes => 15 * 60,
            DashboardRange::OneHour => 3600,
            DashboardRange::OneDay => 24 * 3600,
            DashboardRange::SevenDays => 7 * 24 * 3600,
        }
    }

    /// One chart point per step: 15 to 96 points whatever the range.
    pub const fn step_seconds(self) -> i64 {
        match self {
            DashboardRange::FifteenMinutes | DashboardRange::OneHour => 60,
            DashboardRange::OneDay => 15 * 60,
            DashboardRange::SevenDays => 2 * 3600,
        }
    }
}

/// One outcome over the range, a count per step (zeros included).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Series {
    pub outcome: Outcome,
    pub points: Vec<u64>,
    pub total: u64,
}

/// Live state across every instance, from indexed counts (never a scan of all records).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveGauges {
    pub in_progress: u64,
    /// IN_PROGRESS whose owner's lease ran out (a dead owner, not yet taken over).
    pub stale_in_progress: u64,
    pub oldest_stale_in_progress_secs: f64,
    pub unknown: u64,
    pub oldest_unknown_secs: f64,
    /// Unknown outcomes the recovery worker gave up on.
    pub needs_operator: u64,
    pub outbox_backlog: u64,
    pub outbox_oldest_secs: f64,
    pub cleanup_to_purge: u64,
    pub cleanup_to_delete: u64,
    /// Released payments the provider charged after all (to refund).
    pub charged_after_release: u64,
}

/// One operation's retries over the dashboard's range (a retry: a request that found its
/// key's record with the same command), measured from their key's first request, against the
/// operation's window: the data for sizing it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryWindow {
    pub operation: Operation,
    /// The window this operation is answered with now.
    pub window_secs: u64,
    pub retries: u64,
    /// Nearest-rank quantiles of the delays: p50, p90, p99, p99.9 (0 without retries).
    pub quantile_secs: [f64; 4],
    pub longest_secs: f64,
    /// Shorter and longer windows than the current one (and it), shortest first.
    pub windows: Vec<WindowFit>,
}

/// How a window of `window_secs` would have fared with the range's retries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowFit {
    pub window_secs: u64,
    /// Retries that came after it (past a window, a retry is no longer replayed).
    pub outside: u64,
    pub current: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantOption {
    pub id: String,
    pub name: String,
}

/// Everything the dashboard shows, read at `read_at`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dashboard {
    pub range: DashboardRange,
    /// The first step's start, RFC 3339 UTC.
    pub from: String,
    pub step_seconds: i64,
    pub series: Vec<Series>,
    pub live: LiveGauges,
    pub tenants: Vec<TenantOption>,
    pub read_at: String,
}
