//! `cairn gateway` and `cairn access-key`: the S3 gateway alone, and its
//! keys. What they do is the `gateway` crate's; this prints.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use repo::Repo;
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::args::{AccessKeyCommand, BucketCommand, GatewayArgs, Switch};
use crate::ui::out;

fn scope(info: &gateway::keys::KeyInfo) -> String {
    let access = if info.read_only {
        "read-only"
    } else {
        "read-write"
    };
    if info.buckets.is_empty() {
        format!("{access}, every bucket")
    } else {
        format!("{access}, buckets {}", info.buckets.join(", "))
    }
}

/// What `access-key list --json` prints of a key (never its secret).
fn key_json(info: &gateway::keys::KeyInfo) -> serde_json::Value {
    serde_json::json!({
        "id": info.id,
        "read_only": info.read_only,
        "buckets": info.buckets,
    })
}

/// A new key and its secret, the one time it is shown, as lines for
/// ~/.aws/credentials.
fn print_new_key(key: &gateway::keys::NewKey, endpoint: Option<SocketAddr>) {
    out!(
        "cairn: access key {} ({}); its secret is shown only now.",
        key.info.id,
        scope(&key.info)
    );
    out!("Add to ~/.aws/credentials:");
    out!("{}", gateway::keys::credentials(key).trim_end());
    if let Some(addr) = endpoint {
        out!("then: aws --profile cairn --endpoint-url http://{addr} s3 ls");
    }
}

/// The figures `/metrics` shows: the file system's and the gateway's,
/// the daemon's jobs when given, and the mount's when `fuse` is given one (registered here: the
/// registry is frozen once the gateway serves it).
pub fn metrics(
    fs: &fs::Fs,
    jobs: Option<&std::sync::Arc<service::jobs::Jobs>>,
    fuse: Option<&mut Option<std::sync::Arc<fuse::FuseMetrics>>>,
) -> gateway::Metrics {
    let mut registry = prometheus_client::registry::Registry::default();
    register(&mut registry, fs, jobs, fuse);
    let requests = gateway::RequestFigures::register(&mut registry);
    gateway::Metrics::new(std::sync::Arc::new(registry), requests)
}

/// The figures of a mount without the gateway (`mount --metrics`): the
/// file system's, the daemon's jobs and commands, and the mount's, whose
/// recorder goes into `fuse`.
pub fn registry(
    fs: &fs::Fs,
    jobs: &std::sync::Arc<service::jobs::Jobs>,
    fuse: &mut Option<std::sync::Arc<fuse::FuseMetrics>>,
) -> std::sync::Arc<prometheus_client::registry::Registry> {
    let mut registry = prometheus_client::registry::Registry::default();
    register(&mut registry, fs, Some(jobs), Some(fuse));
    std::sync::Arc::new(registry)
}

fn register(
    registry: &mut prometheus_client::registry::Registry,
    fs: &fs::Fs,
    jobs: Option<&std::sync::Arc<service::jobs::Jobs>>,
    fuse: Option<&mut Option<std::sync::Arc<fuse::FuseMetrics>>>,
) {
    fs.register_metrics(registry);
    if let Some(jobs) = jobs {
        jobs.register_metrics(registry);
    }
    if let Some(slot) = fuse {
        *slot = Some(fuse::FuseMetrics::new(registry));
    }
}

