//! A TCP proxy for tests: [`Proxy`] forwards a local port to a server and
//! can cut the link between them the way a network does, so that a test
//! can partition a client from its server without network namespaces or
//! `tc netem` (which these kernels lack).
//!
//! **Owns:** the proxy's listener, its connections, and the state of the
//! link ([`Link`]).
//!
//! **Never:** changes, drops or reorders a byte it forwards: a link that
//! is [`Link::Held`] stops carrying bytes (as a partition whose packets are
//! retransmitted once it heals), and one that is [`Link::Reset`] closes
//! connections; neither corrupts a stream.
//!
//! **Invariants:** at most [`MAX_CONNECTIONS`] connections are forwarded at
//! once (more are closed as they arrive); every thread the proxy starts
//! ends once the proxy is dropped.
//!
//! Written by hand: it is a hundred lines of test support, and the known
//! fault proxies (toxiproxy) are servers in another language to install
//! and drive over HTTP.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Connections forwarded at once; each costs two threads.
pub const MAX_CONNECTIONS: usize = 64;
/// How often a blocked pump looks at the link and at the proxy's end.
const POLL: Duration = Duration::from_millis(20);
const BUF: usize = 64 << 10;

/// What the link between the proxy's clients and the server does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Bytes flow both ways.
    Up,
    /// No byte flows either way, and new connections wait unanswered;
    /// connections stay open, and what was sent flows once the link is
    /// [`Link::Up`] again: a partition that heals.
    Held,
    /// Every connection is closed, and new ones are closed at once: a
    /// server that went away.
    Reset,
}

struct Shared {
    link: Mutex<Link>,
    changed: Condvar,
    stop: AtomicBool,
    live: Mutex<Vec<TcpStream>>,
}

impl Shared {
    /// Waits while the link is held; whether bytes may flow now.
    fn may_flow(&self) -> bool {
        let mut link = self.link.lock();
        while *link == Link::Held && !self.stop.load(Ordering::Relaxed) {
            self.changed.wait_for(&mut link, POLL);
        }
        *link == Link::Up && !self.stop.load(Ordering::Relaxed)
    }
}

/// A TCP proxy on a free loopback port, forwarding to one server.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts forwarding a free port on 127.0.0.1 to `server`.
    pub fn start(server: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            link: Mutex::new(Link::Up),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            live: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("netfault-accept".into())
            .spawn(move || accept_loop(listener, server, &s))?;
        Ok(Proxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the link; [`Link::Reset`] closes every connection now.
    pub fn set(&self, link: Link) {
        *self.shared.link.lock() = link;
        if link == Link::Reset {
            for s in self.shared.live.lock().drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        self.shared.changed.notify_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.set(Link::Reset);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, server: SocketAddr, shared: &Arc<Shared>) {
    let mut pumps: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::Relaxed) {
        pumps.retain(|p| !p.is_finished());
        if *shared.link.lock() == Link::Held {
            // Unanswered: the connection waits in the listener's backlog.
            std::thread::sleep(POLL);
            continue;
        }
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(POLL);
                continue;
            }
            Err(_) => continue,
        };
        if *shared.link.lock() == Link::Reset || pumps.len() >= 2 * MAX_CONNECTIONS {
            continue; // dropped: closed
        }
        let Ok(upstream) = TcpStream::connect(server) else {
            continue;
        };
        pumps.extend(connect(client, upstream, shared));
    }
    for p in pumps {
        let _ = p.join();
    }
}

/// Starts the two pumps of one connection.
fn connect(client: TcpStream, upstream: TcpStream, shared: &Arc<Shared>) -> Vec<JoinHandle<()>> {
    let mut out = Vec::new();
    let ends = [
        (client.try_clone(), upstream.try_clone()),
        (upstream.try_clone(), client.try_clone()),
    ];
    {
        let mut live = shared.live.lock();
        for s in [&client, &upstream] {
            if let Ok(c) = s.try_clone() {
                live.push(c);
            }
        }
    }
    for (from, to) in ends {
        let (Ok(from), Ok(to)) = (from, to) else {
            continue;
        };
        let s = shared.clone();
        if let Ok(t) = std::thread::Builder::new()
            .name("netfault-pump".into())
            .spawn(move || pump(from, to, &s))
        {
            out.push(t);
        }
    }
    out
}

/// Copies `from` to `to` while the link allows; ends when either side
/// closes, the link is reset or the proxy stops.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let _ = from.set_read_timeout(Some(POLL));
    let mut buf = vec![0u8; BUF];
    loop {
        // Not reading while held: the sender's buffers fill and it waits,
        // as behind a partition; nothing read is ever dropped.
        if !shared.may_flow() {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // Bytes read before a hold began are delivered after it.
                while *shared.link.lock() == Link::Held && !shared.stop.load(Ordering::Relaxed) {
                    let _ = shared.may_flow();
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a free port.
    fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { return };
                std::thread::spawn(move || {
                    let mut w = c.try_clone().unwrap();
                    let _ = std::io::copy(&mut c, &mut w);
                });
            }
        });
        addr
    }

    fn roundtrip(c: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        c.write_all(msg)?;
        let mut got = vec![0u8; msg.len()];
        c.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn bytes_flow_unchanged_while_up() {
        let p = Proxy::start(echo()).unwrap();
        let mut c = TcpStream::connect(p.addr()).unwrap();
        let msg: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        let writer = {
            let mut w = c.try_clone().unwrap();
            let m = msg.clone();
            std::thread::spawn(move || w.write_all(&m).unwrap())
        };
        let mut got = vec![0u8; msg.len()];
        c.read_exact(&mut got).unwrap();
        writer.join().unwrap();
        assert!(got == msg);
    }

    #[test]
    fn a_held_link_carries_nothing_until_it_heals_and_then_everything() {
        let p = Proxy::start(echo()).unwrap();
        let mut c = TcpStream::connect(p.addr()).unwrap();
        assert_eq!(roundtrip(&mut c, b"before").unwrap(), b"before");
        p.set(Link::Held);
        c.write_all(b"during").unwrap();
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut one = [0u8; 1];
        let err = c.read(&mut one).unwrap_err();
        assert!(matches!(
            err.kind(),
            ErrorKind::WouldBlock | ErrorKind::TimedOut
        ));
        p.set(Link::Up);
        c.set_read_timeout(None).unwrap();
        let mut got = [0u8; 6];
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"during");
    }

    #[test]
    fn a_reset_link_closes_connections_and_refuses_new_ones_until_up() {
        let p = Proxy::start(echo()).unwrap();
        let mut c = TcpStream::connect(p.addr()).unwrap();
        assert_eq!(roundtrip(&mut c, b"x").unwrap(), b"x");
        p.set(Link::Reset);
        let mut buf = [0u8; 1];
        let closed = matches!(c.read(&mut buf), Ok(0) | Err(_));
        assert!(closed, "a reset closes the connection");
        let mut again = TcpStream::connect(p.addr()).unwrap();
        assert!(roundtrip(&mut again, b"y").is_err(), "closed at once");
        p.set(Link::Up);
        let mut fresh = TcpStream::connect(p.addr()).unwrap();
        assert_eq!(roundtrip(&mut fresh, b"z").unwrap(), b"z");
    }
}
