//! The machine under test: a file system over a store and a metadata engine
//! whose every byte of storage goes through one power switch.

pub mod model;
pub mod workload;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use branch::crash::{CrashBranch, CrashFile, Outcome, Power};
use branch::LocalDir;
use cas::{RepoKey, Store, StoreSettings};
use chunking::ChunkerParams;
use fs::{Fs, FsSettings};
use meta::RedbMeta;

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
/// limit per file makes large writes go behind.
fn fs_settings() -> FsSettings {
    FsSettings {
        file_dirty_max: 64 << 10,
        total_dirty_max: 1 << 20,
        readahead: 64 << 10,
        cache_bytes: 1 << 20,
        commit_interval: Duration::from_secs(3600),
        version_interval: Duration::ZERO,
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
    /// The branch's directory.
    pub branch: std::path::PathBuf,
    pub index: CrashFile,
    pub roots: CrashFile,
    pub meta: CrashFile,
}

/// A machine that is up: everything it stores goes through `power`.
pub struct Running {
    pub power: Power,
    pub branch: Arc<CrashBranch>,
    pub meta: Arc<RedbMeta>,
    pub fs: Fs,
}

impl Disks {
    /// A new, empty machine, set up and shut down cleanly.
    pub fn new(dir: &Path) -> Disks {
        let power = Power::on();
        let disks = Disks {
            power: power.clone(),
            branch: dir.join("branch"),
            index: CrashFile::new("index.redb", &power),
            roots: CrashFile::new("roots.redb", &power),
            meta: CrashFile::new("fs.redb", &power),
        };
        let running = disks.boot(false);
        running.fs.shutdown().expect("a clean shutdown");
        drop(running);
        disks
    }

    /// A copy of these disks, as after a clean shutdown, for a new run.
    pub fn copy(&self, dir: &Path) -> Disks {
        let power = Power::on();
        std::fs::create_dir_all(dir.join("branch")).unwrap();
        for entry in std::fs::read_dir(&self.branch).unwrap() {
            let entry = entry.unwrap();
            assert!(
                entry.file_name() == ".partial",
                "the clean disks hold only an empty branch"
            );
        }
        Disks {
            power: power.clone(),
            branch: dir.join("branch"),
            index: self.index.copy(&power),
            roots: self.roots.copy(&power),
            meta: self.meta.copy(&power),
        }
    }

    /// Starts the machine on these disks. Panics if it does not come up:
    /// a crash must never leave a machine that cannot start.
    pub fn boot(&self, tearing: bool) -> Running {
        let power = &self.power;
        let (local, _) = LocalDir::open("local", &self.branch).expect("open the branch");
        let mut branch = CrashBranch::new(Arc::new(local), power);
        if tearing {
            branch = branch.tearing();
        }
        let branch = Arc::new(branch);
        let store = Store::open_on(
            branch.clone(),
            self.index.clone(),
            self.roots.clone(),
            key(),
            store_settings(),
        )
        .unwrap_or_else(|e| panic!("the store does not open: {e}"));
        let meta = Arc::new(
            RedbMeta::open_on(self.meta.clone(), 0, 0)
                .unwrap_or_else(|e| panic!("the metadata engine does not open: {e}")),
        );
        let fs = Fs::new(meta.clone(), store, params(), fs_settings())
            .unwrap_or_else(|e| panic!("the file system does not start: {e}"));
        Running {
            power: power.clone(),
            branch,
            meta,
            fs,
        }
    }
}

impl Running {
    /// After the power cut: stops what was running (every write now
    /// fails), decides what the disks kept, and returns them with what
    /// became of the branch's unsynced changes.
    pub fn recover(self, disks: &Disks) -> (Disks, Vec<Outcome>) {
        let Running {
            power,
            branch,
            meta,
            fs,
        } = self;
        assert!(power.is_off(), "recover only after a power cut");
        drop(fs);
        drop(meta);
        let outcomes = branch
            .recover()
            .expect("the branch's disk takes the outcome");
        let after = Power::on();
        let recovered = Disks {
            power: after.clone(),
            branch: disks.branch.clone(),
            index: disks.index.recover(&after),
            roots: disks.roots.recover(&after),
            meta: disks.meta.recover(&after),
        };
        (recovered, outcomes)
    }
}
