//! Who may use the endpoint. A heap profile names the program's functions and files, its load
//! addresses (which defeat ASLR) and its sizes, and a dump costs the program CPU and disk; the
//! report files are private to the process's user (mode 0600), so the endpoint must be no way
//! around that. The rule:
//!
//! - **The owner** (the process's effective user, or root) may use every route. On a loopback
//!   connection the peer's user is the one of the peer's socket in the kernel's socket table
//!   (`/proc/net/tcp`, `/proc/net/tcp6`: the entry whose local address is the peer's and whose
//!   remote address is ours), on a unix socket the peer's credentials (`SO_PEERCRED`): neither
//!   can the peer forge.
//! - **A bearer of the token** (`YING_HTTP_TOKEN`), when one is set, may read (`GET`) from any
//!   peer; without a token an address other than loopback is not served at all.
//! - **`POST`** (a dump: the process writes files) only the owner, token or not.
//! - Anyone else gets 403 (401 when a token would do), and stderr gets one line per refused
//!   user or address (the first 32 of them).
//!
//! Go's `net/http/pprof` leaves all of this to the program's author, who mounts it on a mux of
//! their own; jemalloc's `prof.dump` writes files only the process's user can read. Ying adds an
//! endpoint to any program from an environment variable, root daemons included, so it checks.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;

use crate::config::HttpToken;

/// Why a request is refused: the status (401 or 403) and the one line of the answer's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) status: u16,
    pub(crate) why: &'static str,
}

/// The peer of a connection, as far as the endpoint can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// The process's own user, or root.
    Owner,
    /// Another user of this host (a loopback peer).
    User(u32),
    /// A peer whose user cannot be known (another host, or no socket table to read).
    Unknown(IpAddr),
}

/// Who is at the other end of the connection from `peer` to `local` (ours).
pub(crate) fn peer_of(local: SocketAddr, peer: SocketAddr) -> Peer {
    let ip = peer.ip().to_canonical();
    if !ip.is_loopback() {
        return Peer::Unknown(ip);
    }
    match socket_uid(local, peer) {
        None => Peer::Unknown(ip),
        uid => peer_of_uid(uid),
    }
}

