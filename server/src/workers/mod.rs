//! The background jobs that work through the engine and the store, each one job on its own
//! schedule under the [`Supervisor`](crate::supervisor::Supervisor): recovery, settlement and
//! the release watch, retention (purging and deleting expired records), session and override
//! expiry, the bulk resumer, the sealing key's heartbeat. The event publisher and the receipt
//! sender are `events`' own; the metrics flushers are `metrics`'.

pub mod console;
pub mod heartbeat;
pub mod recovery;
pub mod retention;
pub mod settlement;
