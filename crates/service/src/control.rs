//! The control socket: how a command reaches a mounted file system.
//!
//! While `cairn mount`/`serve` runs, it holds the repository's lock, so
//! commands such as `stats`, `put` or `gc` are sent to it over
//! `<repo>/run/control.sock` instead, and run there by [`crate::exec`].
//!
//! # Protocol (version [`PROTOCOL`])
//!
//! JSON lines over a Unix stream socket, one request per connection:
//!
//! - The client sends one line: `{"protocol": 1, "request": R}`, where `R`
//!   is a [`Request`] (`{"op": "stats"}`, `{"op": "put", "name": "x",
//!   "replace": false}` ...).
//! - The server answers with any number of progress lines
//!   `{"protocol": 1, "progress": {"what": "check", "done": 3, "total": 9}}`
//!   (at most one per 100 ms), empty lines (sent to learn whether the
//!   client still listens), and then exactly one final line:
//!   `{"protocol": 1, "ok": {"op": "stats", "reply": ...}}` with the
//!   [`Reply`], or `{"protocol": 1, "error": "message"}`, with
//!   `"refused": true` when the request was refused as asked (a label or
//!   path that is not there: [`ServiceError::is_refusal`]).
//! - Every line carries the sender's protocol version. A server that does
//!   not speak the request's version answers with an error line carrying
//!   its own version, without running the request; a client that reads a
//!   version other than its own reports [`ServiceError::ProtocolMismatch`]
//!   ("the mounted daemon speaks control protocol N, this cairn speaks M;
//!   restart the mount"). Daemons from before versioning (protocol 0) send
//!   lines with no version and read requests with a top-level `op`: they
//!   refuse a versioned request as malformed, running nothing.
//! - Bulk data never travels as JSON: `put` and `get` send the open file
//!   (or standard input or output) along with the request line as an
//!   `SCM_RIGHTS` message, and the daemon reads or writes it directly.
//!
//! Limits: a request line is at most [`REQUEST_MAX`] bytes; at most
//! [`CONNECTIONS_MAX`] requests are answered at once (more are refused with
//! an error line, never queued).

use parking_lot::Mutex;
use std::fs::File;
use std::io::{BufRead, BufReader, IoSlice, IoSliceMut, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};

use crate::jobs::Jobs;
use crate::{exec, Progress, Reply, Request, Result, ServiceError, Step, Target};

/// The control protocol this build speaks.
pub const PROTOCOL: u32 = 1;
/// Progress lines are sent at most this often (a `get` reports every
/// chunk it writes).
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// The longest request line read (a cairn.toml travels in some).
pub const REQUEST_MAX: usize = 1 << 20;
/// Requests answered at once, each on its own thread. Commands are few and
/// often long (scrub, gc, a `put` of a large file): 32 is more than a
/// person or a script runs side by side, and bounds the daemon's threads
/// and descriptors when a client loops connecting. Beyond it a request is
/// refused with an error, never queued behind a scrub of unknown length.
pub const CONNECTIONS_MAX: usize = 32;

pub fn socket_path(repo: &Path) -> PathBuf {
    repo.join("run").join("control.sock")
}

/// The protocol version of any line, read before the rest: a line of
/// another version may not parse as this one's.
#[derive(Deserialize)]
struct Version {
    protocol: Option<u32>,
}

