//! The HTTP server: s3s's service on hyper, on a tokio runtime of its own
//! with a bounded number of blocking threads (where every file-system call
//! runs), stopped gracefully.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::service::{S3Service, S3ServiceBuilder};
use tokio::sync::oneshot;

use crate::auth::Auth;
use crate::console::{self, Console};
use crate::error::{self, GatewayError, Result};
use crate::keys::Keyring;
use crate::metrics::{self, Metrics};
use crate::s3::Gateway;
use crate::sweep;
use crate::tree::{NameChanged, Tree};

/// How long a stop waits for requests in flight before it drops them.
const DRAIN: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct Options {
    pub listen: SocketAddr,
    /// Threads that run file-system calls at once (reads and writes of
    /// bodies, lookups, listings).
    pub blocking_threads: usize,
    pub limits: Limits,
    /// A PUT's temporary file or a multipart upload unchanged this long
    /// is abandoned: removed at start and by a sweep every hour.
    pub abandoned_after: Duration,
    /// Figures to serve at `/metrics` and record requests in (none
    /// without: `/metrics` is then an S3 request like any other).
    pub metrics: Option<Metrics>,
    /// What answers `/-/` (the web dashboard; none without: such paths
    /// are then S3 requests, refused as bad bucket names).
    pub console: Option<Arc<dyn Console>>,
}

impl Options {
    pub fn new(listen: SocketAddr) -> Options {
        Options {
            listen,
            blocking_threads: 16,
            limits: Limits::default(),
            abandoned_after: Duration::from_secs(24 * 3600),
            metrics: None,
            console: None,
        }
    }
}

/// The largest bodies and objects the gateway takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one PUT or one part of a multipart upload (S3: 5 GiB).
    /// A larger `Content-Length` is refused before the body is read; a
    /// body without one is cut off once it passes this.
    pub max_put: u64,
    /// Bytes of an object completed from parts (S3: 5 TiB).
    pub max_object: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_put: 5 << 30,
            max_object: 5 << 40,
        }
    }
}

/// s3s's service, logging every refused request (at info: they are the
/// client's errors; the gateway's own are logged where they happen) and
/// closing the connection after a refused request with a body: a request
/// refused before its body was read (a key too long, a bad signature)
/// leaves that body on the connection, where the client's next request
/// would be read after it as garbage (a bare 400). It also closes the
/// connection after a request that expects "100 Continue" and has no body
/// (see `call`).
///
/// It also answers `/metrics` and records each request's latency, when
/// the gateway keeps figures.
#[derive(Clone)]
struct CloseAfterRefusal {
    s3: S3Service,
    metrics: Option<Metrics>,
    console: Option<Arc<dyn Console>>,
    keys: Arc<Keyring>,
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for CloseAfterRefusal {
    type Response = s3s::HttpResponse;
    type Error = s3s::HttpError;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn call(&self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let h = req.headers();
        let has_body = h.contains_key(http::header::TRANSFER_ENCODING)
            || h.get(http::header::CONTENT_LENGTH)
                .is_some_and(|v| v.as_bytes() != b"0");
        // hyper sends "100 Continue" when a body is first read, so an
        // expecting request without a body gets its final answer alone,
        // as the RFC allows; botocore then keeps that answer's status line
        // for the next request on the connection, reads the next answer's
        // status line as a header, and waits for a body until its read
        // timeout (an empty PUT by the AWS CLI stalled the one after it
        // 60 s). Closing such a connection leaves nothing stale to reuse.
        let expects_without_body = !has_body
            && h.get(http::header::EXPECT)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if let Some(console) = self.console.clone().filter(|_| console::is_console(&req)) {
            let keys = self.keys.clone();
            return Box::pin(async move { Ok(to_console(console, req, &keys).await) });
        }
        if let Some(m) = self.metrics.as_ref().filter(|_| metrics::is_scrape(&req)) {
            let (text, ctype) = m.text(req.headers().get(http::header::ACCEPT));
            let mut resp = http::Response::new(s3s::Body::from(text));
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static(ctype),
            );
            return Box::pin(async move { Ok(resp) });
        }
        let started = std::time::Instant::now();
        let (method, path) = (req.method().clone(), req.uri().path().to_string());
        let received = content_length(req.headers()).unwrap_or(0);
        let fut = hyper::service::Service::call(&self.s3, req);
        let figures = self.metrics.clone();
        Box::pin(async move {
            let mut resp = fut.await?;
            if let Some(m) = figures {
                let sent = content_length(resp.headers())
                    .or_else(|| hyper::body::Body::size_hint(resp.body()).exact())
                    .unwrap_or(0);
                m.record(
                    &method,
                    &path,
                    resp.status().as_u16(),
                    started,
                    (received, sent),
                );
            }
            if !resp.status().is_success() {
                tracing::info!(%method, %path, status = resp.status().as_u16(), "the gateway refused a request");
                let filled = resp.body().bytes().and_then(|b| error::with_message(&b));
                if let Some(body) = filled {
                    *resp.body_mut() = s3s::Body::from(body);
                }
            }
            if expects_without_body || (has_body && !resp.status().is_success()) {
                resp.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            Ok(resp)
        })
    }
}

/// A message's announced body length.
fn content_length(h: &http::HeaderMap) -> Option<u64> {
    h.get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A console request answered on a blocking thread.
async fn to_console(
    console: Arc<dyn Console>,
    req: http::Request<hyper::body::Incoming>,
    keys: &Keyring,
) -> s3s::HttpResponse {
    let answer = match console::call(req, keys).await {
        None => console::Answer {
            status: http::StatusCode::PAYLOAD_TOO_LARGE,
            content_type: "text/plain; charset=utf-8",
            body: bytes::Bytes::from_static(b"the request's body is too large or was cut off\n"),
        },
        Some(call) => match tokio::task::spawn_blocking(move || console.answer(call)).await {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "the dashboard failed to answer a request");
                console::Answer {
                    status: http::StatusCode::INTERNAL_SERVER_ERROR,
                    content_type: "text/plain; charset=utf-8",
                    body: bytes::Bytes::from_static(
                        b"the dashboard failed; see the daemon's log\n",
                    ),
                }
            }
        },
    };
    let mut resp = http::Response::new(s3s::Body::from(answer.body));
    *resp.status_mut() = answer.status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(answer.content_type),
    );
    resp
}

