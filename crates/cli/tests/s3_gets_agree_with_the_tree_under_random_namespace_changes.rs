//! Invariant 6 through the real gateway: random namespace operations from
//! both sides of `cairn serve` (the mount: create, overwrite, unlink, hard
//! link, rename of files and of directories, rmdir; S3: put, delete, copy),
//! from a seeded RNG, and after every step a GET and a HEAD of every key
//! ever used answer exactly what the tree holds: the bytes of the file the
//! path names now, or NoSuchKey. Some files are past the 16 KiB kept
//! inline, so GETs also read chunks where the entries' hints say. GET and HEAD go through the path index
//! (`gateway/src/fast.rs`), so a stale entry would show as wrong bytes or a
//! key that should be gone.
//!
//! The mount changes `bkt/m/...` and S3 changes `bkt/s/...`: the kernel
//! keeps names it looked up for a second, so a mount operation on a name
//! S3 just changed could fail for the kernel's reasons, not cairn's. Both
//! sides' changes go through one metadata engine and one index, which is
//! what is under test; S3 copies read from both halves. After the run,
//! the repository checks clean, the metadata engine's fsck finds every
//! entry the index trusts true, and, remounted, the tree holds exactly the
//! model.

mod common;
#[path = "s3_clients/driver.rs"]
mod driver;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

use common::{ok, random, Mount};
use driver::{hex, storage_reads, Driver};

/// The bucket both sides change.
const B: &str = "bkt";

/// What the tree holds: paths below the bucket to file identities, the
/// bytes of each identity, and the directories.
#[derive(Default)]
struct Model {
    files: BTreeMap<String, u64>,
    data: BTreeMap<u64, Vec<u8>>,
    dirs: BTreeSet<String>,
    next: u64,
}

fn parent(p: &str) -> &str {
    p.rsplit_once('/').map_or("", |(d, _)| d)
}

impl Model {
    fn new_file(&mut self, path: &str, bytes: Vec<u8>) {
        self.next += 1;
        self.data.insert(self.next, bytes);
        self.files.insert(path.to_string(), self.next);
    }
    fn is_dir(&self, p: &str) -> bool {
        p.is_empty() || self.dirs.contains(p)
    }
    fn empty(&self, d: &str) -> bool {
        let pre = format!("{d}/");
        !self
            .files
            .keys()
            .chain(&self.dirs)
            .any(|p| p.starts_with(&pre))
    }
    /// Moves everything at or below `from` to `to`.
    fn rename_tree(&mut self, from: &str, to: &str) {
        let pre = format!("{from}/");
        let moved = |p: &String| p == from || p.starts_with(&pre);
        let re = |p: &str| format!("{to}{}", &p[from.len()..]);
        let files: Vec<_> = self
            .files
            .iter()
            .filter(|(p, _)| moved(p))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (p, i) in files {
            self.files.remove(&p);
            self.files.insert(re(&p), i);
        }
        let dirs: Vec<_> = self.dirs.iter().filter(|p| moved(p)).cloned().collect();
        for p in dirs {
            self.dirs.remove(&p);
            self.dirs.insert(re(&p));
        }
    }
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
    fn pick<'a>(&mut self, v: &'a [String]) -> Option<&'a String> {
        (!v.is_empty()).then(|| &v[self.below(v.len())])
    }
}

/// A path below `side` (`m` or `s`): some directories, then a name.
fn some_path(rng: &mut Rng, model: &Model, side: &str) -> String {
    let dirs: Vec<String> = model
        .dirs
        .iter()
        .filter(|d| d.as_str() == side || d.starts_with(&format!("{side}/")))
        .cloned()
        .collect();
    let base = rng.pick(&dirs).cloned().unwrap_or_else(|| side.to_string());
    let names = ["a", "b", "c", "d"];
    let mut p = format!("{base}/{}", names[rng.below(names.len())]);
    if rng.below(3) == 0 {
        p = format!("{p}/{}", names[rng.below(names.len())]);
    }
    p
}

