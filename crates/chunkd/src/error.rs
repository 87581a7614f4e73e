use std::net::SocketAddr;
use std::path::PathBuf;

/// Why a chunkd could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum ChunkdError {
    #[error("token file {}: {source}", path.display())]
    Token {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the token in {} is {len} bytes; at least {min} are needed", path.display())]
    WeakToken {
        path: PathBuf,
        len: usize,
        min: usize,
    },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the server's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Branch(#[from] branch::BranchError),
    #[error(transparent)]
    Index(#[from] crate::index::IndexError),
    #[error(transparent)]
    Ranges(#[from] crate::ranges::RangesError),
}