/// A gateway serving requests; [`Running::stop`] ends it.
pub struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    sweeper: Option<(std::sync::mpsc::Sender<()>, JoinHandle<()>)>,
    changed: Arc<OnceLock<NameChanged>>,
}

impl Running {
    /// Where it listens (the port chosen, if `:0` was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Calls `f` with each name the gateway changes from now on (the
    /// directory, the name): `serve` drops the kernel's cached entry of
    /// its mount there. Only the first call counts.
    pub fn on_name_change(&self, f: NameChanged) {
        let _ = self.changed.set(f);
    }

    /// Stops accepting, lets requests in flight finish (up to a bound),
    /// and returns when the server's threads have ended. A PUT cut off
    /// here leaves no object (its temporary file is removed).
    pub fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some((tx, t)) = self.sweeper.take() {
            let _ = tx.send(());
            let _ = t.join();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shut();
    }
}

/// A listening socket at `listen`, ready for tokio, and its address (the
/// port chosen, for `:0`).
pub(crate) fn bind(listen: SocketAddr) -> Result<(std::net::TcpListener, SocketAddr)> {
    let refused = |source| GatewayError::Listen {
        addr: listen,
        source,
    };
    let listener = std::net::TcpListener::bind(listen).map_err(refused)?;
    let addr = listener.local_addr().map_err(refused)?;
    listener.set_nonblocking(true).map_err(refused)?;
    Ok((listener, addr))
}

/// Answers connections on `listener` with `service` until `stop` fires,
/// then lets requests in flight finish for up to [`DRAIN`]; `who` names
/// the server in the log.
pub(crate) async fn accept<S, B>(
    listener: std::net::TcpListener,
    service: S,
    stop: oneshot::Receiver<()>,
    who: &'static str,
) where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "{who} cannot use its socket");
            return;
        }
    };
    let http = ConnBuilder::new(TokioExecutor::new());
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let socket = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "{who} could not accept a connection");
                    continue;
                }
            },
            _ = stop.as_mut() => break,
        };
        // A reply's head and body leave in separate writes; with Nagle on,
        // the body waits for the client's delayed ACK (40 ms on Linux) on
        // every small GET.
        if let Err(e) = socket.set_nodelay(true) {
            tracing::warn!(error = %e, "{who} could not set TCP_NODELAY");
        }
        let conn = http.serve_connection(TokioIo::new(socket), service.clone());
        let conn = graceful.watch(conn.into_owned());
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(DRAIN) => {
            tracing::warn!("{who} stopped with requests still in flight");
        }
    }
}

/// Serves `fs` over S3 at `opts.listen`, checking requests against the
/// access keys kept in the repository at `repo_root`.
pub fn start(fs: Arc<fs::Fs>, repo_root: &Path, opts: &Options) -> Result<Running> {
    let (listener, addr) = bind(opts.listen)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(opts.blocking_threads.max(1))
        .thread_name("cairn-gateway")
        .enable_all()
        .build()
        .map_err(GatewayError::Runtime)?;
    let keys = Arc::new(Keyring::new(repo_root));
    let (sweep_tx, sweep_rx) = std::sync::mpsc::channel();
    let sweeper = {
        let (fs, age) = (fs.clone(), opts.abandoned_after);
        std::thread::Builder::new()
            .name("cairn-gateway-sweep".into())
            .spawn(move || sweep::run(fs, age, sweep_rx))
            .map_err(GatewayError::Runtime)?
    };
    let changed = Arc::new(OnceLock::new());
    let service = {
        let tree = Tree::new(fs, changed.clone());
        let mut b = S3ServiceBuilder::new(Gateway::new(tree, keys.clone(), opts.limits));
        b.set_auth(Auth::new(keys.clone()));
        b.set_access(Auth::new(keys.clone()));
        let keys_for_console = keys;
        CloseAfterRefusal {
            s3: b.build(),
            metrics: opts.metrics.clone(),
            console: opts.console.clone(),
            keys: keys_for_console,
        }
    };
    let (tx, rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("cairn-gateway".into())
        .spawn(move || {
            runtime.block_on(accept(listener, service, rx, "the gateway"));
            // Blocking tasks still running (a slow read) are waited for
            // only up to the same bound.
            runtime.shutdown_timeout(DRAIN);
        })
        .map_err(GatewayError::Runtime)?;
    tracing::info!(%addr, "the S3 gateway listens");
    Ok(Running {
        addr,
        stop: Some(tx),
        thread: Some(thread),
        sweeper: Some((sweep_tx, sweeper)),
        changed,
    })
}
