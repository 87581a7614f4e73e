//! `cairn bench cluster-trace`: which etcd cluster each metadata operation
//! asks, and how (a range read or a transaction), with the namespace
//! sharded over simulated clusters. The engine is the real one
//! (`meta_etcd::EtcdMeta` over `sim://` clusters); a gate that lets every
//! request through records them. Two cores cannot run sixteen etcd
//! machines, so `bench/cluster.py` replays these traces on a model of m
//! machines with service times measured on loopback.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use meta::{FileKind, InodeId, MetaStore, NewInode, RenameFlags, Timestamp};
use meta_etcd::sim::{Fault, Gate, Request, SimCluster};
use meta_etcd::{EtcdMeta, EtcdOptions};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::args::ClusterTraceArgs;

/// Records every request: the cluster's index (-1 for the control
/// cluster) and its kind.
#[derive(Default)]
struct Recorder {
    names: Mutex<Vec<String>>,
    seen: Mutex<Vec<(i64, &'static str)>>,
}

impl Gate for Recorder {
    fn pass(&self, cluster: &str, request: Request) -> Fault {
        let index = self
            .names
            .lock()
            .iter()
            .position(|n| n == cluster)
            .map_or(-1, |i| i as i64);
        let kind = match request {
            Request::Range => "range",
            Request::Txn => "txn",
            Request::ReadTxn => "read-txn",
            Request::Grant => "grant",
            Request::Revoke => "revoke",
            Request::KeepAlive => "keep-alive",
        };
        self.seen.lock().push((index, kind));
        Fault::Pass
    }
}

impl Recorder {
    /// The requests since the last take, as JSON pairs.
    fn take(&self) -> Value {
        let seen = std::mem::take(&mut *self.seen.lock());
        Value::Array(seen.into_iter().map(|(c, k)| json!([c, k])).collect())
    }
}

pub fn run(args: &ClusterTraceArgs) -> Result<ExitCode> {
    let recorder = Arc::new(Recorder::default());
    // Names are process-wide; the pid keeps two runs' apart.
    let tag = format!("trace{}", std::process::id());
    let control = SimCluster::new(&format!("{tag}-control"), recorder.clone());
    let data: Vec<Arc<SimCluster>> = (0..args.clusters)
        .map(|i| SimCluster::new(&format!("{tag}-data{i}"), recorder.clone()))
        .collect();
    *recorder.names.lock() = data
        .iter()
        .map(|c| c.endpoint().trim_start_matches("sim://").to_string())
        .collect();
    let opts = EtcdOptions {
        seed: Some(1),
        client_ttl: Duration::from_secs(3600),
        ..EtcdOptions::default()
    };
    let endpoints: Vec<Vec<String>> = data.iter().map(|c| vec![c.endpoint()]).collect();
    meta_etcd::init_cluster(
        &[control.endpoint()],
        &endpoints,
        "trace",
        args.shards,
        0,
        0,
        &opts,
    )
    .context("making the simulated file system")?;
    let m = EtcdMeta::open_cluster(&[control.endpoint()], "trace", opts)
        .context("opening the simulated file system")?;
    recorder.take();

    let now = Timestamp { secs: 1, nanos: 0 };
    let root = InodeId::ROOT;
    let mut phases = serde_json::Map::new();
    let mut trace = |name: &str, ops: Vec<Value>| {
        phases.insert(name.to_string(), Value::Array(ops));
    };

    let mut dirs = Vec::new();
    let mut ops = Vec::new();
    for d in 0..args.dirs {
        dirs.push(
            m.create(
                root,
                format!("d{d}").as_bytes(),
                NewInode::empty(FileKind::Dir),
                now,
            )?
            .id,
        );
        ops.push(recorder.take());
    }
    trace("mkdir", ops);

    let file = |i: u32| (dirs[(i % args.dirs) as usize], format!("f{i}"));
    let mut ops = Vec::new();
    for i in 0..args.files {
        let (dir, name) = file(i);
        m.create(dir, name.as_bytes(), NewInode::empty(FileKind::File), now)?;
        ops.push(recorder.take());
    }
    trace("create", ops);

    let mut ops = Vec::new();
    for i in 0..args.files {
        let (dir, name) = file(i);
        m.lookup(dir, name.as_bytes())?;
        ops.push(recorder.take());
    }
    trace("stat", ops);

    let mut ops = Vec::new();
    for dir in &dirs {
        let entries = m.readdir(*dir, None, usize::MAX)?;
        let inos: Vec<InodeId> = entries.iter().map(|e| e.ino).collect();
        for got in m.get_many(&inos) {
            got?;
        }
        ops.push(recorder.take());
    }
    trace("readdir", ops);

    // Each file renamed in its directory, then into the next directory
    // (another shard, most often on another cluster).
    let keep = |_: InodeId| false;
    let mut within = Vec::new();
    let mut across = Vec::new();
    for i in 0..args.files {
        let (dir, name) = file(i);
        let renamed = format!("r{i}");
        m.rename(
            dir,
            name.as_bytes(),
            dir,
            renamed.as_bytes(),
            RenameFlags::default(),
            &keep,
            now,
        )?;
        within.push(recorder.take());
        let next = dirs[((i + 1) % args.dirs) as usize];
        m.rename(
            dir,
            renamed.as_bytes(),
            next,
            renamed.as_bytes(),
            RenameFlags::default(),
            &keep,
            now,
        )?;
        across.push(recorder.take());
    }
    trace("rename", within);
    trace("rename-across", across);

    crate::ui::out!(
        "{}",
        json!({
            "clusters": args.clusters,
            "shards": args.shards,
            "dirs": args.dirs,
            "files": args.files,
            "phases": phases,
        })
    );
    Ok(ExitCode::SUCCESS)
}
