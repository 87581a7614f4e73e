//! `cairn cluster ...`: the metadata of a file system over several etcd
//! clusters (issue 18; docs/metadata-on-etcd.md). The operations are
//! `meta_etcd`'s; this parses, calls and prints.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;
use meta_etcd::{parse_cluster, parse_url, ClusterStatus, EtcdMeta, EtcdOptions};

use crate::ui::out;

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Create a file system whose metadata is spread over several etcd
    /// clusters.
    ///
    /// The control cluster (--control) keeps the shard map: --shards
    /// virtual shards (fixed for the file system's life), each owned by
    /// one data cluster (--data, once per cluster) at an epoch. Shards are
    /// placed on the data clusters as the Ring File System places
    /// successors. A directory's entries live in its own shard; a new
    /// directory's shard is a hash of its inode number, a file's is its
    /// parent's. Also makes the root directory, owned by the user running
    /// the command.
    ///
    /// Prints the file system, its shards per data cluster and the URL to
    /// mount it with. With --json: {"fsid", "shards", "clusters":
    /// [{"index", "endpoints", "shards"}], "url"}.
    ///
    /// Exit status: 0 when created; 1 with an error (a file system of
    /// that id exists already, a cluster does not answer). A failed init
    /// leaves no shard map: run it again.
    ///
    /// What to run next: cairn --repo REPO mount --cluster URL DIR, and
    /// cairn cluster status --cluster URL.
    Init {
        /// The control cluster: etcd://HOST:PORT[,HOST:PORT...].
        #[arg(long, value_name = "URL")]
        control: String,
        /// A data cluster: etcd://HOST:PORT[,HOST:PORT...] (its members).
        /// Give --data once per data cluster.
        #[arg(long = "data", value_name = "URL", required = true)]
        data: Vec<String>,
        /// The file system's id in the clusters (letters, digits, - and
        /// _): clusters may hold several file systems.
        #[arg(long, value_name = "ID")]
        fsid: String,
        /// Virtual shards, 1 to 65536; fixed once made.
        #[arg(long, default_value_t = meta_etcd::DEFAULT_SHARDS)]
        shards: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Show the control cluster, every data cluster with the health of
    /// each member, where every shard is, and unfinished intents.
    ///
    /// Prints one line per etcd member (healthy or not, which one leads),
    /// the shards of each data cluster (as ranges, with their epochs when
    /// not 1), the coordinator that leads (`cairn coord`: host, pid and
    /// start time in seconds since 1970, or none) and each unfinished
    /// intent (an operation across clusters a client did not finish:
    /// `settle` or the coordinator rolls it forward or back). With
    /// --json: {"control": [member], "clusters": [{"index", "members":
    /// [member], "shards"}], "shards": [[cluster, epoch], ...] (one per
    /// shard), "intents": [{"id", "state", "owner"}], "mounted":
    /// [{"client", "registered"}], "coordinator": null or {"host", "pid",
    /// "since"}}, a member being {"endpoint", "healthy", "leader",
    /// "error"}. "mounted" lists the clients marked mounted on the
    /// collection board, each running (registered) or GONE (killed while
    /// mounted, or cut off from etcd past its registration's TTL).
    ///
    /// When the file system has a chunkd fingerprint index (`cairn chunkd
    /// ranges init` on the control cluster with the same FSID), its ranges
    /// follow: start, end, owner and epoch of each; with --token-file,
    /// each owner is asked what it holds ("ok, holds ..." or "not
    /// answering: why"). JSON: "chunkd": null, or {"ranges": [...],
    /// "owners": [{"owner", "ok", "ranges" | "error"}]}.
    ///
    /// Exit status: 0 when every member answers, no intent is unfinished,
    /// no mounted client is gone and every chunkd owner asked answers; 1
    /// otherwise (or with an error).
    ///
    /// What to run next: for a member down, restart it (etcd catches it
    /// up); for a client gone, mount it again, or if it is not coming
    /// back, cairn cluster forget-client N; for an unfinished intent, cairn cluster settle (or run cairn
    /// coord); for an owner
    /// down, restart its `cairn chunkd` (meanwhile only dedup is missed)
    /// or give its ranges to another (`cairn chunkd ranges assign`).
    Status {
        /// The file system: etcd://CONTROL_HOST:PORT[,...]/FSID.
        #[arg(long, env = "CAIRN_CLUSTER", value_name = "URL")]
        cluster: String,
        /// The chunkd token file, to ask each index owner for its health.
        #[arg(long, value_name = "PATH")]
        token_file: Option<std::path::PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Add a data cluster to the shard map. It owns no shard until one is
    /// moved to it (cairn cluster move-shard).
    ///
    /// Prints the new cluster's index. Exit status: 0 when added; 1 with
    /// an error (it does not answer, or is in the map already).
    AddEtcd {
        /// The file system: etcd://CONTROL_HOST:PORT[,...]/FSID.
        #[arg(long, env = "CAIRN_CLUSTER", value_name = "URL")]
        cluster: String,
        /// The new data cluster: etcd://HOST:PORT[,HOST:PORT...].
        url: String,
    },

    /// Move a shard to another data cluster while clients use it.
    ///
    /// Fences the shard in its cluster (clients' transactions on it fail
    /// and wait), copies its keys, flips the shard map to the target at a
    /// new epoch, and deletes the keys in the source. Clients wait at
    /// most for the copy. A move that failed part-way leaves the shard
    /// fenced: run it again.
    ///
    /// Exit status: 0 when moved (or already there); 1 with an error.
    MoveShard {
        /// The file system: etcd://CONTROL_HOST:PORT[,...]/FSID.
        #[arg(long, env = "CAIRN_CLUSTER", value_name = "URL")]
        cluster: String,
        /// The shard (0 to shards-1; cairn cluster status lists them).
        shard: u32,
        /// The index of the data cluster to move it to.
        to: usize,
    },

    /// Forget a client killed while mounted, or whose machine is gone for
    /// good, so that garbage collections stop waiting for it.
    ///
    /// Every mounted client marks itself on the file system's collection
    /// board, and a collection deletes nothing until each marked client
    /// answered (docs/cluster.md, "Collection across clients"): a client
    /// killed while mounted leaves its mark, and every gc gives up,
    /// naming it, until it is mounted again. This takes the mark away,
    /// but only once the client's registration in etcd has lapsed (60 s
    /// after it last reached etcd), in the same transaction that checks
    /// so: a live client is never forgotten. A client forgotten while it
    /// was only cut off finds out before it writes again, and then
    /// refuses every write (EIO, and a log line) until it is unmounted
    /// and mounted again; what it had written but not yet recorded may be
    /// lost, so prefer mounting the client again when it can be.
    ///
    /// Exit status: 0 when forgotten, or when CLIENT was not marked
    /// mounted; 1 when it is alive, or with an error.
    #[command(group(clap::ArgGroup::new("fs").required(true).args(["cluster", "meta"])))]
    ForgetClient {
        /// The file system, when over several etcd clusters:
        /// etcd://CONTROL_HOST:PORT[,...]/FSID.
        #[arg(long, env = "CAIRN_CLUSTER", value_name = "URL")]
        cluster: Option<String>,
        /// The file system, when in one etcd cluster (as given to `cairn
        /// mount --meta`): etcd://HOST:PORT[,...]/FSID.
        #[arg(long, value_name = "URL", conflicts_with = "cluster")]
        meta: Option<String>,
        /// The client's number (`cairn init --join ... --client N`).
        client: u64,
    },

    /// Settle the unfinished intents: roll committed ones forward, and
    /// abort those whose client is gone. Clients do this themselves when
    /// they meet one, and a running `cairn coord` does it for every one;
    /// this is for a file system that has neither.
    ///
    /// Prints how many were settled. Exit status: 0; 1 with an error.
    Settle {
        /// The file system: etcd://CONTROL_HOST:PORT[,...]/FSID.
        #[arg(long, env = "CAIRN_CLUSTER", value_name = "URL")]
        cluster: String,
    },
}

pub fn run(cmd: ClusterCommand) -> Result<ExitCode> {
    match cmd {
        ClusterCommand::Init {
            control,
            data,
            fsid,
            shards,
            json,
        } => init(&control, &data, &fsid, shards, json),
        ClusterCommand::Status {
            cluster,
            token_file,
            json,
        } => status(&cluster, token_file.as_deref(), json),
        ClusterCommand::AddEtcd { cluster, url } => {
            let m = open(&cluster)?;
            let index = m.add_cluster(&parse_cluster(&url)?)?;
            out!("added data cluster {index}: {url} (it owns no shard yet)");
            Ok(ExitCode::SUCCESS)
        }
        ClusterCommand::MoveShard { cluster, shard, to } => {
            let m = open(&cluster)?;
            m.move_shard(shard, to)
                .with_context(|| format!("moving shard {shard} to data cluster {to}"))?;
            out!("shard {shard} is on data cluster {to}");
            Ok(ExitCode::SUCCESS)
        }
        ClusterCommand::ForgetClient {
            cluster,
            meta,
            client,
        } => {
            let m = match (&cluster, &meta) {
                (Some(url), _) => open(url)?,
                (None, Some(url)) => EtcdMeta::open_url(url, 0, 0)
                    .with_context(|| format!("opening the file system at {url}"))?,
                (None, None) => unreachable!("clap requires one of them"),
            };
            if service::forget_client(&m, client)? {
                out!("client {client} forgotten: collections no longer wait for it");
            } else {
                out!("client {client} was not marked mounted: nothing to forget");
            }
            Ok(ExitCode::SUCCESS)
        }
        ClusterCommand::Settle { cluster } => {
            let n = open(&cluster)?.settle_intents()?;
            out!("{n} intents settled");
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn open(url: &str) -> Result<EtcdMeta> {
    EtcdMeta::open_cluster_url(url).with_context(|| format!("opening the file system at {url}"))
}

fn init(control: &str, data: &[String], fsid: &str, shards: u32, json: bool) -> Result<ExitCode> {
    let control_eps = parse_cluster(control)?;
    let data_eps = data
        .iter()
        .map(|d| parse_cluster(d))
        .collect::<Result<Vec<_>, _>>()?;
    // SAFETY: plain getters without preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let map = meta_etcd::init_cluster(
        &control_eps,
        &data_eps,
        fsid,
        shards,
        uid,
        gid,
        &EtcdOptions::default(),
    )?;
    let hosts = control_eps
        .iter()
        .map(|e| e.trim_start_matches("http://"))
        .collect::<Vec<_>>()
        .join(",");
    let url = format!("etcd://{hosts}/{fsid}");
    let per = |i: usize| map.shards.iter().filter(|s| usize::from(s.0) == i).count();
    if json {
        let clusters: Vec<_> = map
            .clusters
            .iter()
            .enumerate()
            .map(|(i, eps)| serde_json::json!({"index": i, "endpoints": eps, "shards": per(i)}))
            .collect();
        out!(
            "{}",
            serde_json::json!({"fsid": fsid, "shards": shards, "clusters": clusters, "url": url})
        );
    } else {
        out!(
            "created file system {fsid}: {shards} shards over {} data clusters",
            map.clusters.len()
        );
        for (i, eps) in map.clusters.iter().enumerate() {
            out!("  data cluster {i}: {} ({} shards)", eps.join(","), per(i));
        }
        out!("mount it with: cairn --repo REPO mount --cluster {url} DIR");
    }
    Ok(ExitCode::SUCCESS)
}

fn status(url: &str, token_file: Option<&std::path::Path>, json: bool) -> Result<ExitCode> {
    let (control, fsid) = parse_url(url)?;
    let m = open(url)?;
    let st = m.cluster_status(&control)?;
    let index = match chunkd::read_ranges(&control, &fsid) {
        Ok(table) => {
            let owners = match token_file {
                Some(f) => {
                    let token = branch::read_token(f)
                        .with_context(|| format!("token file {}", f.display()))?;
                    chunkd::owner_status(&table, &token)
                }
                None => Vec::new(),
            };
            Some((table, owners))
        }
        Err(chunkd::ranges::RangesError::Missing { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let healthy = st.control.iter().all(|m| m.healthy)
        && st
            .clusters
            .iter()
            .all(|c| c.members.iter().all(|m| m.healthy))
        && index
            .iter()
            .all(|(_, owners)| owners.iter().all(|o| o.view.is_ok()));
    if json {
        let mut v = serde_json::to_value(&st)?;
        v["chunkd"] = match &index {
            Some((table, owners)) => crate::chunkd::ranges_json(table, owners),
            None => serde_json::Value::Null,
        };
        out!("{v}");
    } else {
        print_status(&st);
        match &index {
            Some((table, owners)) => {
                out!("chunkd fingerprint index");
                crate::chunkd::print_table(table, owners);
            }
            None => out!("no chunkd fingerprint index"),
        }
    }
    let gone = st.mounted.iter().any(|c| !c.registered);
    Ok(if healthy && st.intents.is_empty() && !gone {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn member_line(m: &meta_etcd::MemberHealth) -> String {
    match (&m.error, m.healthy, m.leader) {
        (Some(e), _, _) => format!("    {}  DOWN: {e}", m.endpoint),
        (None, true, true) => format!("    {}  healthy, leader", m.endpoint),
        (None, _, _) => format!("    {}  healthy", m.endpoint),
    }
}

fn print_status(st: &ClusterStatus) {
    out!("control cluster");
    for m in &st.control {
        out!("{}", member_line(m));
    }
    for c in &st.clusters {
        out!("data cluster {} ({} shards)", c.index, c.shards);
        for m in &c.members {
            out!("{}", member_line(m));
        }
        // Its shards as ranges of neighbours.
        let mut ranges = Vec::new();
        let mut s = 0;
        while s < st.shards.len() {
            if usize::from(st.shards[s].0) != c.index {
                s += 1;
                continue;
            }
            let lo = s;
            while s < st.shards.len() && usize::from(st.shards[s].0) == c.index {
                s += 1;
            }
            ranges.push(if s - lo == 1 {
                lo.to_string()
            } else {
                format!("{lo}-{}", s - 1)
            });
        }
        if !ranges.is_empty() {
            out!("    shards {}", ranges.join(" "));
        }
        let moved: Vec<String> = st
            .shards
            .iter()
            .enumerate()
            .filter(|(_, (o, e))| usize::from(*o) == c.index && *e > 1)
            .map(|(s, (_, e))| format!("{s}@{e}"))
            .collect();
        if !moved.is_empty() {
            out!("    epochs {}", moved.join(" "));
        }
    }
    match &st.coordinator {
        Some(l) => out!("coordinator: {} pid {} (since {})", l.host, l.pid, l.since),
        None => out!("coordinator: none (clients settle the intents they meet)"),
    }
    if st.mounted.is_empty() {
        out!("no client mounted");
    } else {
        out!("clients mounted");
        for c in &st.mounted {
            if c.registered {
                out!("    client {}  running", c.client);
            } else {
                out!(
                    "    client {}  GONE: not registered; collections wait for it (mount it again, or `cairn cluster forget-client {}`)",
                    c.client,
                    c.client
                );
            }
        }
    }
    if st.intents.is_empty() {
        out!("no unfinished intents");
    } else {
        out!("unfinished intents (run `cairn cluster settle`):");
        for i in &st.intents {
            out!("    {} {} (client {})", i.id, i.state, i.owner);
        }
    }
}
