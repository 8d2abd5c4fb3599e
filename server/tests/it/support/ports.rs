//! Ports for the servers a test starts as programs of their own (PostgreSQL, Prometheus, an
//! SMTP server), which are told their port before they bind it.
//!
//! Binding port 0 and handing the kernel's choice on is a race. The port goes back to the
//! ephemeral range, and before the program binds it, any outgoing connection on the machine may
//! be given it as its local port; a run opens thousands to PostgreSQL alone. CI lost two tests
//! to it: a cluster that "could not start" and aiosmtpd's "address already in use". A port
//! below the ephemeral range is one the kernel never hands out by itself. It is chosen at random
//! so that tests in other processes rarely choose it too, and checked free.

use std::ops::Range;

/// Ports at or above this are left to nothing else on a test machine (below it are the
/// services the suite talks to: PostgreSQL, Redis, NATS, …).
const LOWEST: u16 = 10_000;

pub fn unused_port() -> u16 {
    let candidates = below_the_ephemeral_range();
    for _ in 0..100 {
        let port = fastrand::u16(candidates.clone());
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {candidates:?} after 100 tries");
}

fn below_the_ephemeral_range() -> Range<u16> {
    const SETTING: &str = "/proc/sys/net/ipv4/ip_local_port_range";
    let setting = std::fs::read_to_string(SETTING).unwrap_or_else(|error| panic!("{SETTING}: {error}"));
    let first_ephemeral: u16 = setting
        .split_whitespace()
        .next()
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("{SETTING} reads {setting:?}"));
    assert!(
        first_ephemeral >= LOWEST + 1_000,
        "the ephemeral ports ({setting:?} in {SETTING}) leave fewer than 1000 ports from {LOWEST} for test servers"
    );
    LOWEST..first_ephemeral
}
