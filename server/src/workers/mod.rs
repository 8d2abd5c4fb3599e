//! The background jobs with logic of their own: recovery (unknown outcomes and dead owners'
//! records, through the engine's reconciler) and retention (purging expired records and
//! deleting old tombstones in adaptive batches). Every job, these and the smaller ones (the
//! outbox publisher and receipt sender in `events`, settlement and the release watch in
//! `engine`, the console's upkeep, the metrics flushers, the sealing key's heartbeat), runs
//! under the [`Supervisor`](crate::supervisor::Supervisor) on its own schedule; the list is
//! in `Application::build`.

pub mod recovery;
pub mod retention;