#[derive(Serialize, Deserialize)]
struct RequestLine {
    protocol: u32,
    request: Request,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Answer {
    Progress(Step),
    /// Boxed: a reply is large beside a progress step.
    Ok(Box<Reply>),
    Error(String),
}

#[derive(Serialize, Deserialize)]
struct AnswerLine {
    protocol: u32,
    #[serde(flatten)]
    answer: Answer,
    /// With an error: the request was refused as asked (a user's mistake),
    /// not failed. Absent otherwise, and ignored by older clients, which
    /// read the error alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    refused: bool,
}

fn answer_line(answer: Answer, refused: bool) -> Vec<u8> {
    let mut line = serde_json::to_vec(&AnswerLine {
        protocol: PROTOCOL,
        answer,
        refused,
    })
    .expect("an answer is plain data");
    line.push(b'\n');
    line
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
    /// A read-only mount: requests that would change the repository
    /// ([`Request::writes`]) are refused.
    pub read_only: bool,
    /// The long operations running and recently run ([`crate::jobs`]).
    pub jobs: Arc<Jobs>,
}

impl Served {
    /// What a request runs against: this file system, of the repository
    /// at `root`.
    pub fn target<'a>(&'a self, root: &'a Path) -> Target<'a> {
        Target {
            store: self.fs.store(),
            fs: Some(&self.fs),
            chunking: self.chunking,
            root,
            mountpoint: Some(&self.mountpoint),
            repo: None,
        }
    }
}

/// Starts answering requests for the mounted file system.
pub fn serve(repo: &Path, served: Arc<Served>) -> Result<Server> {
    let path = socket_path(repo);
    let dir = path.parent().expect("the socket is in run/");
    std::fs::create_dir_all(dir).map_err(ServiceError::io("create", dir))?;
    // A socket file left by a daemon that was killed answers nobody (this
    // process holds the repository's lock, so no other daemon runs).
    if path.exists() && UnixStream::connect(&path).is_err() {
        std::fs::remove_file(&path).ok();
    }
    let root = repo.to_path_buf();
    let listener = UnixListener::bind(&path)
        .map_err(ServiceError::io("listen on the control socket", &path))?;
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
                let spawned = std::thread::Builder::new()
                    .name("control-request".into())
                    .spawn(move || {
                        let _slot = slot;
                        let target = served.target(&root);
                        let _ = answer(conn, |req, stream, progress| {
                            let result = if served.read_only && req.writes() {
                                Err(ServiceError::ReadOnlyMount {
                                    mountpoint: served.mountpoint.clone(),
                                })
                            } else {
                                served
                                    .jobs
                                    .attached(&req, progress, |p| exec(&target, &req, stream, p))
                            };
                            served.jobs.answered(req.op(), result.is_ok());
                            result
                        });
                    });
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot start a thread to answer a control request");
                }
            }
        })
        .map_err(|source| ServiceError::Control {
            what: "starting the thread that listens",
            source,
        })?;
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
    let _ = (&conn).write_all(&answer_line(Answer::Error(message), false));
}

/// The client's end of one request, as the daemon sees it.
struct Client {
    out: Mutex<(UnixStream, Option<Instant>)>,
    gone: AtomicBool,
}

impl Client {
    /// Sends `answer`; `refused` marks an error as a refusal.
    fn send(&self, answer: Answer, refused: bool) {
        let mut out = self.out.lock();
        if let Answer::Progress(_) = answer {
            if out.1.is_some_and(|t| t.elapsed() < PROGRESS_EVERY) {
                return;
            }
            out.1 = Some(Instant::now());
        }
        if out.0.write_all(&answer_line(answer, refused)).is_err() {
            self.gone.store(true, Ordering::Relaxed);
        }
    }
}

impl Progress for Client {
    fn step(&self, what: &str, done: u64, total: u64) {
        self.send(
            Answer::Progress(Step {
                what: what.to_string(),
                done,
                total,
            }),
            false,
        );
    }

    /// Whether the client went away: a unix socket whose peer has closed
    /// fails the next write at once.
    fn cancelled(&self) -> bool {
        let mut out = self.out.lock();
        if out.0.write_all(b"\n").is_err() {
            self.gone.store(true, Ordering::Relaxed);
        }
        self.gone.load(Ordering::Relaxed)
    }
}

/// What a request line asks, or why it is not run.
fn parse_request(line: &[u8]) -> Result<Request, String> {
    let version =
        serde_json::from_slice::<Version>(line).map_err(|e| format!("malformed request: {e}"))?;
    match version.protocol {
        Some(PROTOCOL) => {}
        Some(theirs) => {
            return Err(format!(
                "this daemon speaks control protocol {PROTOCOL}, the request protocol {theirs}; \
                 use the cairn that mounted the file system, or restart the mount"
            ))
        }
        None => {
            return Err(format!(
                "this daemon speaks control protocol {PROTOCOL}, the request carries no version \
                 (a cairn from before versioning); use the cairn that mounted the file system"
            ))
        }
    }
    serde_json::from_slice::<RequestLine>(line)
        .map(|l| l.request)
        .map_err(|e| format!("malformed request: {e}"))
}

