//! Random sequences of namespace operations against a plain in-memory model
//! of a tree: every operation must succeed or fail the same way in both, and
//! at the end every listing, link count and count must agree.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::*;
use meta::{FileKind, InodeId, MetaStore, RenameFlags};
use proptest::prelude::*;

type Res<T> = Result<T, &'static str>;

#[derive(Debug, Clone)]
struct Node {
    dir: bool,
    /// Files only: the number of names. Directories: derived.
    nlink: u32,
    entries: BTreeMap<Vec<u8>, u64>,
    /// Directories only.
    parent: u64,
}

/// The model: plain maps, no cleverness.
struct Model {
    nodes: HashMap<u64, Node>,
    next: u64,
}

const NAMES: [&[u8]; 5] = [b"a", b"b", b"c", b"", b".."];

fn check(name: &[u8]) -> Res<()> {
    if name.len() > 255 {
        return Err("NameTooLong");
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err("Invalid");
    }
    Ok(())
}

impl Model {
    fn new() -> Self {
        let root = Node {
            dir: true,
            nlink: 0,
            entries: BTreeMap::new(),
            parent: 1,
        };
        Model {
            nodes: HashMap::from([(1, root)]),
            next: 2,
        }
    }

    fn nlink(&self, ino: u64) -> u32 {
        let n = &self.nodes[&ino];
        if n.dir {
            2 + n.entries.values().filter(|c| self.nodes[*c].dir).count() as u32
        } else {
            n.nlink
        }
    }

