//! The machine under test: a file system over a store and a metadata engine
//! whose every byte of storage goes through one power switch.

pub mod model;
pub mod workload;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use branch::crash::{CrashBranch, CrashFile, Outcome, Power};
use branch::{Branch, LocalDir};
use cas::{RepoKey, Store, StoreSettings};
use chunking::ChunkerParams;
use fs::{Fs, FsSettings};
use meta::RedbMeta;

/// An error of any layer, kept as it is.
pub type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// Why a crash case failed.
#[derive(Debug, thiserror::Error)]
pub enum Broken {
    /// An operation the case needed failed.
    #[error("{what}: {source}")]
    Failed {
        what: String,
        #[source]
        source: AnyError,
    },
    /// What the machine holds is not what the model allows.
    #[error("{0}")]
    Differs(String),
    /// A failure, with where it happened.
    #[error("{context}: {inner}")]
    In { context: String, inner: Box<Broken> },
    /// A failure, with what led to it.
    #[error("{inner}\n{history}")]
    After { inner: Box<Broken>, history: String },
    /// The case that failed, and how.
    #[error("{case}\n{inner}")]
    Case { case: String, inner: Box<Broken> },
    #[error("{case}: panicked: {message}")]
    Panicked { case: String, message: String },
}

impl Broken {
    /// The failure of `what`, for `map_err`.
    pub fn failed<E: Into<AnyError>>(what: impl Into<String>) -> impl FnOnce(E) -> Broken {
        let what = what.into();
        move |e| Broken::Failed {
            what,
            source: e.into(),
        }
    }

    /// This failure, seen from `context`.
    pub fn within(self, context: impl Into<String>) -> Broken {
        Broken::In {
            context: context.into(),
            inner: Box::new(self),
        }
    }
}

/// Small chunks, regions and containers, so small files make many of each.
fn store_settings() -> StoreSettings {
    StoreSettings {
        container_size: 64 << 10,
        region_size: 16 << 10,
        memory_budget: 1 << 20,
        ..StoreSettings::default()
    }
}

fn params() -> ChunkerParams {
    ChunkerParams::ContentDefined {
        min: 1024,
        avg: 4096,
        max: 16 << 10,
    }
}

/// No background commits or versions: only the workload's syncs make
/// anything durable, so the model knows what must survive. A low dirty
/// limit per file makes large writes go behind; few versions are kept, so
/// old ones are dropped.
fn fs_settings() -> FsSettings {
    FsSettings {
        file_dirty_max: 64 << 10,
        total_dirty_max: 1 << 20,
        readahead: 64 << 10,
        cache_bytes: 1 << 20,
        commit_interval: Duration::from_secs(3600),
        version_interval: Duration::ZERO,
        retention: fs::retention::Retention {
            last: 3,
            minutes: 0,
            hourly: 0,
            daily: 0,
        },
        ..FsSettings::default()
    }
}

fn key() -> RepoKey {
    RepoKey::from_hex(&"5a".repeat(32)).expect("a valid key")
}

/// The storage of one machine, as it is on its disks, and the switch its
/// power goes through.
pub struct Disks {
    pub power: Power,
    dir: PathBuf,
    tearing: bool,
    pub branch: Arc<CrashBranch>,
    index: CrashFile,
    roots: CrashFile,
    meta: CrashFile,
}

/// A machine that is up.
pub struct Running {
    pub meta: Arc<RedbMeta>,
    pub fs: Fs,
}

impl Disks {
    fn assemble(
        dir: &Path,
        power: Power,
        tearing: bool,
        [index, roots, meta]: [CrashFile; 3],
    ) -> Disks {
        let (local, _) = LocalDir::open("local", dir).expect("open the branch's directory");
        let mut branch = CrashBranch::new(Arc::new(local), &power);
        if tearing {
            branch = branch.tearing();
        }
        Disks {
            power,
            dir: dir.to_path_buf(),
            tearing,
            branch: Arc::new(branch),
            index,
            roots,
            meta,
        }
    }

    /// A new, empty machine, set up and shut down cleanly.
    pub fn new(dir: &Path) -> Disks {
        let power = Power::on();
        let files = ["index.redb", "roots.redb", "fs.redb"].map(|n| CrashFile::new(n, &power));
        let disks = Self::assemble(dir, power, false, files);
        let running = disks.boot().unwrap_or_else(|e| panic!("{e}"));
        running.fs.shutdown().expect("a clean shutdown");
        disks
    }

    /// A copy of these disks (which hold no blobs yet) under `dir`, as
    /// after a clean shutdown; with `tearing`, puts cut short may tear.
    pub fn copy(&self, dir: &Path, tearing: bool) -> Disks {
        assert!(
            self.branch
                .list("")
                .expect("list the clean branch")
                .is_empty(),
            "the clean disks hold no blobs"
        );
        let power = Power::on();
        let files = [&self.index, &self.roots, &self.meta].map(|f| f.copy(&power));
        Self::assemble(dir, power, tearing, files)
    }

    /// Starts the machine on these disks.
    pub fn boot(&self) -> Result<Running, Broken> {
        let store = Store::open_on(
            self.branch.clone(),
            self.index.clone(),
            self.roots.clone(),
            key(),
            store_settings(),
        )
        .map_err(Broken::failed("the store does not open"))?;
        let meta = Arc::new(
            RedbMeta::open_on(self.meta.clone(), 0, 0)
                .map_err(Broken::failed("the metadata engine does not open"))?,
        );
        let fs = Fs::new(meta.clone(), store, params(), fs_settings())
            .map_err(Broken::failed("the file system does not start"))?;
        Ok(Running { meta, fs })
    }

    /// After the power cut (and once everything running on these disks is
    /// dropped): decides what the disks kept, and returns them, powered
    /// anew, with what became of the branch's unsynced changes.
    pub fn recover(self) -> (Disks, Vec<Outcome>) {
        assert!(self.power.is_off(), "recover only after a power cut");
        let outcomes = self
            .branch
            .recover()
            .expect("the branch's disk takes the outcome");
        let power = Power::on();
        let files = [&self.index, &self.roots, &self.meta].map(|f| f.recover(&power));
        (
            Self::assemble(&self.dir, power, self.tearing, files),
            outcomes,
        )
    }
}
