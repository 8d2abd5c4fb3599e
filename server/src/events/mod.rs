//! Events that happen once. Every payment state change writes its event into the outbox in
//! the same transaction as the change (the engine does). Here: the publisher that delivers
//! them (several instances at once, each event claimed by one for a while, retried with
//! backoff, dead-lettered after too many failures), the transports (in-process, NATS
//! JetStream), and the consumers, each of which deduplicates through its inbox and writes its
//! side effect in the same transaction as its inbox row, so a message is never marked
//! processed before its side effect exists, and never applied twice.

pub mod consumers;
pub mod nats;
pub mod publisher;
pub mod transport;
