//! `cairn bench fs`, `ingest`, `gc`, `random`, `writes`, `gateway` and `cluster`: the benchmark scripts of `bench/`
//! (Python, standard library only), built into the binary so an installed
//! `cairn` runs them without a source tree. They drive real tools (restic,
//! borg, bindfs, postmark, the mount) from outside, which is why they are
//! scripts; this runs them against the binary it is, passing every
//! argument through.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

/// (name, source); `ingest.py` and `common.py` also hold the helpers the
/// others import.
const SCRIPTS: [(&str, &str); 8] = [
    ("ingest.py", include_str!("../../../../bench/ingest.py")),
    ("common.py", include_str!("../../../../bench/common.py")),
    ("fs.py", include_str!("../../../../bench/fs.py")),
    ("gc.py", include_str!("../../../../bench/gc.py")),
    (
        "random_io.py",
        include_str!("../../../../bench/random_io.py"),
    ),
    ("gateway.py", include_str!("../../../../bench/gateway.py")),
    ("writes.py", include_str!("../../../../bench/writes.py")),
    ("cluster.py", include_str!("../../../../bench/cluster.py")),
];

/// Runs `bench/<script>` with `--cairn <this binary>` and `args`.
pub fn run(script: &str, args: &[String]) -> Result<ExitCode> {
    let dir = tempfile::Builder::new()
        .prefix("cairn-bench-")
        .tempdir()
        .context("cannot make a directory for the benchmark script")?;
    for (name, text) in SCRIPTS {
        let path = dir.path().join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let exe = std::env::current_exe().context("cannot find the cairn binary")?;
    let status = command(&dir.path().join(script), &exe, args)
        .status()
        .context("cannot run python3 (install it: apt-get install -y python3)")?;
    Ok(match status.code() {
        Some(code) => ExitCode::from(code.clamp(0, 255) as u8),
        None => ExitCode::FAILURE,
    })
}

fn command(script: &Path, exe: &Path, args: &[String]) -> Command {
    let mut c = Command::new("python3");
    c.arg(script);
    if !args
        .iter()
        .any(|a| a == "--cairn" || a.starts_with("--cairn="))
    {
        c.arg("--cairn").arg(exe);
    }
    c.args(args);
    c
}
