//! The endpoint's sockets: a TCP address or a unix socket (`unix:PATH`), behind one listener
//! and one connection type, so the server (`http.rs`) is the same for both. Each connection
//! comes with its peer (`access.rs`): on TCP the owner of the peer's socket in the kernel's
//! table, on a unix socket the peer's credentials (`SO_PEERCRED`).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use super::access::Peer;
use crate::config::HttpAddr;

/// A listening socket, in the endpoint thread's own descriptor table.
pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// An accepted connection.
pub(crate) enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Listener {
    /// Listens at `addr`: a unix socket is made mode 0600, a stale one at its path (nothing
    /// listening) replaced, any other file left (an error). The listening socket is moved far
    /// above the program's numbers (on a thread left in the program's table, an old kernel).
    pub(crate) fn bind(addr: &HttpAddr) -> io::Result<(Self, String)> {
        match addr {
            HttpAddr::Tcp(a) => {
                let l =
                    TcpListener::from(crate::sys::move_high(OwnedFd::from(TcpListener::bind(a)?)));
                let shown = l.local_addr().map_or_else(|_| a.to_string(), |b| b.to_string());
                Ok((Listener::Tcp(l), shown))
            }
            HttpAddr::Unix(path) => {
                remove_stale(path)?;
                let l = UnixListener::bind(path)?;
                std::fs::set_permissions(
                    path,
                    std::os::unix::fs::PermissionsExt::from_mode(0o600),
                )?;
                let l = UnixListener::from(crate::sys::move_high(OwnedFd::from(l)));
                Ok((Listener::Unix(l), addr.to_string()))
            }
        }
    }

    pub(crate) fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(true),
            Listener::Unix(l) => l.set_nonblocking(true),
        }
    }

    /// One connection waiting and its peer (`WouldBlock` when none is).
    pub(crate) fn accept(&self) -> io::Result<(Conn, Peer)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                let s = TcpStream::from(crate::sys::move_high(OwnedFd::from(s)));
                let local = s.local_addr()?;
                Ok((Conn::Tcp(s), super::access::peer_of(local, peer)))
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept()?;
                let s = UnixStream::from(crate::sys::move_high(OwnedFd::from(s)));
                let peer = super::access::peer_of_uid(peer_uid(s.as_raw_fd()));
                Ok((Conn::Unix(s), peer))
            }
        }
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l) => l.as_raw_fd(),
        }
    }
}

impl Conn {
    pub(crate) fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => s.set_nonblocking(on),
            Conn::Unix(s) => s.set_nonblocking(on),
        }
    }

    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => s.set_read_timeout(t),
            Conn::Unix(s) => s.set_read_timeout(t),
        }
    }

    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => s.set_write_timeout(t),
            Conn::Unix(s) => s.set_write_timeout(t),
        }
    }

    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Conn::Tcp(s) => s.shutdown(Shutdown::Both),
            Conn::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl AsRawFd for Conn {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Conn::Tcp(s) => s.as_raw_fd(),
            Conn::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for &Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => (&*s).read(buf),
            Conn::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => (&*s).write(buf),
            Conn::Unix(s) => (&*s).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The user of the peer of the unix socket `fd` (`SO_PEERCRED`), if the kernel says.
fn peer_uid(fd: RawFd) -> Option<u32> {
    // SAFETY: ucred is plain data; all zeroes is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given; `fd` is a socket.
    let r = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &mut len)
    };
    (r == 0).then_some(cred.uid)
}

/// Removes a socket at `path` that nothing listens on (left by an earlier run); any other file
/// there is an error naming it.
fn remove_stale(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let md = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    let in_use = || UnixStream::connect(path).is_ok();
    if !md.file_type().is_socket() || in_use() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a stale socket: not replaced", path.display()),
        ));
    }
    std::fs::remove_file(path)
}
