//! Measurements the benchmark scripts under `bench/` call, benchmarks that
//! run whole inside cairn (`bench redundancy`), and those scripts themselves
//! (`bench fs`, `ingest`, `gc`, `random`, `gateway`, `cluster`; `cluster`
//! replays what `bench cluster-trace` records).

use std::fs::File;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use cas::RepoKey;
use chunking::{Chunker, ChunkerParams};
use rayon::prelude::*;

use crate::args::BenchCommand;

mod cluster_trace;
mod redundancy;
mod scripts;

pub fn run(cmd: BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Hash { file } => {
            let f = File::open(&file).with_context(|| format!("cannot open {}", file.display()))?;
            let key = RepoKey::generate();
            let started = Instant::now();
            let mut bytes = 0u64;
            for batch in Chunker::new(f, ChunkerParams::default(), 4 << 20) {
                let batch = batch.with_context(|| format!("reading {}", file.display()))?;
                bytes += batch.len_bytes() as u64;
                let ids: Vec<_> = batch.chunks.par_iter().map(|c| key.chunk_id(c)).collect();
                std::hint::black_box(ids);
            }
            let seconds = started.elapsed().as_secs_f64();
            crate::ui::out!(
                "{}",
                serde_json::json!({"bytes": bytes, "seconds": seconds})
            );
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Redundancy(args) => redundancy::run(args),
        BenchCommand::Fs(a) => scripts::run("fs.py", &a.args),
        BenchCommand::Ingest(a) => scripts::run("ingest.py", &a.args),
        BenchCommand::Gc(a) => scripts::run("gc.py", &a.args),
        BenchCommand::Random(a) => scripts::run("random_io.py", &a.args),
        BenchCommand::Writes(a) => scripts::run("writes.py", &a.args),
        BenchCommand::Gateway(a) => scripts::run("gateway.py", &a.args),
        BenchCommand::Cluster(a) => scripts::run("cluster.py", &a.args),
        BenchCommand::ClusterTrace(a) => cluster_trace::run(&a),
    }
}
