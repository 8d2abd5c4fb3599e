//! Where a request comes from, as the limits count callers: the client's address (an IPv6
//! address by its /64, which one host usually holds whole).

use axum::http::HeaderMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// Who is calling: the client's address, as a bucket key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source(IpAddr);

impl Source {
    pub fn of(address: IpAddr) -> Source {
        match address {
            IpAddr::V4(_) => Source(address),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Source(IpAddr::V6(prefix.into()))
                }
            },
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

/// How the client's address is found.
#[derive(Debug, Clone, Copy)]
pub struct Sources {
    /// Idem is behind one reverse proxy that appends the client's address to
    /// `X-Forwarded-For` (`--trust-forwarded-for`); otherwise the peer is the client.
    pub trust_forwarded_for: bool,
}

impl Sources {
    /// Who sent a request from `peer` with `headers`.
    pub fn of(&self, peer: SocketAddr, headers: &HeaderMap) -> Source {
        // Only the last entry is the trusted proxy's own: the ones before it are whatever the
        // client wrote.
        let forwarded = || {
            headers
                .get_all("x-forwarded-for")
                .iter()
                .next_back()?
                .to_str()
                .ok()?
                .rsplit(',')
                .next()?
                .trim()
                .parse::<IpAddr>()
                .ok()
        };
        let address = match self.trust_forwarded_for {
            true => forwarded().unwrap_or(peer.ip()),
            false => peer.ip(),
        };
        Source::of(address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(address: &str) -> Source {
        Source::of(address.parse().expect("an address"))
    }

    #[test]
    fn hosts_of_one_ipv6_network_share_a_source() {
        assert_eq!(source("2001:db8:1:2::1"), source("2001:db8:1:2:ffff::9"));
        assert_ne!(source("2001:db8:1:2::1"), source("2001:db8:1:3::1"));
        assert_eq!(source("::ffff:192.0.2.1"), source("192.0.2.1"));
        assert_eq!(source("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
        assert_eq!(source("192.0.2.1").to_string(), "192.0.2.1");
    }

    #[test]
    fn a_forwarded_address_counts_only_behind_a_trusted_proxy() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-forwarded-for",
            "203.0.113.9, 198.51.100.7".parse().expect("a header"),
        );
        let peer: SocketAddr = "192.0.2.1:4000".parse().expect("an address");
        let trusted = Sources {
            trust_forwarded_for: true,
        };
        let untrusted = Sources {
            trust_forwarded_for: false,
        };
        assert_eq!(trusted.of(peer, &headers), source("198.51.100.7"));
        assert_eq!(untrusted.of(peer, &headers), source("192.0.2.1"));
        assert_eq!(trusted.of(peer, &HeaderMap::new()), source("192.0.2.1"));
    }
}