    fn dir(&self, ino: u64) -> Res<&Node> {
        match self.nodes.get(&ino) {
            None => Err("NotFound"),
            Some(n) if !n.dir => Err("NotDir"),
            Some(n) => Ok(n),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> &mut Node {
        self.nodes.get_mut(&ino).unwrap()
    }

    fn lookup(&self, parent: u64, name: &[u8]) -> Res<u64> {
        check(name)?;
        self.dir(parent)?
            .entries
            .get(name)
            .copied()
            .ok_or("NotFound")
    }

    fn create(&mut self, parent: u64, name: &[u8], dir: bool) -> Res<u64> {
        check(name)?;
        if self.dir(parent)?.entries.contains_key(name) {
            return Err("Exists");
        }
        let ino = self.next;
        self.next += 1;
        let node = Node {
            dir,
            nlink: 1,
            entries: BTreeMap::new(),
            parent: if dir { parent } else { 0 },
        };
        self.nodes.insert(ino, node);
        self.dir_mut(parent).entries.insert(name.to_vec(), ino);
        Ok(ino)
    }

    fn link(&mut self, ino: u64, parent: u64, name: &[u8]) -> Res<u32> {
        check(name)?;
        match self.nodes.get(&ino) {
            None => return Err("NotFound"),
            Some(n) if n.dir => return Err("Invalid"),
            Some(n) if n.nlink == 0 => return Err("NotFound"),
            Some(_) => {}
        }
        if self.dir(parent)?.entries.contains_key(name) {
            return Err("Exists");
        }
        self.dir_mut(parent).entries.insert(name.to_vec(), ino);
        let n = self.nodes.get_mut(&ino).unwrap();
        n.nlink += 1;
        Ok(n.nlink)
    }

    /// A file lost a name.
    fn drop_name(&mut self, ino: u64, keep: bool) -> u32 {
        let n = self.nodes.get_mut(&ino).unwrap();
        n.nlink -= 1;
        let left = n.nlink;
        if left == 0 && !keep {
            self.nodes.remove(&ino);
        }
        left
    }

    fn unlink(&mut self, parent: u64, name: &[u8], keep: bool) -> Res<(u64, u32)> {
        check(name)?;
        let ino = *self.dir(parent)?.entries.get(name).ok_or("NotFound")?;
        if self.nodes[&ino].dir {
            return Err("IsDir");
        }
        self.dir_mut(parent).entries.remove(name);
        Ok((ino, self.drop_name(ino, keep)))
    }

    fn rmdir(&mut self, parent: u64, name: &[u8]) -> Res<()> {
        check(name)?;
        let ino = *self.dir(parent)?.entries.get(name).ok_or("NotFound")?;
        let n = &self.nodes[&ino];
        if !n.dir {
            return Err("NotDir");
        }
        if !n.entries.is_empty() {
            return Err("NotEmpty");
        }
        self.dir_mut(parent).entries.remove(name);
        self.nodes.remove(&ino);
        Ok(())
    }

    /// Whether `dir` is `ancestor` or below it.
    fn within(&self, mut dir: u64, ancestor: u64) -> bool {
        loop {
            if dir == ancestor {
                return true;
            }
            if dir == 1 {
                return false;
            }
            dir = self.nodes[&dir].parent;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rename(
        &mut self,
        p1: u64,
        n1: &[u8],
        p2: u64,
        n2: &[u8],
        flags: RenameFlags,
        keep: bool,
    ) -> Res<Option<u64>> {
        check(n1)?;
        check(n2)?;
        if flags.noreplace && flags.exchange {
            return Err("Invalid");
        }
        self.dir(p1)?;
        self.dir(p2)?;
        let src = *self.nodes[&p1].entries.get(n1).ok_or("NotFound")?;
        let dst = self.nodes[&p2].entries.get(n2).copied();
        if flags.noreplace && dst.is_some() {
            return Err("Exists");
        }
        if flags.exchange && dst.is_none() {
            return Err("NotFound");
        }
        if dst == Some(src) {
            return Ok(None);
        }
        let src_dir = self.nodes[&src].dir;
        if src_dir && self.within(p2, src) {
            return Err("Invalid");
        }
        if flags.exchange {
            let dst = dst.unwrap();
            let dst_dir = self.nodes[&dst].dir;
            if dst_dir && self.within(p1, dst) {
                return Err("Invalid");
            }
            self.dir_mut(p1).entries.insert(n1.to_vec(), dst);
            self.dir_mut(p2).entries.insert(n2.to_vec(), src);
            if src_dir {
                self.dir_mut(src).parent = p2;
            }
            if dst_dir {
                self.dir_mut(dst).parent = p1;
            }
            return Ok(None);
        }
        let mut gone = None;
        if let Some(dst) = dst {
            let dst_node = &self.nodes[&dst];
            match (src_dir, dst_node.dir) {
                (true, false) => return Err("NotDir"),
                (false, true) => return Err("IsDir"),
                (true, true) if !dst_node.entries.is_empty() => return Err("NotEmpty"),
                _ => {}
            }
            if dst_node.dir {
                self.nodes.remove(&dst);
                gone = Some(dst);
            } else if self.drop_name(dst, keep) == 0 {
                gone = Some(dst);
            }
        }
        self.dir_mut(p1).entries.remove(n1);
        self.dir_mut(p2).entries.insert(n2.to_vec(), src);
        if src_dir {
            self.dir_mut(src).parent = p2;
        }
        Ok(gone)
    }

    fn drop_orphan(&mut self, ino: u64) {
        if self.nodes.get(&ino).is_some_and(|n| !n.dir && n.nlink == 0) {
            self.nodes.remove(&ino);
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        parent: usize,
        name: usize,
        dir: bool,
    },
    Lookup {
        at: usize,
        name: usize,
    },
    Link {
        ino: usize,
        parent: usize,
        name: usize,
    },
    Unlink {
        at: usize,
        name: usize,
        keep: bool,
    },
    Rmdir {
        at: usize,
        name: usize,
    },
    Rename {
        from: usize,
        n1: usize,
        to: usize,
        n2: usize,
        flags: RenameFlags,
        keep: bool,
    },
    DropOrphan {
        ino: usize,
    },
}

fn name_index() -> impl Strategy<Value = usize> {
    // Mostly valid names, now and then an invalid one.
    prop_oneof![30 => 0..3usize, 1 => 3..5usize]
}

fn flags() -> impl Strategy<Value = RenameFlags> {
    let f = |noreplace, exchange| RenameFlags {
        noreplace,
        exchange,
    };
    prop_oneof![
        6 => Just(f(false, false)),
        3 => Just(f(true, false)),
        4 => Just(f(false, true)),
        1 => Just(f(true, true)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let sel = || 0..1024usize;
    let create = (sel(), name_index(), any::<bool>()).prop_map(|(parent, name, dir)| Op::Create {
        parent,
        name,
        dir,
    });
    let lookup = (sel(), name_index()).prop_map(|(at, name)| Op::Lookup { at, name });
    let link =
        (sel(), sel(), name_index()).prop_map(|(ino, parent, name)| Op::Link { ino, parent, name });
    let unlink = (sel(), name_index(), any::<bool>()).prop_map(|(at, name, keep)| Op::Unlink {
        at,
        name,
        keep,
    });
    let rmdir = (sel(), name_index()).prop_map(|(at, name)| Op::Rmdir { at, name });
    let rename = (
        sel(),
        name_index(),
        sel(),
        name_index(),
        flags(),
        any::<bool>(),
    )
        .prop_map(|(from, n1, to, n2, flags, keep)| Op::Rename {
            from,
            n1,
            to,
            n2,
            flags,
            keep,
        });
    let drop_orphan = sel().prop_map(|ino| Op::DropOrphan { ino });
    prop_oneof![
        6 => create,
        1 => lookup,
        2 => link,
        2 => unlink,
        2 => rmdir,
        6 => rename,
        1 => drop_orphan,
    ]
}

/// A directory from a selector: mostly a live one, sometimes any inode
/// number ever handed out or the next one (never handed out).
fn pick(m: &Model, sel: usize) -> u64 {
    let mut dirs: Vec<u64> = m
        .nodes
        .iter()
        .filter(|(_, n)| n.dir)
        .map(|(i, _)| *i)
        .collect();
    dirs.sort();
    match sel % 8 {
        0 => pick_any(m, sel / 8),
        _ => dirs[sel / 8 % dirs.len()],
    }
}

/// Any inode number ever handed out, or the next one.
fn pick_any(m: &Model, sel: usize) -> u64 {
    1 + sel as u64 % m.next
}

/// An inode: mostly one with a name, sometimes any.
fn pick_inode(m: &Model, sel: usize) -> u64 {
    let (dir, name) = pick_entry(m, sel, 0);
    match (m.nodes.get(&dir).and_then(|d| d.entries.get(name)), sel % 4) {
        (Some(ino), 1..) => *ino,
        _ => pick_any(m, sel),
    }
}

/// A (directory, name) pair: mostly an existing entry, otherwise a
/// directory from `pick` and the name `NAMES[name]`.
fn pick_entry(m: &Model, sel: usize, name: usize) -> (u64, &'static [u8]) {
    let mut entries: Vec<(u64, &'static [u8])> = Vec::new();
    for (ino, n) in &m.nodes {
        for k in n.entries.keys() {
            let name = NAMES.iter().find(|n| n[..] == k[..]).unwrap();
            entries.push((*ino, name));
        }
    }
    entries.sort();
    match sel % 3 {
        1.. if !entries.is_empty() => entries[sel / 3 % entries.len()],
        _ => (pick(m, sel / 3), NAMES[name]),
    }
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let (_d, s) = store();
    let mut m = Model::new();
    for (step, op) in ops.iter().enumerate() {
        let ctx = format!("step {step}: {op:?}");
        match *op {
            Op::Create { parent, name, dir } => {
                let p = pick(&m, parent);
                let kind = if dir { FileKind::Dir } else { FileKind::File };
                let got = s
                    .create(InodeId(p), NAMES[name], new(kind), t(1))
                    .map(|i| i.id.0)
                    .map_err(|e| kind_of(&e));
                prop_assert_eq!(got, m.create(p, NAMES[name], dir), "{}", ctx);
            }
            Op::Lookup { at, name } => {
                let (p, name) = pick_entry(&m, at, name);
                let got = s
                    .lookup(InodeId(p), name)
                    .map(|i| i.id.0)
                    .map_err(|e| kind_of(&e));
                prop_assert_eq!(got, m.lookup(p, name), "{}", ctx);
            }
            Op::Link { ino, parent, name } => {
                let (i, p) = (pick_inode(&m, ino), pick(&m, parent));
                let got = s
                    .link(InodeId(i), InodeId(p), NAMES[name], t(1))
                    .map(|i| i.attr.nlink)
                    .map_err(|e| kind_of(&e));
                prop_assert_eq!(got, m.link(i, p, NAMES[name]), "{}", ctx);
            }
            Op::Unlink { at, name, keep } => {
                let (p, name) = pick_entry(&m, at, name);
                let got = s
                    .unlink(InodeId(p), name, keep, t(1))
                    .map(|i| (i.id.0, i.attr.nlink))
                    .map_err(|e| kind_of(&e));
                prop_assert_eq!(got, m.unlink(p, name, keep), "{}", ctx);
            }
            Op::Rmdir { at, name } => {
                let (p, name) = pick_entry(&m, at, name);
                let got = s.rmdir(InodeId(p), name, t(1)).map_err(|e| kind_of(&e));
                prop_assert_eq!(got, m.rmdir(p, name), "{}", ctx);
            }
            Op::Rename {
                from,
                n1,
                to,
                n2,
                flags,
                keep,
            } => {
                let (a, n1) = pick_entry(&m, from, n1);
                let (b, n2) = if to % 2 == 0 {
                    pick_entry(&m, to / 2, n2)
                } else {
                    (pick(&m, to / 2), NAMES[n2])
                };
                let got = s
                    .rename(InodeId(a), n1, InodeId(b), n2, flags, &|_| keep, t(1))
                    .map(|g| g.map(|i| i.id.0))
                    .map_err(|e| kind_of(&e));
                prop_assert_eq!(got, m.rename(a, n1, b, n2, flags, keep), "{}", ctx);
            }
            Op::DropOrphan { ino } => {
                let i = pick_any(&m, ino);
                s.drop_orphan(InodeId(i)).unwrap();
                m.drop_orphan(i);
            }
        }
    }
    compare(&s, &m)?;
    let orphans = m.nodes.values().filter(|n| !n.dir && n.nlink == 0).count() as u64;
    prop_assert_eq!(s.purge_orphans().unwrap(), orphans);
    m.nodes.retain(|_, n| n.dir || n.nlink > 0);
    compare(&s, &m)
}

fn kind_of(e: &meta::MetaError) -> &'static str {
    kind(e)
}

fn compare(s: &meta::RedbMeta, m: &Model) -> Result<(), TestCaseError> {
    for ino in 1..=m.next {
        match m.nodes.get(&ino) {
            None => prop_assert_eq!(
                s.get(InodeId(ino)).map_err(|e| kind(&e)).err(),
                Some("NotFound"),
                "inode {}",
                ino
            ),
            Some(n) => {
                let got = s.get(InodeId(ino)).unwrap();
                prop_assert_eq!(got.attr.kind == FileKind::Dir, n.dir, "inode {}", ino);
                prop_assert_eq!(got.attr.nlink, m.nlink(ino), "nlink of {}", ino);
                if n.dir {
                    // Listed in pages of 2.
                    let mut listed = Vec::new();
                    let mut after: Option<Vec<u8>> = None;
                    loop {
                        let page = s.readdir(InodeId(ino), after.as_deref(), 2).unwrap();
                        let Some(last) = page.last() else { break };
                        after = Some(last.name.clone());
                        for e in page {
                            let kind_ok = (e.kind == FileKind::Dir) == m.nodes[&e.ino.0].dir;
                            prop_assert!(kind_ok, "entry kind in {}", ino);
                            listed.push((e.name, e.ino.0));
                        }
                    }
                    let want: Vec<(Vec<u8>, u64)> =
                        n.entries.iter().map(|(k, v)| (k.clone(), *v)).collect();
                    prop_assert_eq!(listed, want, "listing of {}", ino);
                }
            }
        }
    }
    let dirs = m.nodes.values().filter(|n| n.dir).count() as u64;
    let counts = s.counts().unwrap();
    prop_assert_eq!(
        (counts.files, counts.dirs),
        (m.nodes.len() as u64 - dirs, dirs)
    );
    let problems = s.verify().unwrap();
    prop_assert!(problems.is_empty(), "{:?}", problems);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn store_agrees_with_the_model(ops in prop::collection::vec(op(), 1..80)) {
        run(&ops)?;
    }
}
