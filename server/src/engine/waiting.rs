//! `Prefer: wait=N`: a keyed request that finds its key in progress under another request is
//! held until that record can answer it, or until N seconds pass, and then gets what a retry
//! at that moment gets. Holding reads and never writes: it takes no lease and runs no command.
//!
//! A held request learns that the record moved in two ways. An owner in this instance says so
//! the moment it answers ([`Waiting::settled`]); an owner anywhere else (another instance, the
//! recovery worker, an operator) is seen by reading the record again, first after 20 ms and
//! then less and less often, at most every 250 ms. The read is the request path's own
//! one-statement look-up, so waiting needs nothing of either database that the path lacks:
//! no dedicated LISTEN connection on PostgreSQL, no NOTIFY in the owner's one-statement
//! completion (`docs/performance.md`, "Waiting on an in-flight request").
//!
//! Held requests are bounded per instance by a semaphore: past the bound a request is
//! answered at once, as without the preference. A held request is the caller's future; a
//! client that hangs up drops it, and its slot with it. `idempotency_waiting_requests` is how
//! many are held now; `idempotency_waits_total{result}` counts how holds ended (`answered`
//! before the deadline, `deadline`, or `refused` past the bound).

use domain::prefer::Wait;
use domain::scope::Scope;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast};
use tokio::time::Instant;

/// The first pause before a held request reads its record again, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(20);
const LONGEST_PAUSE: Duration = Duration::from_millis(250);

/// How many settled scopes an instance may announce before a slow listener misses some (it
/// then reads its record again, as it would after a pause).
const ANNOUNCEMENTS: usize = 1024;

#[derive(Debug, Clone, Copy)]
pub struct WaitSettings {
    /// How many requests this instance holds at once.
    pub max_waiting: usize,
    /// The longest a request is held, whatever it asked: at most the contract's 10 s, and
    /// short enough that the request timeout never cuts a held request off.
    pub longest: Duration,
}

const WAITING: &str = "idempotency_waiting_requests";
const WAITS: &str = "idempotency_waits_total";

/// How a request's hold ended.
#[derive(Debug, Clone, Copy)]
enum WaitResult {
    Answered,
    Deadline,
    Refused,
}

impl WaitResult {
    const ALL: [WaitResult; 3] = [WaitResult::Answered, WaitResult::Deadline, WaitResult::Refused];

    fn as_str(self) -> &'static str {
        match self {
            WaitResult::Answered => "answered",
            WaitResult::Deadline => "deadline",
            WaitResult::Refused => "refused",
        }
    }

    fn count(self) {
        metrics::counter!(WAITS, "result" => self.as_str()).increment(1);
    }
}

/// The waiting metrics at zero, so that rates read from the start.
pub fn register_metrics() {
    metrics::gauge!(WAITING).set(0.0);
    for result in WaitResult::ALL {
        metrics::counter!(WAITS, "result" => result.as_str()).increment(0);
    }
}

/// This instance's held requests and its owners' announcements.
pub(super) struct Waiting {
    slots: Arc<Semaphore>,
    settled: broadcast::Sender<Scope>,
    longest: Duration,
}

impl Waiting {
    pub(super) fn new(settings: WaitSettings) -> Waiting {
        Waiting {
            slots: Arc::new(Semaphore::new(settings.max_waiting)),
            settled: broadcast::channel(ANNOUNCEMENTS).0,
            longest: settings.longest,
        }
    }

    /// Announces that an owner in this instance answered `scope`'s request.
    pub(super) fn settled(&self, scope: &Scope) {
        if self.settled.receiver_count() > 0 {
            // No receiver left between the count and the send is no one to tell.
            let _ = self.settled.send(scope.clone());
        }
    }

    /// A held request for `wait`, if a slot is free.
    pub(super) fn hold(&self, wait: Wait) -> Option<Held> {
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            WaitResult::Refused.count();
            return None;
        };
        metrics::gauge!(WAITING).increment(1.0);
        Some(Held {
            _slot: slot,
            announcements: self.settled.subscribe(),
            deadline: Instant::now() + wait.duration().min(self.longest),
            pause: FIRST_PAUSE,
        })
    }
}

/// A request held while another owns its key: its slot, what it listens to, and until when.
pub(super) struct Held {
    _slot: OwnedSemaphorePermit,
    announcements: broadcast::Receiver<Scope>,
    deadline: Instant,
    pause: Duration,
}

impl Drop for Held {
    fn drop(&mut self) {
        metrics::gauge!(WAITING).decrement(1.0);
    }
}

impl Held {
    /// Whether the request has been held as long as it may: it is then answered as it stands.
    pub(super) fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Counts how this hold ended, once the request has its answer.
    pub(super) fn ended(&self) {
        match self.past_deadline() {
            true => WaitResult::Deadline.count(),
            false => WaitResult::Answered.count(),
        }
    }

    /// Waits until `scope`'s record may have moved (an owner here announced it, or the pause
    /// before reading it again passed), or until the deadline.
    pub(super) async fn until_moved(&mut self, scope: &Scope) {
        let pause = self
            .pause
            .min(self.deadline.saturating_duration_since(Instant::now()));
        self.pause = (self.pause * 2).min(LONGEST_PAUSE);
        let announced = async {
            loop {
                match self.announcements.recv().await {
                    Ok(settled) if settled == *scope => return,
                    Ok(_) => continue,
                    // Missed announcements may have named this scope: read it again.
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    // Never while `Waiting` lives; the pause still ends the wait.
                    Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
                }
            }
        };
        tokio::select! {
            () = announced => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}
