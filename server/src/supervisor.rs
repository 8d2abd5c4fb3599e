//! The background workers' supervisor. Each worker does one job; the supervisor runs each on
//! its own task, restarts one that dies (it returns, or panics) after a pause, and at shutdown
//! tells them all to stop and waits for them (aborting what does not stop in time).

use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A background job that runs until it is told to stop.
#[async_trait::async_trait]
pub trait Worker: Send + Sync + 'static {
    /// Its name in logs and metrics.
    fn name(&self) -> &'static str;

    /// Does the job until `stop` is cancelled. Returning before that (or panicking) means it
    /// died: the supervisor logs it and starts it again.
    async fn run(&self, stop: CancellationToken);
}

/// A job done in passes: `pass` over `target`, one every `interval` (the first after one
/// interval, not at start: a starting instance has enough to do, and a test that arranges rows
/// and then lets time pass sees them taken in order).
pub struct Every<T: ?Sized, F> {
    name: &'static str,
    interval: Duration,
    pass: F,
    target: Arc<T>,
}

impl<T, F, Fut> Every<T, F>
where
    T: ?Sized + Send + Sync + 'static,
    F: Fn(Arc<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    pub fn new(name: &'static str, interval: Duration, target: Arc<T>, pass: F) -> Arc<Self> {
        Arc::new(Every {
            name,
            interval,
            target,
            pass,
        })
    }
}

#[async_trait::async_trait]
impl<T, F, Fut> Worker for Every<T, F>
where
    T: ?Sized + Send + Sync + 'static,
    F: Fn(Arc<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    fn name(&self) -> &'static str {
        self.name
    }

    async fn run(&self, stop: CancellationToken) {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + self.interval, self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            // A pass under way finishes before the worker stops: passes are short, and each
            // leaves the database consistent wherever it is cut.
            (self.pass)(self.target.clone()).await;
        }
    }
}

/// How long a dead worker waits before it is started again.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

pub struct Supervisor {
    tasks: JoinSet<()>,
    stop: CancellationToken,
    restart_pause: Duration,
}

impl Default for Supervisor {
    fn default() -> Self {
        Supervisor {
            tasks: JoinSet::new(),
            stop: CancellationToken::new(),
            restart_pause: RESTART_PAUSE,
        }
    }
}

impl Supervisor {
    /// Runs `worker` until shutdown, starting it again whenever it dies.
    pub fn spawn(&mut self, worker: Arc<dyn Worker>) {
        let stop = self.stop.clone();
        let pause = self.restart_pause;
        self.tasks.spawn(async move {
            loop {
                // Its own set: dropping it (this task aborted at shutdown) aborts the worker too.
                let mut attempt = JoinSet::new();
                attempt.spawn({
                    let worker = worker.clone();
                    let stop = stop.clone();
                    async move { worker.run(stop).await }
                });
                let ended = attempt.join_next().await;
                if stop.is_cancelled() {
                    return;
                }
                match ended {
                    Some(Err(error)) if error.is_panic() => {
                        tracing::error!(worker = worker.name(), "worker panicked; starting it again");
                    }
                    _ => tracing::error!(
                        worker = worker.name(),
                        "worker stopped by itself; starting it again"
                    ),
                }
                metrics::counter!("worker_restarts_total", "worker" => worker.name()).increment(1);
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(pause) => {}
                }
            }
        });
    }

    /// How many workers it runs.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Tells every worker to stop and waits up to `grace` for them; what is still running
    /// then is aborted.
    pub async fn shutdown(mut self, grace: Duration) {
        self.stop.cancel();
        let all_stopped = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(grace, all_stopped).await.is_err() {
            tracing::warn!(
                grace_ms = grace.as_millis(),
                "workers still running after the grace period; aborted"
            );
            self.tasks.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Panics on its first two runs, then works until stopped.
    struct Flaky {
        runs: AtomicUsize,
        stopped: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Worker for Flaky {
        fn name(&self) -> &'static str {
            "flaky"
        }

        async fn run(&self, stop: CancellationToken) {
            if self.runs.fetch_add(1, Ordering::SeqCst) < 2 {
                panic!("dies on purpose");
            }
            stop.cancelled().await;
            self.stopped.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_worker_that_dies_is_started_again_and_stops_at_shutdown() {
        let flaky = Arc::new(Flaky {
            runs: AtomicUsize::new(0),
            stopped: AtomicUsize::new(0),
        });
        let mut supervisor = Supervisor {
            restart_pause: Duration::from_millis(10),
            ..Supervisor::default()
        };
        supervisor.spawn(flaky.clone());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while flaky.runs.load(Ordering::SeqCst) < 3 {
            assert!(tokio::time::Instant::now() < deadline, "not restarted");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        supervisor.shutdown(Duration::from_secs(5)).await;
        assert_eq!(
            flaky.runs.load(Ordering::SeqCst),
            3,
            "two deaths, one restart each"
        );
        assert_eq!(
            flaky.stopped.load(Ordering::SeqCst),
            1,
            "told to stop, and waited for"
        );
    }

    #[tokio::test]
    async fn a_periodic_job_passes_every_interval_until_shutdown() {
        let passes = Arc::new(AtomicUsize::new(0));
        let mut supervisor = Supervisor::default();
        supervisor.spawn(Every::new(
            "counting",
            Duration::from_millis(20),
            passes.clone(),
            |passes| async move {
                passes.fetch_add(1, Ordering::SeqCst);
            },
        ));
        assert_eq!(
            passes.load(Ordering::SeqCst),
            0,
            "not at start: after an interval"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
        supervisor.shutdown(Duration::from_secs(5)).await;
        let counted = passes.load(Ordering::SeqCst);
        assert!(counted >= 2, "{counted} passes in 150 ms");
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(passes.load(Ordering::SeqCst), counted, "none after shutdown");
    }

    /// Ignores the stop signal.
    struct Stubborn;

    #[async_trait::async_trait]
    impl Worker for Stubborn {
        fn name(&self) -> &'static str {
            "stubborn"
        }

        async fn run(&self, _stop: CancellationToken) {
            std::future::pending::<()>().await;
        }
    }

    #[tokio::test]
    async fn shutdown_aborts_what_does_not_stop_within_the_grace_period() {
        let mut supervisor = Supervisor::default();
        supervisor.spawn(Arc::new(Stubborn));
        let started = tokio::time::Instant::now();
        supervisor.shutdown(Duration::from_millis(50)).await;
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