/// Reads one request from `conn`, runs it with `run`, and answers.
fn answer(
    conn: UnixStream,
    run: impl FnOnce(Request, Option<File>, &dyn Progress) -> Result<Reply>,
) -> Result<()> {
    let (line, mut fds) = read_request(&conn)?;
    let client = Client {
        out: Mutex::new((conn, None)),
        gone: AtomicBool::new(false),
    };
    let stream = fds.drain(..).next().map(File::from);
    let (answer, refused) = match parse_request(&line) {
        Err(e) => {
            tracing::warn!("control socket: {e}");
            (Answer::Error(e), false)
        }
        Ok(req) => match run(req, stream, &client) {
            Ok(reply) => (Answer::Ok(Box::new(reply)), false),
            Err(e) => {
                let text = e.chain();
                let refused = e.is_refusal();
                // A user's mistake is no fault of the daemon's.
                if refused {
                    tracing::info!("refused: {text}");
                } else {
                    tracing::error!("{text}");
                }
                (Answer::Error(text), refused)
            }
        },
    };
    client.send(answer, refused);
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
            other => other?,
        };
        let n = msg.bytes;
        for c in msg.cmsgs()? {
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
            return Err(ServiceError::RequestTooLong(REQUEST_MAX));
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
            other => break other?,
        }
    };
    (&*conn)
        .write_all(&line[sent..])
        .map_err(|source| ServiceError::Control {
            what: "sending a request",
            source,
        })
}

/// Sends `req` to the daemon serving `repo`, if one runs, with `stream`
/// (the data of a `put`, the destination of a `get`): `None` when no
/// daemon answers (the caller then opens the repository itself).
pub fn call(
    repo: &Path,
    req: &Request,
    stream: Option<BorrowedFd<'_>>,
    progress: &dyn Progress,
) -> Result<Option<Reply>> {
    let path = socket_path(repo);
    let Ok(conn) = UnixStream::connect(&path) else {
        return Ok(None);
    };
    exchange(conn, req, stream, progress).map(Some)
}

/// One request and its answer over `conn`.
fn exchange(
    conn: UnixStream,
    req: &Request,
    stream: Option<BorrowedFd<'_>>,
    progress: &dyn Progress,
) -> Result<Reply> {
    let mut line = serde_json::to_vec(&RequestLine {
        protocol: PROTOCOL,
        request: req.clone(),
    })
    .expect("a request is plain data");
    line.push(b'\n');
    // A daemon at its limit answers without reading the request and may
    // close first: its answer is still there to read after a failed send.
    let sent = send_request(&conn, &line, stream);
    for line in BufReader::new(conn).lines() {
        let line = match (line, &sent) {
            (Ok(line), _) => line,
            (Err(_), Err(_)) => break,
            (Err(source), Ok(())) => {
                return Err(ServiceError::Control {
                    what: "reading the daemon's answer",
                    source,
                })
            }
        };
        if line.is_empty() {
            continue;
        }
        let answer = parse_answer(&line)?;
        match answer.answer {
            Answer::Progress(p) => progress.step(&p.what, p.done, p.total),
            Answer::Ok(reply) => return Ok(*reply),
            Answer::Error(e) if answer.refused => return Err(ServiceError::DaemonRefused(e)),
            Answer::Error(e) => return Err(ServiceError::Daemon(e)),
        }
    }
    sent?;
    Err(ServiceError::NoAnswer)
}