/// Starts the gateway on `fs` and says where; on the first start it makes
/// an access key and prints it. The key is made once the gateway listens:
/// a start that fails (its address in use) leaves no key whose secret
/// nobody saw.
pub fn start(
    fs: std::sync::Arc<fs::Fs>,
    root: &Path,
    args: &GatewayArgs,
    metrics: gateway::Metrics,
    console: Option<std::sync::Arc<dyn gateway::console::Console>>,
    quiet: bool,
) -> Result<gateway::Running> {
    let mut opts = gateway::Options::new(args.listen);
    opts.limits = gateway::Limits {
        max_put: args.max_put_size,
        max_object: args.max_object_size,
    };
    opts.abandoned_after = std::time::Duration::from_secs(args.abandoned_after);
    opts.metrics = Some(metrics);
    let dashboard = console.is_some();
    opts.console = console;
    let running = gateway::start(fs, root, &opts)?;
    let first = gateway::keys::ensure_one(root)?;
    // The first key is printed on a terminal; a service's output goes to a
    // journal or a log file that others may read, so there it is written
    // to a file only its owner reads, before anything is said.
    let saved = match &first {
        Some(key) if !std::io::stdout().is_terminal() => {
            Some(gateway::keys::save_first(root, key)?)
        }
        _ => None,
    };
    let addr = running.addr();
    if !quiet {
        say!("cairn: S3 gateway at http://{addr}");
        say!("cairn: metrics at http://{addr}/metrics");
        if dashboard {
            say!("cairn: dashboard at http://{addr}/-/");
        }
    }
    match (first, saved) {
        (Some(key), Some(file)) => out!(
            "cairn: access key {} ({}); its secret is in {} (mode 0600), as lines for ~/.aws/credentials",
            key.info.id,
            scope(&key.info),
            file.display()
        ),
        (Some(key), None) => print_new_key(&key, Some(addr)),
        (None, _) => {}
    }
    Ok(running)
}

pub fn gateway(root: &Path, args: &GatewayArgs, quiet: bool) -> Result<ExitCode> {
    let repo = crate::ops::open(root, quiet)?;
    let fs = service::open_fs(&repo)?;
    crate::alloc::govern(repo.config.memory_limit(), std::sync::Arc::downgrade(&fs));
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let figures = metrics(&fs, None, None);
    let running = start(fs.clone(), &repo.root, args, figures, None, quiet)?;
    if !quiet {
        say!("cairn: serving {} (Ctrl-C to stop)", repo.root.display());
    }
    let _ = signals.forever().next();
    running.stop();
    if let Err(e) = fs.shutdown() {
        tracing::error!(error = %e, "making written data durable when the gateway stopped failed");
        return Err(anyhow::Error::new(e).context("making written data durable"));
    }
    tracing::info!("the S3 gateway stopped");
    if !quiet {
        say!("cairn: gateway stopped");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn bucket(root: &Path, cmd: BucketCommand) -> Result<ExitCode> {
    if !Repo::exists(root) {
        refuse!(
            "no repository at {} (create one with `cairn init` or `cairn serve`)",
            root.display()
        );
    }
    match cmd {
        BucketCommand::Public { name, state } => {
            let on = state == Switch::On;
            let changed = gateway::keys::set_public(root, &name, on)?;
            let now = if on { "public-read" } else { "not public" };
            let was = if changed { "is now" } else { "was already" };
            out!("cairn: bucket {name} {was} {now}");
        }
        BucketCommand::ListPublic { json } => {
            let buckets = gateway::keys::public(root)?;
            if json {
                out!("{}", serde_json::to_string(&buckets)?);
            }
            for b in buckets.iter().filter(|_| !json) {
                out!("{b}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn access_key(root: &Path, cmd: AccessKeyCommand) -> Result<ExitCode> {
    if !Repo::exists(root) {
        refuse!(
            "no repository at {} (create one with `cairn init` or `cairn serve`)",
            root.display()
        );
    }
    match cmd {
        AccessKeyCommand::Create {
            read_only,
            buckets,
            json,
        } => {
            let key = gateway::keys::create(root, read_only, buckets)?;
            if json {
                let mut v = key_json(&key.info);
                v["secret"] = key.secret.to_string().into();
                out!("{v}");
            } else {
                print_new_key(&key, None);
            }
        }
        AccessKeyCommand::List { json } => {
            let keys = gateway::keys::list(root)?;
            if json {
                let all: Vec<serde_json::Value> = keys.iter().map(key_json).collect();
                out!("{}", serde_json::Value::from(all));
            }
            for k in keys.iter().filter(|_| !json) {
                out!("{}  {}", k.id, scope(k));
            }
        }
        AccessKeyCommand::Revoke { id } => {
            gateway::keys::revoke(root, &id)?;
            out!("cairn: revoked access key {id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