/// Who is at the other end of a unix socket whose peer's user is `uid` (its credentials; None
/// when the kernel did not say).
pub(crate) fn peer_of_uid(uid: Option<u32>) -> Peer {
    match uid {
        Some(uid) if crate::sys::trusted_owner(uid) => Peer::Owner,
        Some(uid) => Peer::User(uid),
        None => Peer::Unknown(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
    }
}

/// Whether `peer` may be refused at once, before its request is read: when no token could
/// admit it.
pub(crate) fn refused_at_once(peer: Peer, token: Option<&HttpToken>) -> bool {
    peer != Peer::Owner && token.is_none()
}

/// Whether a request `method` from `peer`, carrying `authorization` (the header's value), may
/// be answered; why not when it may not.
pub(crate) fn check(
    peer: Peer,
    method: &str,
    authorization: Option<&str>,
    token: Option<&HttpToken>,
) -> Result<(), Refused> {
    if peer == Peer::Owner {
        return Ok(());
    }
    let bearer = authorization.and_then(|a| a.strip_prefix("Bearer ")).map(str::trim);
    let token_ok = match (token, bearer) {
        (Some(t), Some(b)) => same(t.0.as_bytes(), b.as_bytes()),
        _ => false,
    };
    if method != "GET" && method != "HEAD" {
        say_refused(peer);
        return Err(Refused {
            status: 403,
            why: "forbidden: only the process's own user and root may POST here",
        });
    }
    if token_ok {
        return Ok(());
    }
    say_refused(peer);
    Err(match token {
        Some(_) => Refused { status: 401, why: "unauthorized: send Authorization: Bearer <token>" },
        None => Refused {
            status: 403,
            why: "forbidden: this endpoint answers only the process's own user and root",
        },
    })
}

/// Whether `a` and `b` are equal, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// One stderr line per refused user or address, the first [`REMEMBERED`] of them.
fn say_refused(peer: Peer) {
    static SEEN: Mutex<Vec<Peer>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if seen.contains(&peer) || seen.len() >= REMEMBERED {
        return;
    }
    seen.push(peer);
    drop(seen);
    let who = match peer {
        Peer::Owner => return,
        Peer::User(uid) => format!("user {uid}"),
        Peer::Unknown(ip) => format!("{ip} (user unknown)"),
    };
    crate::sys::warn(&format!(
        "HTTP endpoint: refused {who}: it answers the process's own user and root{}",
        " (and GET requests with YING_HTTP_TOKEN's token, when set); said once per peer"
    ));
}

/// How many refused peers are remembered (and said).
const REMEMBERED: usize = 32;

/// The user owning the socket whose local address is `peer` and remote address `local`, from
/// the socket tables of this network namespace.
fn socket_uid(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    let table = match peer {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let (local, peer) = (canonical(local), canonical(peer));
    let f = std::fs::File::open(table).ok()?;
    for line in BufReader::new(f).lines().skip(1) {
        let line = line.ok()?;
        let mut fields = line.split_whitespace();
        let (Some(l), Some(r)) = (fields.nth(1), fields.next()) else { continue };
        if parse_addr(l).map(canonical) != Some(peer) || parse_addr(r).map(canonical) != Some(local)
        {
            continue;
        }
        // Then st, tx:rx, tr:when, retrnsmt, uid.
        return fields.nth(4)?.parse().ok();
    }
    None
}

fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// An address as the socket tables print it: `0100007F:1F90` (IPv4) or 32 hex digits and a
/// port (IPv6), each 32-bit word in the kernel's byte order.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok();
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?.to_ne_bytes())),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn socket_table_addresses_parse() {
        let v4 = parse_addr("0100007F:1F90").unwrap();
        assert_eq!(v4, "127.0.0.1:8080".parse().unwrap());
        let v6 = parse_addr("00000000000000000000000001000000:0050").unwrap();
        assert_eq!(v6, "[::1]:80".parse().unwrap());
        assert_eq!(parse_addr("zz:1"), None);
        assert_eq!(parse_addr("0100007F"), None);
    }

    /// A connection from this process to itself is its owner's: found in the socket table.
    #[test]
    fn a_loopback_peer_of_this_user_is_the_owner() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        // SAFETY: geteuid has no preconditions.
        assert_eq!(socket_uid(s.local_addr().unwrap(), peer), Some(unsafe { libc::geteuid() }));
        assert_eq!(peer_of(s.local_addr().unwrap(), peer), Peer::Owner);
        // A peer that is no socket of the table.
        let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(socket_uid(s.local_addr().unwrap(), nobody), None);
    }

    #[test]
    fn the_rule() {
        let token = HttpToken::new("0123456789abcdef").unwrap();
        let other = Peer::User(4242);
        let far = Peer::Unknown("10.0.0.1".parse().unwrap());
        assert!(check(Peer::Owner, "POST", None, None).is_ok());
        assert_eq!(check(other, "GET", None, None).unwrap_err().status, 403);
        assert_eq!(check(far, "GET", None, Some(&token)).unwrap_err().status, 401);
        assert_eq!(
            check(far, "GET", Some("Bearer 0123456789abcdeX"), Some(&token)).unwrap_err().status,
            401
        );
        assert!(check(far, "GET", Some("Bearer 0123456789abcdef"), Some(&token)).is_ok());
        assert_eq!(
            check(other, "POST", Some("Bearer 0123456789abcdef"), Some(&token)).unwrap_err().status,
            403,
            "POST is the owner's, token or not"
        );
        assert!(refused_at_once(other, None) && !refused_at_once(other, Some(&token)));
        assert!(!refused_at_once(Peer::Owner, None));
    }
}
