//! The "put" section: what a user sees. The benchmark's data, as one file,
//! stored with `cairn put` (a separate process, the real binary) into a
//! fresh repository whose default rule is each policy over twelve local
//! branches: chunking, hashing, compression attempts, containers, then the
//! redundancy layer, and the final syncs. The layer-only rows of the
//! "write" section isolate the coding; these show its share of a store.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::{median, new_row, Pass, Row, BRANCHES, POLICIES, WRITE_TARGET};

/// Runs `rounds` puts per policy, the policies alternating within a round;
/// returns one row per policy (the median).
pub(super) fn section(scratch: &Path, data: &[Vec<u8>], rounds: usize) -> Result<Vec<Row>> {
    let source = scratch.join("put-source.bin");
    let mut f =
        fs::File::create(&source).with_context(|| format!("cannot create {}", source.display()))?;
    for part in data {
        f.write_all(part)?;
    }
    f.sync_all()?;
    drop(f);
    let bytes: u64 = data.iter().map(|d| d.len() as u64).sum();
    let mut passes: Vec<Vec<Pass>> = POLICIES.iter().map(|_| Vec::new()).collect();
    for round in 1..=rounds {
        for (text, all) in POLICIES.iter().zip(&mut passes) {
            say!("cairn put under {text} (round {round} of {rounds})");
            all.push(put_once(scratch, &source, text, bytes)?);
        }
    }
    fs::remove_file(&source).ok();
    let mut rows = Vec::new();
    let mut base = None;
    for (text, mut all) in POLICIES.into_iter().zip(passes) {
        let (pass, spread) = median(&mut all);
        let mut row = new_row("put", text.to_string(), pass);
        let single = *base.get_or_insert(pass.mb_per_s());
        row.ratio = Some(pass.mb_per_s() / single);
        row.vs = Some("put single".into());
        if text.starts_with("rs:") {
            row.target = Some(format!(">= {WRITE_TARGET:.2}x single"));
            row.met = row.ratio.map(|r| r >= WRITE_TARGET);
        }
        row.note = format!("`cairn put` of the data as one file, end to end; {spread}");
        rows.push(row);
    }
    Ok(rows)
}

/// One `cairn put` of `source` into a fresh repository under `policy`.
fn put_once(scratch: &Path, source: &Path, policy: &str, bytes: u64) -> Result<Pass> {
    let repo = scratch.join(format!("put-{}", policy.replace([':', '+'], "-")));
    let exe = std::env::current_exe().context("cannot find the cairn binary")?;
    let cairn = |args: &[&str]| -> Result<()> {
        let out = Command::new(&exe)
            .arg("--repo")
            .arg(&repo)
            .arg("-q")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run {}", exe.display()))?;
        if !out.status.success() {
            bail!(
                "cairn {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    };
    cairn(&["init"])?;
    let mut config = String::new();
    for i in 0..BRANCHES {
        config += &format!(
            "\n[[branch]]\nname = \"b{i:02}\"\nkind = \"local\"\npath = \"br/b{i:02}\"\nlabels = [\"all\"]\n"
        );
    }
    config += &format!("\n[default_rule]\npolicy = \"{policy}\"\nbranches = [\"all\"]\n");
    fs::OpenOptions::new()
        .append(true)
        .open(repo.join("cairn.toml"))?
        .write_all(config.as_bytes())?;
    // The source is page-cached: it was just written or read.
    let t = Instant::now();
    cairn(&["put", "--name", "bench", &source.to_string_lossy()])?;
    let seconds = t.elapsed().as_secs_f64();
    fs::remove_dir_all(&repo).with_context(|| format!("cannot remove {}", repo.display()))?;
    Ok(Pass {
        seconds,
        bytes,
        warm: false,
    })
}
