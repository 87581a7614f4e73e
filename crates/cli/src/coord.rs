//! `cairn coord`: the leader-elected coordinator of a file system over
//! several etcd clusters. What it does is `meta_etcd::Coordinator`'s; this
//! opens the file system, logs its events and stops it on a signal.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use meta_etcd::{CoordEvent, CoordOptions, Coordinator, EtcdMeta};
use signal_hook::consts::{SIGINT, SIGTERM};

pub fn run(url: &str, interval: u64, ttl: u64, quiet: bool) -> Result<ExitCode> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let store = EtcdMeta::open_cluster_url(url)
        .with_context(|| format!("opening the file system at {url}"))?;
    let coord = Coordinator::new(
        store,
        CoordOptions {
            interval: Duration::from_secs(interval),
            ttl: Duration::from_secs(ttl),
        },
    )?;
    if !quiet {
        say!("cairn coord: coordinating {url} (Ctrl-C to stop)");
    }
    let (stop, stopped) = std::sync::mpsc::sync_channel(1);
    let worker = std::thread::Builder::new()
        .name("coord".into())
        .spawn(move || coord.run(&stopped, |e| log(e, quiet)))?;
    let _ = signals.forever().next();
    let _ = stop.send(());
    // It resigns (revokes its lease) before it returns.
    let _ = worker.join();
    if !quiet {
        say!("cairn coord: stopped");
    }
    Ok(ExitCode::SUCCESS)
}

/// Logs a coordinator event, and says it on stderr unless `quiet`.
fn log(e: CoordEvent, quiet: bool) {
    match &e {
        CoordEvent::Settled(n) => {
            tracing::info!(intents = n, "the coordinator settled unfinished intents")
        }
        CoordEvent::Failed { error, times } => {
            tracing::warn!(%error, times, "a coordinator request failed")
        }
        _ => {}
    }
    if quiet {
        return;
    }
    match e {
        CoordEvent::Leading => say!("cairn coord: leading (pid {})", std::process::id()),
        CoordEvent::Following(l) => {
            say!(
                "cairn coord: following the leader on {} (pid {})",
                l.host,
                l.pid
            )
        }
        CoordEvent::Lost => say!("cairn coord: no longer leading"),
        CoordEvent::Settled(n) => say!("cairn coord: settled {n} intents"),
        CoordEvent::Failed { error, times } => {
            say!("cairn coord: failed ({times} in a row): {error}")
        }
    }
}