/// One line of the daemon's answer, refused when its protocol is not ours.
fn parse_answer(line: &str) -> Result<AnswerLine> {
    let malformed = |source| ServiceError::MalformedAnswer {
        line: line.to_string(),
        source,
    };
    let version = serde_json::from_str::<Version>(line).map_err(malformed)?;
    let daemon = version.protocol.unwrap_or(0);
    if daemon != PROTOCOL {
        return Err(ServiceError::ProtocolMismatch {
            daemon,
            client: PROTOCOL,
        });
    }
    serde_json::from_str::<AnswerLine>(line).map_err(malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Removed, Silent};
    use std::io::Read;

    #[test]
    fn slots_are_bounded_and_given_back() {
        let slots = Arc::new(Slots::new(2));
        let a = slots.take().unwrap();
        let _b = slots.take().unwrap();
        assert!(slots.take().is_none());
        drop(a);
        assert!(slots.take().is_some());
    }

    /// Collects the steps a client is told of.
    #[derive(Default)]
    struct Steps(Mutex<Vec<(String, u64, u64)>>);

    impl Progress for Steps {
        fn step(&self, what: &str, done: u64, total: u64) {
            self.0.lock().push((what.to_string(), done, total));
        }
    }

    #[test]
    fn a_request_is_answered_with_its_progress_and_typed_reply() {
        let (client, server) = UnixStream::pair().unwrap();
        let daemon = std::thread::spawn(move || {
            answer(server, |req, stream, progress| {
                assert!(stream.is_none());
                let Request::Rm { label } = req else {
                    panic!("asked {req:?}");
                };
                progress.step("remove", 1, 2);
                Ok(Reply::Rm(Removed { removed: label }))
            })
        });
        let steps = Steps::default();
        let req = Request::Rm {
            label: "a/b".into(),
        };
        let reply = exchange(client, &req, None, &steps).unwrap();
        daemon.join().unwrap().unwrap();
        assert_eq!(
            reply.into_rm().unwrap(),
            Removed {
                removed: "a/b".into()
            }
        );
        assert_eq!(*steps.0.lock(), vec![("remove".to_string(), 1, 2)]);
    }

    #[test]
    fn an_error_travels_as_its_message() {
        let (client, server) = UnixStream::pair().unwrap();
        let daemon =
            std::thread::spawn(move || answer(server, |_, _, _| Err(ServiceError::NoVersion)));
        let e = exchange(client, &Request::Stats, None, &Silent).unwrap_err();
        daemon.join().unwrap().unwrap();
        assert!(
            matches!(&e, ServiceError::Daemon(m) if m == &ServiceError::NoVersion.to_string()),
            "{e}"
        );
    }

    #[test]
    fn a_refusal_travels_as_one() {
        let (client, server) = UnixStream::pair().unwrap();
        let daemon = std::thread::spawn(move || {
            answer(server, |_, _, _| {
                Err(ServiceError::Cas(Box::new(cas::CasError::NoSuchRoot(
                    "nosuch".into(),
                ))))
            })
        });
        let req = Request::Rm {
            label: "nosuch".into(),
        };
        let e = exchange(client, &req, None, &Silent).unwrap_err();
        daemon.join().unwrap().unwrap();
        assert!(
            matches!(&e, ServiceError::DaemonRefused(m) if m == "no root named \"nosuch\""),
            "{e:?}"
        );
        assert!(e.is_refusal());
    }

    #[test]
    fn a_request_of_another_version_is_refused_unrun_naming_both() {
        let (mut client, server) = UnixStream::pair().unwrap();
        let daemon = std::thread::spawn(move || answer(server, |req, _, _| panic!("ran {req:?}")));
        client
            .write_all(b"{\"protocol\": 7, \"request\": {\"op\": \"frobnicate\"}}\n")
            .unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        let mut text = String::new();
        client.read_to_string(&mut text).unwrap();
        daemon.join().unwrap().unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["protocol"], PROTOCOL);
        let message = line["error"].as_str().unwrap();
        assert!(
            message.contains(&format!("control protocol {PROTOCOL}"))
                && message.contains("protocol 7"),
            "{message}"
        );
    }

    #[test]
    fn an_unversioned_daemon_is_named_as_protocol_0() {
        // What a daemon from before versioning answers a versioned request.
        let (client, mut server) = UnixStream::pair().unwrap();
        let old = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let _ = server.read(&mut buf).unwrap();
            server
                .write_all(b"{\"error\":\"malformed request: missing field `op`\"}\n")
                .unwrap();
        });
        let e = exchange(client, &Request::Stats, None, &Silent).unwrap_err();
        old.join().unwrap();
        assert!(
            matches!(
                e,
                ServiceError::ProtocolMismatch {
                    daemon: 0,
                    client: PROTOCOL
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "the mounted daemon speaks control protocol 0, this cairn speaks {PROTOCOL}; \
                 restart the mount"
            )
        );
    }

    #[test]
    fn an_unversioned_request_is_refused() {
        let e = parse_request(b"{\"op\": \"stats\"}").unwrap_err();
        assert!(e.contains("carries no version"), "{e}");
        assert_eq!(
            parse_request(b"{\"protocol\": 1, \"request\": {\"op\": \"stats\"}}"),
            Ok(Request::Stats)
        );
    }
}
