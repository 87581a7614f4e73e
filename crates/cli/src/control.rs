//! The control socket: how a command reaches a mounted file system.
//!
//! While `cairn mount`/`serve` runs, it owns the repository's metadata and
//! index files (they cannot be opened twice), so commands such as `stats`,
//! `snapshot` or `gc` are sent to it over `<repo>/run/control.sock` instead.
//! The protocol is JSON lines: the client sends one [`Request`]; the server
//! answers with any number of `{"progress": ...}` lines and then one
//! `{"ok": result}` or `{"error": "message"}` line.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ops::{self, Progress, Request, Target};

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

/// Starts answering requests for the mounted file system `fs`.
pub fn serve(repo: &Path, fs: Arc<fs::Fs>, mountpoint: PathBuf) -> Result<Server> {
    let path = socket_path(repo);
    let dir = path.parent().expect("the socket is in run/");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // A socket file left by a daemon that was killed answers nobody.
    if path.exists() && UnixStream::connect(&path).is_err() {
        std::fs::remove_file(&path).ok();
    }
    let root = repo.to_path_buf();
    let listener = UnixListener::bind(&path)
        .with_context(|| format!("cannot listen on the control socket {}", path.display()))?;
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let fs = fs.clone();
                let mountpoint = mountpoint.clone();
                let root = root.clone();
                std::thread::spawn(move || {
                    let target = Target {
                        fs: &fs,
                        root: &root,
                        mountpoint: Some(&mountpoint),
                    };
                    let _ = answer(conn, &target);
                });
            }
        })
        .context("cannot start the control thread")?;
    Ok(Server { path })
}

fn answer(conn: UnixStream, target: &Target<'_>) -> Result<()> {
    let mut line = String::new();
    BufReader::new(&conn).read_line(&mut line)?;
    let out = std::sync::Mutex::new(conn.try_clone()?);
    let send = |r: &Reply| {
        let mut w = out.lock().unwrap();
        let _ = serde_json::to_writer(&mut *w, r).map(|_| w.write_all(b"\n"));
    };
    let reply = match serde_json::from_str::<Request>(&line) {
        Err(e) => Reply::Error(format!("malformed request: {e}")),
        Ok(req) => match ops::exec(target, &req, &|p| send(&Reply::Progress(p))) {
            Ok(v) => Reply::Ok(v),
            Err(e) => Reply::Error(format!("{e:#}")),
        },
    };
    send(&reply);
    Ok(())
}

/// Sends `req` to the daemon serving `repo`, if one runs: `None` when no
/// daemon answers (the caller then opens the repository itself).
pub fn call(repo: &Path, req: &Request, progress: &dyn Fn(Progress)) -> Result<Option<Value>> {
    let path = socket_path(repo);
    let Ok(mut conn) = UnixStream::connect(&path) else {
        return Ok(None);
    };
    serde_json::to_writer(&mut conn, req)?;
    conn.write_all(b"\n")?;
    for line in BufReader::new(conn).lines() {
        let line = line.context("reading the daemon's answer")?;
        match serde_json::from_str::<Reply>(&line)
            .with_context(|| format!("malformed answer from the daemon: {line}"))?
        {
            Reply::Progress(p) => progress(p),
            Reply::Ok(v) => return Ok(Some(v)),
            Reply::Error(e) => bail!("{e}"),
        }
    }
    bail!("the daemon closed the control socket without an answer")
}
