//! The control socket: how a command reaches a mounted file system.
//!
//! While `cairn mount`/`serve` runs, it holds the repository's lock, so
//! commands such as `stats`, `put` or `gc` are sent to it over
//! `<repo>/run/control.sock` instead. The protocol is JSON lines: the
//! client sends one [`Request`]; the server answers with any number of
//! `{"progress": ...}` lines and then one `{"ok": result}` or
//! `{"error": "message"}` line.
//!
//! Bulk data never travels as JSON: `put` and `get` send the open file
//! (or standard input or output) along with the request line as an
//! `SCM_RIGHTS` message, and the daemon reads or writes it directly.

use parking_lot::Mutex;
use std::io::{BufRead, BufReader, IoSlice, IoSliceMut, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ops::{self, Progress, Request, Target};

/// Progress lines are sent at most this often (a `get` reports every
/// chunk it writes).
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// The longest request line read (a cairn.toml travels in some).
const REQUEST_MAX: usize = 1 << 20;
/// Requests answered at once, each on its own thread. Commands are few and
/// often long (scrub, gc, a `put` of a large file): 32 is more than a
/// person or a script runs side by side, and bounds the daemon's threads
/// and descriptors when a client loops connecting. Beyond it a request is
/// refused with an error, never queued behind a scrub of unknown length.
const CONNECTIONS_MAX: usize = 32;

pub fn socket_path(repo: &Path) -> PathBuf {
    repo.join("run").join("control.sock")
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Reply {
    Progress(Progress),
    Ok(Value),
    Error(String),
}

/// The running server; dropping it removes the socket.
pub struct Server {
    path: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What the daemon serves requests against.
pub struct Served {
    pub fs: Arc<fs::Fs>,
    pub chunking: chunking::ChunkerParams,
    pub mountpoint: PathBuf,
}

/// Starts answering requests for the mounted file system.
pub fn serve(repo: &Path, served: Served) -> Result<Server> {
    let path = socket_path(repo);
    let dir = path.parent().expect("the socket is in run/");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // A socket file left by a daemon that was killed answers nobody (this
    // process holds the repository's lock, so no other daemon runs).
    if path.exists() && UnixStream::connect(&path).is_err() {
        std::fs::remove_file(&path).ok();
    }
    let root = repo.to_path_buf();
    let listener = UnixListener::bind(&path)
        .with_context(|| format!("cannot listen on the control socket {}", path.display()))?;
    let served = Arc::new(served);
    let slots = Arc::new(Slots::new(CONNECTIONS_MAX));
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let Some(slot) = slots.take() else {
                    refuse(conn);
                    continue;
                };
                let served = served.clone();
                let root = root.clone();
                let spawned = std::thread::Builder::new().name("control-request".into()).spawn(move || {
                    let _slot = slot;
                    let target = Target {
                        store: served.fs.store(),
                        fs: Some(&served.fs),
                        chunking: served.chunking,
                        root: &root,
                        mountpoint: Some(&served.mountpoint),
                        repo: None,
                    };
                    let _ = answer(conn, &target);
                });
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot start a thread to answer a control request");
                }
            }
        })
        .context("cannot start the control thread")?;
    Ok(Server { path })
}

/// Connections being answered, at most `max`.
struct Slots {
    used: AtomicUsize,
    max: usize,
}

/// One connection's place among the [`Slots`], given back on drop.
struct Slot(Arc<Slots>);

impl Slots {
    fn new(max: usize) -> Slots {
        Slots {
            used: AtomicUsize::new(0),
            max,
        }
    }

