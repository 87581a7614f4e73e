//! The HTTP server: one router for the branch and the index, behind the
//! token check, on a small runtime of its own.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use branch::LocalDir;
use tokio::sync::oneshot;

use crate::{auth, blobs, index, wire, ChunkdError};

/// What a chunkd serves and how.
#[derive(Debug, Clone)]
pub struct Config {
    /// The directory served as a branch (created if missing).
    pub dir: PathBuf,
    pub listen: SocketAddr,
    /// The file holding the shared secret (its first line).
    pub token_file: PathBuf,
    /// Largest request body accepted, in bytes.
    pub max_body: u64,
    /// The fingerprint-index partition, when this chunkd holds one.
    pub index: Option<index::PartitionConfig>,
}

/// What every request handler reaches.
pub(crate) struct Shared {
    pub(crate) dir: LocalDir,
    pub(crate) token: String,
    pub(crate) max_body: u64,
    pub(crate) index: Option<Arc<index::Partition>>,
}

/// A chunkd serving until [`Running::stop`] (or drop).
pub struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    runtime: tokio::runtime::Runtime,
}

/// Opens the directory (discarding blobs a crash left half-written) and
/// the index, binds, and serves in the background.
pub fn start(config: Config) -> Result<Running, ChunkdError> {
    let token = branch::read_token(&config.token_file).map_err(|source| ChunkdError::Token {
        path: config.token_file.clone(),
        source,
    })?;
    if token.len() < auth::MIN_TOKEN {
        return Err(ChunkdError::WeakToken {
            path: config.token_file.clone(),
            len: token.len(),
            min: auth::MIN_TOKEN,
        });
    }
    let (dir, discarded) = LocalDir::open("chunkd", &config.dir)?;
    if discarded > 0 {
        tracing::info!(discarded, dir = %config.dir.display(), "chunkd: removed blobs a crash left half-written");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(64)
        .thread_name("chunkd")
        .enable_all()
        .build()
        .map_err(ChunkdError::Runtime)?;
    let index = match &config.index {
        Some(c) => Some(index::Partition::open(&config.dir, c, &runtime)?),
        None => None,
    };
    let shared = Arc::new(Shared {
        dir,
        token,
        max_body: config.max_body,
        index,
    });
    let listen_err = |source| ChunkdError::Listen {
        addr: config.listen,
        source,
    };
    let std_listener = std::net::TcpListener::bind(config.listen).map_err(listen_err)?;
    std_listener.set_nonblocking(true).map_err(listen_err)?;
    let addr = std_listener.local_addr().map_err(listen_err)?;
    let listener = {
        let _guard = runtime.enter();
        tokio::net::TcpListener::from_std(std_listener).map_err(listen_err)?
    };
    let app = router(shared);
    let (stop, stopped) = oneshot::channel::<()>();
    let served = runtime.spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    Ok(Running {
        addr,
        stop: Some(stop),
        served: Some(served),
        runtime,
    })
}

fn router(shared: Arc<Shared>) -> Router {
    let blob = format!("{}{{*key}}", branch::wire::BLOB);
    Router::new()
        .route(
            &blob,
            get(blobs::get)
                .head(blobs::head)
                .put(blobs::put)
                .delete(blobs::delete),
        )
        .route(branch::wire::LIST, get(blobs::list))
        .route(branch::wire::SPACE, get(blobs::space))
        .route(wire::LOOKUP, post(index::lookup))
        .route(wire::ADD, post(index::add))
        .route(wire::FORGET, post(index::forget))
        .route(wire::VIEW, get(index::view))
        .layer(DefaultBodyLimit::max(
            usize::try_from(shared.max_body).unwrap_or(usize::MAX),
        ))
        .layer(middleware::from_fn_with_state(shared.clone(), auth::check))
        .layer(middleware::from_fn(log_errors))
        .with_state(shared)
}

/// Every request answered with an error is logged (never its headers: the
/// token is one). A missing blob, an existing one or a range past the end
/// are answers the protocol expects (at debug); other refusals are warned
/// of, failures are errors.
async fn log_errors(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let resp = next.run(req).await;
    let status = resp.status();
    let expected = [
        StatusCode::NOT_FOUND,
        StatusCode::CONFLICT,
        StatusCode::RANGE_NOT_SATISFIABLE,
    ];
    if expected.contains(&status) {
        tracing::debug!(%method, %path, status = status.as_u16(), "chunkd: answered");
    } else if status.is_server_error() {
        tracing::error!(%method, %path, status = status.as_u16(), "chunkd: request failed");
    } else if status.is_client_error() {
        tracing::warn!(%method, %path, status = status.as_u16(), "chunkd: request refused");
    }
    resp
}

impl Running {
    /// Where it listens (the port chosen, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets requests in flight finish, and returns.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            match self.runtime.block_on(served) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "chunkd: the server stopped with an error")
                }
                Err(e) => tracing::error!(error = %e, "chunkd: the server task failed"),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown();
    }
}
