//! Ports for the servers a test starts as programs of their own (PostgreSQL, Prometheus, an
//! SMTP server), which are told their port before they bind it.
//!
//! Binding port 0 and handing the kernel's choice on is a race. The port goes back to the
//! ephemeral range, and before the program binds it, any outgoing connection on the machine may
//! be given it as its local port; a run opens thousands to PostgreSQL alone. CI lost two tests
//! to it: a cluster that "could not start" and aiosmtpd's "address already in use". A port
//! below the ephemeral range is one the kernel never hands out by itself. It is chosen at random,
//! checked free, and leased: a lock on a file named after it, in the run's temporary directory,
//! held until this test process ends (the kernel lets go of it even when the process is
//! killed), so that a test in another process cannot be handed it before its server binds.

use std::fs::File;
use std::ops::Range;
use std::sync::Mutex;

/// The leases this process holds, kept open until it ends.
static LEASES: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// Ports at or above this are left to nothing else on a test machine (below it are the
/// services the suite talks to: PostgreSQL, Redis, NATS, …).
const LOWEST: u16 = 10_000;

pub fn unused_port() -> u16 {
    let candidates = below_the_ephemeral_range();
    for _ in 0..100 {
        let port = fastrand::u16(candidates.clone());
        if let Some(lease) = leased(port)
            && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        {
            LEASES.lock().expect("the leases").push(lease);
            return port;
        }
    }
    panic!("no free port in {candidates:?} after 100 tries");
}

/// The lock on `port`'s file, unless another process holds it.
fn leased(port: u16) -> Option<File> {
    let dir = std::env::temp_dir().join("idem-test-ports");
    std::fs::create_dir_all(&dir).expect("a directory for port leases");
    let file = File::create(dir.join(port.to_string())).expect("a port's lease file");
    file.try_lock().ok().map(|()| file)
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