    fn take(self: &Arc<Self>) -> Option<Slot> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers a connection beyond [`CONNECTIONS_MAX`] with an error, without
/// reading its request (that could wait on the client).
fn refuse(conn: UnixStream) {
    let message = format!(
        "the daemon is answering {CONNECTIONS_MAX} requests already; try again once one has finished"
    );
    tracing::warn!("{message}");
    let mut line = serde_json::to_vec(&Reply::Error(message)).expect("a reply is plain data");
    line.push(b'\n');
    let _ = (&conn).write_all(&line);
}

/// The client's end of one request, as the daemon sees it.
struct Client {
    out: Mutex<(UnixStream, Option<Instant>)>,
    gone: AtomicBool,
}

impl Client {
    fn send(&self, r: &Reply) {
        let mut out = self.out.lock();
        if let Reply::Progress(_) = r {
            if out.1.is_some_and(|t| t.elapsed() < PROGRESS_EVERY) {
                return;
            }
            out.1 = Some(Instant::now());
        }
        let mut line = serde_json::to_vec(r).expect("a reply is plain data");
        line.push(b'\n');
        if out.0.write_all(&line).is_err() {
            self.gone.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the client still waits for the answer: a unix socket whose
    /// peer has closed fails the next write at once.
    fn waiting(&self) -> bool {
        let mut out = self.out.lock();
        if out.0.write_all(b"\n").is_err() {
            self.gone.store(true, Ordering::Relaxed);
        }
        !self.gone.load(Ordering::Relaxed)
    }
}

fn answer(conn: UnixStream, target: &Target<'_>) -> Result<()> {
    let (line, mut fds) = read_request(&conn)?;
    let client = Client {
        out: Mutex::new((conn, None)),
        gone: AtomicBool::new(false),
    };
    let stream = fds.drain(..).next().map(std::fs::File::from);
    let reply = match serde_json::from_slice::<Request>(&line) {
        Err(e) => Reply::Error(format!("malformed request: {e}")),
        Ok(req) => match ops::exec(
            target,
            &req,
            stream,
            &|p| client.send(&Reply::Progress(p)),
            &|| client.waiting(),
        ) {
            Ok(v) => Reply::Ok(v),
            Err(e) => Reply::Error(format!("{e:#}")),
        },
    };
    client.send(&reply);
    Ok(())
}

/// Reads the request line and the descriptors sent with it.
fn read_request(conn: &UnixStream) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut line = Vec::new();
    let mut fds = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    while !line.contains(&b'\n') {
        let mut space = nix::cmsg_space!([RawFd; 4]);
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = match recvmsg::<()>(
            conn.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(Errno::EINTR) => continue,
            other => other.context("reading a request on the control socket")?,
        };
        let n = msg.bytes;
        for c in msg.cmsgs().context("too many descriptors with a request")? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: the kernel just installed these descriptors in
                // this process for us; nothing else owns them.
                fds.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        if n == 0 {
            break;
        }
        line.extend_from_slice(&buf[..n]);
        if line.len() > REQUEST_MAX {
            bail!("a request on the control socket is longer than {REQUEST_MAX} bytes");
        }
    }
    if let Some(end) = line.iter().position(|&b| b == b'\n') {
        line.truncate(end);
    }
    Ok((line, fds))
}

/// Sends the request line, with `stream` attached when given.
fn send_request(conn: &UnixStream, line: &[u8], stream: Option<BorrowedFd<'_>>) -> Result<()> {
    let raw: Vec<RawFd> = stream.iter().map(|f| f.as_raw_fd()).collect();
    let rights = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &rights };
    let sent = loop {
        match sendmsg::<()>(
            conn.as_raw_fd(),
            &[IoSlice::new(line)],
            cmsgs,
            MsgFlags::empty(),
            None,
        ) {
            Err(Errno::EINTR) => continue,
            other => break other.context("sending a request to the daemon")?,
        }
    };
    (&*conn)
        .write_all(&line[sent..])
        .context("sending a request to the daemon")
}

/// Sends `req` to the daemon serving `repo`, if one runs, with `stream`
/// (the data of a `put`, the destination of a `get`): `None` when no
/// daemon answers (the caller then opens the repository itself).
pub fn call(
    repo: &Path,
    req: &Request,
    stream: Option<BorrowedFd<'_>>,
    progress: &dyn Fn(Progress),
) -> Result<Option<Value>> {
    let path = socket_path(repo);
    let Ok(conn) = UnixStream::connect(&path) else {
        return Ok(None);
    };
    let mut line = serde_json::to_vec(req)?;
    line.push(b'\n');
    // A daemon at its limit answers without reading the request and may
    // close first: its answer is still there to read after a failed send.
    let sent = send_request(&conn, &line, stream);
    for line in BufReader::new(conn).lines() {
        let line = match (line, &sent) {
            (Ok(line), _) => line,
            (Err(_), Err(_)) => break,
            (Err(e), Ok(())) => return Err(e).context("reading the daemon's answer"),
        };
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Reply>(&line)
            .with_context(|| format!("malformed answer from the daemon: {line}"))?
        {
            Reply::Progress(p) => progress(p),
            Reply::Ok(v) => return Ok(Some(v)),
            Reply::Error(e) => bail!("{e}"),
        }
    }
    sent?;
    bail!("the daemon closed the control socket without an answer")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_given_back() {
        let slots = Arc::new(Slots::new(2));
        let a = slots.take().unwrap();
        let _b = slots.take().unwrap();
        assert!(slots.take().is_none());
        drop(a);
        assert!(slots.take().is_some());
    }
}