#[test]
fn gets_through_the_path_index_answer_what_the_tree_holds() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    let served = serve::serve(&repo, &dir);
    let mut s3 = Driver::start(&served);

    let bucket = dir.join("bkt");
    let at = |p: &str| bucket.join(p);
    let mut model = Model::default();
    for d in ["m", "s"] {
        fs::create_dir_all(at(d)).unwrap();
        model.dirs.insert(d.to_string());
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut kinds = BTreeMap::<&str, u32>::new();
    for step in 0..120u64 {
        // One in four past the 16 KiB kept inline: stored in chunks, read
        // by the GET where the entry's hints say the chunks are.
        let len = if step % 4 == 3 {
            17 * 1024 + rng.below(8000)
        } else {
            1 + rng.below(3000)
        };
        let bytes = random(len, step + 1);
        let files: Vec<String> = model.files.keys().cloned().collect();
        let mine = |side: &str| -> Vec<String> {
            files
                .iter()
                .filter(|p| p.starts_with(&format!("{side}/")))
                .cloned()
                .collect()
        };
        let kind = match rng.below(12) {
            0 | 1 => {
                // Mount: create or overwrite (in place: a hard link's other
                // names see it too).
                let p = some_path(&mut rng, &model, "m");
                if !model.is_dir(parent(&p)) || model.is_dir(&p) {
                    continue;
                }
                fs::write(at(&p), &bytes).unwrap();
                match model.files.get(&p) {
                    Some(&id) => {
                        model.data.insert(id, bytes);
                    }
                    None => model.new_file(&p, bytes),
                }
                "write"
            }
            2 => {
                let Some(p) = rng.pick(&mine("m")).cloned() else {
                    continue;
                };
                fs::remove_file(at(&p)).unwrap();
                model.files.remove(&p);
                "unlink"
            }
            3 => {
                let Some(src) = rng.pick(&mine("m")).cloned() else {
                    continue;
                };
                let p = some_path(&mut rng, &model, "m");
                if !model.is_dir(parent(&p)) || model.is_dir(&p) || model.files.contains_key(&p) {
                    continue;
                }
                fs::hard_link(at(&src), at(&p)).unwrap();
                let id = model.files[&src];
                model.files.insert(p, id);
                "link"
            }
            4 => {
                // Rename a file, over another or not.
                let Some(src) = rng.pick(&mine("m")).cloned() else {
                    continue;
                };
                let p = some_path(&mut rng, &model, "m");
                if !model.is_dir(parent(&p)) || model.is_dir(&p) {
                    continue;
                }
                fs::rename(at(&src), at(&p)).unwrap();
                if model.files[&src] != model.files.get(&p).copied().unwrap_or(0) {
                    let id = model.files.remove(&src).unwrap();
                    model.files.insert(p, id);
                }
                "rename file"
            }
            5..=7 => {
                // Make a directory, or rename one (not into itself).
                let dirs: Vec<String> = model
                    .dirs
                    .iter()
                    .filter(|d| d.starts_with("m/"))
                    .cloned()
                    .collect();
                let p = some_path(&mut rng, &model, "m");
                if !model.is_dir(parent(&p)) || model.files.contains_key(&p) || model.is_dir(&p) {
                    continue;
                }
                match rng.pick(&dirs).cloned() {
                    Some(d) if rng.below(3) > 0 && !(p.starts_with(&format!("{d}/"))) => {
                        fs::rename(at(&d), at(&p)).unwrap();
                        model.rename_tree(&d, &p);
                        "rename dir"
                    }
                    _ => {
                        fs::create_dir(at(&p)).unwrap();
                        model.dirs.insert(p);
                        "mkdir"
                    }
                }
            }
            8 => {
                let dirs: Vec<String> = model
                    .dirs
                    .iter()
                    .filter(|d| d.starts_with("m/"))
                    .cloned()
                    .collect();
                let Some(d) = rng.pick(&dirs).cloned() else {
                    continue;
                };
                if !model.empty(&d) {
                    continue;
                }
                fs::remove_dir(at(&d)).unwrap();
                model.dirs.remove(&d);
                "rmdir"
            }
            9 | 10 => {
                let p = some_path(&mut rng, &model, "s");
                if model.is_dir(&p)
                    || (1..p.len()).any(|i| &p[i..=i] == "/" && model.files.contains_key(&p[..i]))
                {
                    continue;
                }
                let copy = rng.below(2) == 0;
                match rng.pick(&files).cloned() {
                    Some(src) if copy => {
                        s3.copy(B, &src, &p);
                        let id = model.files[&src];
                        model.new_file(&p, model.data[&id].clone());
                    }
                    _ => {
                        s3.put(B, &p, &bytes);
                        model.new_file(&p, bytes);
                    }
                };
                // The directories S3 made on the way.
                let mut d = parent(&p).to_string();
                while d != "s" && model.dirs.insert(d.clone()) {
                    d = parent(&d).to_string();
                }
                "s3 put/copy"
            }
            _ => {
                let Some(p) = rng.pick(&mine("s")).cloned() else {
                    continue;
                };
                s3.delete(B, &p);
                model.files.remove(&p);
                // S3 removes the directories the delete left empty.
                let mut d = parent(&p).to_string();
                while d != "s" && model.empty(&d) {
                    model.dirs.remove(&d);
                    d = parent(&d).to_string();
                }
                "s3 delete"
            }
        };
        *kinds.entry(kind).or_default() += 1;
        seen.extend(model.files.keys().cloned());
        let keys: Vec<&String> = seen.iter().collect();
        let got = s3.check(B, &keys);
        for k in &seen {
            let answer = &got[k.as_str()];
            match model.files.get(k) {
                Some(id) => {
                    let want = &model.data[id];
                    assert_eq!(
                        answer,
                        &serde_json::json!([hex(want), want.len()]),
                        "step {step} ({kind}): GET/HEAD of {k} differs from the tree"
                    );
                }
                None => assert_eq!(
                    answer, "NoSuchKey",
                    "step {step} ({kind}): {k} should be gone"
                ),
            }
        }
    }
    // Every mount-side file, its entry filled by the GETs above, is
    // rewritten in place: the fsck below then finds any entry left with
    // the record it had before (GET reads bytes by inode, so it would not).
    let mounted: Vec<(String, u64)> = model
        .files
        .iter()
        .filter(|(p, _)| p.starts_with("m/"))
        .map(|(p, i)| (p.clone(), *i))
        .collect();
    for (n, (p, id)) in mounted.iter().enumerate() {
        let bytes = random(100 + n + (n % 2) * 20_000, 7777 + n as u64);
        fs::write(at(p), &bytes).unwrap();
        model.data.insert(*id, bytes);
    }
    let keys: Vec<&String> = model.files.keys().collect();
    let got = s3.check(B, &keys);
    for (k, id) in &model.files {
        let want = &model.data[id];
        assert_eq!(
            got[k.as_str()],
            serde_json::json!([hex(want), want.len()]),
            "after the rewrite: {k}"
        );
    }
    eprintln!("operations run: {kinds:?}");
    for k in [
        "write",
        "rename file",
        "rename dir",
        "link",
        "s3 put/copy",
        "s3 delete",
    ] {
        assert!(
            kinds.get(k).copied().unwrap_or(0) > 0,
            "no {k} in {kinds:?}"
        );
    }
    s3.stop();

    // The daemon counts its storage reads by what was read, for the
    // benchmark's reads per GET, and answers them over the control socket:
    // the metadata engine's file and the chunk index's were both read (at
    // open at least); containers may all have been served from cache.
    let [meta, index, containers] = storage_reads(&repo);
    assert!(meta > 0, "the engine read its storage {meta} times");
    assert!(index > 0, "the chunk index was read {index} times");
    let again = storage_reads(&repo);
    assert!(again[2] >= containers, "the container count went back");

    let (repo, dir) = served.mount.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
    // What GET could not show (the gateway reads a file's bytes by its
    // inode): every entry the index would trust holds the inode's record
    // as it is now, at the path that names it.
    let problems = meta::RedbMeta::open(&repo.join("meta/fs.redb"), 0, 0)
        .unwrap()
        .verify()
        .unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let m = Mount::start(repo, dir);
    for (p, id) in &model.files {
        assert!(
            fs::read(m.path(&format!("bkt/{p}"))).unwrap() == model.data[id],
            "{p} reads back changed"
        );
    }
    m.unmount();
}
