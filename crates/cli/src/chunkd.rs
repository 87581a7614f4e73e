//! `cairn chunkd`: serve a directory as a branch and a part of the
//! fingerprint index, or manage the range table. What they do is the
//! `chunkd` crate's; this parses, calls and prints.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use chunkd::ranges::RangeTable;
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::args::{ChunkdArgs, ChunkdCluster, ChunkdCommand, RangesCommand};
use crate::ui::out;

pub fn run(args: ChunkdArgs, quiet: bool) -> Result<ExitCode> {
    match args.command {
        Some(ChunkdCommand::Ranges(cmd)) => ranges(cmd),
        None => serve(args, quiet),
    }
}

fn cluster(c: &ChunkdCluster) -> Result<(&[String], &str)> {
    match (&c.etcd[..], c.fsid.as_deref()) {
        ([], _) | (_, None) => refuse!("--etcd URLS and --fsid ID are both needed"),
        (etcd, Some(fsid)) => Ok((etcd, fsid)),
    }
}

fn serve(args: ChunkdArgs, quiet: bool) -> Result<ExitCode> {
    let (Some(dir), Some(listen), Some(token_file)) = (args.dir, args.listen, args.token_file)
    else {
        refuse!("--dir, --listen and --token-file are needed");
    };
    let index = if args.cluster.etcd.is_empty() && args.cluster.fsid.is_none() {
        None
    } else {
        let (etcd, fsid) = cluster(&args.cluster)?;
        let advertise = match args.advertise {
            Some(url) => url,
            None if listen.port() == 0 || listen.ip().is_unspecified() => refuse!(
                "--advertise URL is needed with --etcd when --listen has port 0 or address \
                 0.0.0.0: the range table must name an address clients can reach"
            ),
            None => format!("http://{listen}"),
        };
        Some(chunkd::PartitionConfig {
            etcd: etcd.to_vec(),
            fsid: fsid.to_string(),
            advertise,
            refresh: Duration::from_secs(args.refresh.max(1)),
        })
    };
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let running = chunkd::start(chunkd::Config {
        dir: dir.clone(),
        listen,
        token_file,
        max_body: args.max_body,
        index,
    })
    .with_context(|| format!("cairn chunkd cannot serve {}", dir.display()))?;
    out!("listening on http://{}", running.addr());
    let _ = std::io::stdout().flush();
    if !quiet {
        say!("cairn chunkd: serving {} (Ctrl-C to stop)", dir.display());
    }
    let _ = signals.forever().next();
    running.stop();
    Ok(ExitCode::SUCCESS)
}

/// A line per range: start, end, owner, epoch.
pub(crate) fn print_ranges(ranges: &[chunkd::ranges::Range]) {
    for r in ranges {
        out!(
            "{:016x} {:016x} {} epoch {}",
            r.start,
            r.end,
            r.owner,
            r.epoch
        );
    }
}

fn ranges(cmd: RangesCommand) -> Result<ExitCode> {
    match cmd {
        RangesCommand::Init { cluster: c, owners } => {
            let (etcd, fsid) = cluster(&c)?;
            print_ranges(&chunkd::init_ranges(etcd, fsid, &owners)?.ranges);
        }
        RangesCommand::Assign {
            cluster: c,
            start,
            owner,
        } => {
            let (etcd, fsid) = cluster(&c)?;
            let start = u64::from_str_radix(&start, 16)
                .with_context(|| format!("--start {start:?} is not a hex number"))?;
            print_ranges(&chunkd::assign_range(etcd, fsid, start, &owner)?.ranges);
        }
        RangesCommand::Show {
            cluster: c,
            token_file,
            json,
        } => {
            let (etcd, fsid) = cluster(&c)?;
            let table = chunkd::read_ranges(etcd, fsid)?;
            let owners = match token_file {
                Some(f) => {
                    let token = branch::read_token(&f)
                        .with_context(|| format!("token file {}", f.display()))?;
                    chunkd::owner_status(&table, &token)
                }
                None => Vec::new(),
            };
            show(&table, &owners, json);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn show(table: &RangeTable, owners: &[chunkd::OwnerStatus], json: bool) {
    if json {
        out!("{}", ranges_json(table, owners));
    } else {
        print_table(table, owners);
    }
}

/// The range table and what each owner asked said, as JSON: {"ranges":
/// [...], "owners": [{"owner", "ok", "ranges" | "error"}]}.
pub(crate) fn ranges_json(table: &RangeTable, owners: &[chunkd::OwnerStatus]) -> serde_json::Value {
    let owners: Vec<serde_json::Value> = owners
        .iter()
        .map(|o| match &o.view {
            Ok(held) => serde_json::json!({
                "owner": o.owner,
                "ok": true,
                "ranges": held.iter().map(|(s, e)| serde_json::json!({"start": format!("{s:016x}"), "epoch": e})).collect::<Vec<_>>(),
            }),
            Err(e) => serde_json::json!({"owner": o.owner, "ok": false, "error": e.to_string()}),
        })
        .collect();
    serde_json::json!({"ranges": table.ranges, "owners": owners})
}

/// The range table, a line per range, then a line per owner asked.
pub(crate) fn print_table(table: &RangeTable, owners: &[chunkd::OwnerStatus]) {
    print_ranges(&table.ranges);
    for o in owners {
        match &o.view {
            Ok(held) => {
                let held: Vec<String> = held.iter().map(|(s, e)| format!("{s:016x}@{e}")).collect();
                out!("owner {}: ok, holds {}", o.owner, held.join(" "));
            }
            Err(e) => out!("owner {}: not answering: {e}", o.owner),
        }
    }
}
