//! `idem serve`'s flags as the typed settings of each part it builds (the engine, the API's
//! bounds, the console), checked once, so that `Application::build` only assembles parts.

use super::ServeError;
use crate::auth::source::Sources;
use crate::bounds::Bounds;
use crate::cli::ServeArgs;
use crate::console::router::ConsoleSettings;
use crate::engine::{EngineSettings, OperationSettings};
use domain::expiry::ExpiryPolicy;
use std::net::SocketAddr;
use std::time::Duration;

/// Refuses flags that contradict each other.
pub(super) fn check(args: &ServeArgs) -> Result<(), ServeError> {
    // An owner still waiting for the provider must never look dead to a retry or the worker.
    for lease_secs in [args.lease_secs, args.refund_lease_secs] {
        if lease_secs.saturating_mul(1000) <= args.provider_timeout_ms {
            return Err(ServeError::Config(format!(
                "the in-progress lease ({lease_secs} s) must be longer than the provider timeout ({} ms)",
                args.provider_timeout_ms
            )));
        }
    }
    Ok(())
}

/// Each operation's lease, window and policy after it, this instance's name, its memory for
/// final answers and the fingerprint version of its new records.
pub(super) fn engine(args: &ServeArgs, retention: Duration) -> EngineSettings {
    EngineSettings {
        create_payment: OperationSettings {
            lease: Duration::from_secs(args.lease_secs),
            expiry: ExpiryPolicy {
                window: Duration::from_secs(args.window_secs),
                after_expiry: args.after_expiry,
                retention,
            },
        },
        create_refund: OperationSettings {
            lease: Duration::from_secs(args.refund_lease_secs),
            expiry: ExpiryPolicy {
                window: Duration::from_secs(args.refund_window_secs),
                after_expiry: args.refund_after_expiry,
                retention,
            },
        },
        instance_id: format!("idem-{}", uuid::Uuid::new_v4().simple()),
        answer_cache_bytes: args.answer_cache_bytes,
        fingerprint_version: args.fingerprint_version,
    }
}

/// What bounds every router.
pub(super) fn bounds(args: &ServeArgs) -> Bounds {
    Bounds {
        request_timeout: Duration::from_secs(args.request_timeout_secs),
        body_limit_bytes: args.body_limit_bytes,
    }
}

/// How a caller's address is found.
pub(super) fn sources(args: &ServeArgs) -> Sources {
    Sources {
        trust_forwarded_for: args.trust_forwarded_for,
    }
}

/// The console's settings, served on `address`.
pub(super) fn console(args: &ServeArgs, address: SocketAddr) -> ConsoleSettings {
    ConsoleSettings {
        site_root: args.site_root.clone(),
        site_addr: address,
        secure_cookies: args.secure_cookies,
        sources: sources(args),
        session_lifetime: Duration::from_secs(args.session_lifetime_secs),
        bounds: bounds(args),
    }
}
