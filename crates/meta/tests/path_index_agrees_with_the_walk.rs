//! Invariant 6 at the engine: after every random namespace operation
//! (create, write, chmod, an xattr set or removed, unlink, link, rename of files and directories,
//! exchange, rmdir, a reopen, chunk location hints given), every path ever
//! seen answers through the path index exactly what a walk name by name
//! answers, whether the index holds its entry, a stale one, or none; and
//! the chunk hints it answers with describe the file's content as it is.

mod common;

use std::collections::BTreeSet;

use common::*;
use meta::{
    ChunkHint, ChunkId, Content, ContentHints, FileKind, Inode, InodeId, MetaStore, RedbMeta,
    RenameFlags, SetAttr, XattrFlags,
};
use proptest::prelude::*;

const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    Create(usize, usize),
    Mkdir(usize, usize),
    Write(usize, u8),
    Store(usize, u8),
    Hint(usize, u8),
    Chmod(usize, u16),
    Xattr(usize, u8),
    Unlink(usize),
    Link(usize, usize, usize),
    Rename(usize, usize, usize, bool),
    Rmdir(usize),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let i = 0usize..64;
    let n = 0usize..NAMES.len();
    prop_oneof![
        (i.clone(), n.clone()).prop_map(|(d, n)| Op::Create(d, n)),
        (i.clone(), n.clone()).prop_map(|(d, n)| Op::Mkdir(d, n)),
        (i.clone(), any::<u8>()).prop_map(|(f, b)| Op::Write(f, b)),
        (i.clone(), any::<u8>()).prop_map(|(f, b)| Op::Store(f, b)),
        (i.clone(), any::<u8>()).prop_map(|(f, b)| Op::Hint(f, b)),
        (i.clone(), 0u16..0o777).prop_map(|(f, m)| Op::Chmod(f, m)),
        (i.clone(), any::<u8>()).prop_map(|(f, b)| Op::Xattr(f, b)),
        i.clone().prop_map(Op::Unlink),
        (i.clone(), i.clone(), n.clone()).prop_map(|(f, d, n)| Op::Link(f, d, n)),
        (i.clone(), i.clone(), n, any::<bool>()).prop_map(|(s, d, n, x)| Op::Rename(s, d, n, x)),
        i.prop_map(Op::Rmdir),
        Just(Op::Reopen),
    ]
}

/// Every path in the tree with its inode, found by listing (a walk that
/// never reads the index).
fn tree(m: &RedbMeta) -> Vec<(String, Inode)> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), ROOT)];
    while let Some((path, dir)) = stack.pop() {
        for e in m.readdir(dir, None, usize::MAX).unwrap() {
            let name = String::from_utf8(e.name).unwrap();
            let p = if path.is_empty() {
                name
            } else {
                format!("{path}/{name}")
            };
            let inode = m.get(e.ino).unwrap();
            if e.kind == FileKind::Dir {
                stack.push((p.clone(), e.ino));
            }
            out.push((p, inode));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn walk(m: &RedbMeta, path: &str) -> Result<Inode, String> {
    let mut at = m.get(ROOT).unwrap();
    for part in path.split('/') {
        at = m
            .lookup(at.id, part.as_bytes())
            .map_err(|e| e.to_string())?;
    }
    Ok(at)
}

fn pick<T: Clone>(v: &[T], i: usize) -> Option<T> {
    (!v.is_empty()).then(|| v[i % v.len()].clone())
}

fn split(path: &str) -> (String, &str) {
    match path.rsplit_once('/') {
        Some((d, n)) => (d.to_string(), n),
        None => (String::new(), path),
    }
}

fn dir_ino(m: &RedbMeta, dir: &str) -> InodeId {
    if dir.is_empty() {
        ROOT
    } else {
        walk(m, dir).unwrap().id
    }
}

/// Applies `op`; failures (a name taken, a directory not empty) are fine,
/// the engine's answer is what the index must agree with.
fn apply(path: &std::path::Path, m: &mut RedbMeta, op: &Op, step: i64) {
    let all = tree(m);
    let dirs: Vec<String> = std::iter::once(String::new())
        .chain(
            all.iter()
                .filter(|(_, i)| i.attr.kind == FileKind::Dir)
                .map(|(p, _)| p.clone()),
        )
        .collect();
    let files: Vec<(String, Inode)> = all
        .iter()
        .filter(|(_, i)| i.attr.kind == FileKind::File)
        .cloned()
        .collect();
    let names: Vec<String> = all.iter().map(|(p, _)| p.clone()).collect();
    let now = t(step);
    match *op {
        Op::Create(d, n) | Op::Mkdir(d, n) => {
            let dir = dir_ino(m, &pick(&dirs, d).unwrap());
            let kind = if matches!(op, Op::Create(..)) {
                FileKind::File
            } else {
                FileKind::Dir
            };
            let _ = m.create(dir, NAMES[n].as_bytes(), new(kind), now);
        }
        Op::Xattr(f, b) => {
            if let Some((_, inode)) = pick(&files, f) {
                let name = [b"user.a", b"user.b"][b as usize % 2];
                // Some values are past the bound of what an entry carries.
                let len = if b % 5 == 0 {
                    meta::MAX_ENTRY_XATTRS
                } else {
                    b as usize % 9
                };
                if b % 3 == 0 {
                    let _ = m.remove_xattr(inode.id, name, now);
                } else {
                    m.set_xattr(inode.id, name, &vec![b; len], XattrFlags::Either, now)
                        .unwrap();
                }
            }
        }
        Op::Write(f, b) => {
            if let Some((_, inode)) = pick(&files, f) {
                let bytes = vec![b; 1 + b as usize % 7];
                let size = bytes.len() as u64;
                m.set_content(inode.id, Content::Inline(bytes), size, now)
                    .unwrap();
            }
        }
        Op::Store(f, b) => {
            if let Some((_, inode)) = pick(&files, f) {
                let root = ChunkId::from_bytes([b % 4; 32]);
                m.set_content(
                    inode.id,
                    Content::Recipe(root),
                    1000 + u64::from(b % 3),
                    now,
                )
                .unwrap();
            }
        }
        Op::Hint(f, b) => {
            if let Some((_, inode)) = pick(&files, f) {
                // Mostly hints for the content the file has; some for
                // another recipe or size, which no entry may keep.
                let root = match inode.content {
                    Content::Recipe(r) if b % 4 != 0 => r,
                    _ => ChunkId::from_bytes([b % 4; 32]),
                };
                let size = if b % 5 == 0 { 1001 } else { inode.attr.size };
                let half = (size / 2) as u32;
                let chunk = |len, n| ChunkHint {
                    id: ChunkId::from_bytes([n; 32]),
                    len,
                    location: [b; meta::LOCATION_LEN],
                };
                let hints = ContentHints {
                    root,
                    chunks: vec![chunk(half, 1), chunk(size as u32 - half, 2)],
                };
                m.set_path_hints(inode.id, &hints).unwrap();
            }
        }
        Op::Chmod(f, mode) => {
            if let Some((_, inode)) = pick(&files, f) {
                let change = SetAttr {
                    perm: Some(mode),
                    ..Default::default()
                };
                m.set_attr(inode.id, &change, now).unwrap();
            }
        }
        Op::Unlink(f) => {
            if let Some((p, _)) = pick(&files, f) {
                let (d, n) = split(&p);
                m.unlink(dir_ino(m, &d), n.as_bytes(), false, now).unwrap();
            }
        }
        Op::Link(f, d, n) => {
            if let Some((_, inode)) = pick(&files, f) {
                let dir = dir_ino(m, &pick(&dirs, d).unwrap());
                let _ = m.link(inode.id, dir, NAMES[n].as_bytes(), now);
            }
        }
        Op::Rename(s, d, n, exchange) => {
            if let Some(p) = pick(&names, s) {
                let (sd, sn) = split(&p);
                let dir = dir_ino(m, &pick(&dirs, d).unwrap());
                let flags = RenameFlags {
                    noreplace: false,
                    exchange,
                };
                let _ = m.rename(
                    dir_ino(m, &sd),
                    sn.as_bytes(),
                    dir,
                    NAMES[n].as_bytes(),
                    flags,
                    &|_| false,
                    now,
                );
            }
        }
        Op::Rmdir(d) => {
            if let Some(p) = pick(&dirs[1..], d) {
                let (pd, pn) = split(&p);
                let _ = m.rmdir(dir_ino(m, &pd), pn.as_bytes(), now);
            }
        }
        Op::Reopen => {
            m.sync().unwrap();
            // The old store must be closed before it is opened again.
            *m = RedbMeta::open(&path.join("other.redb"), 0, 0).unwrap();
            *m = RedbMeta::open(&path.join("meta.redb"), 0, 0).unwrap();
        }
    }
}

fn agree(m: &RedbMeta, seen: &BTreeSet<String>) {
    for p in seen {
        let want = walk(m, p);
        // Twice: the first may fill the entry, the second reads it.
        for _ in 0..2 {
            let found = m.lookup_path(p.as_bytes());
            // The xattrs an index hit carries are the inode's, exactly.
            if let Ok(meta::PathFound {
                inode,
                hints: Some(h),
                ..
            }) = &found
            {
                assert_eq!(inode.content, Content::Recipe(h.root), "hints at {p:?}");
                let covered: u64 = h.chunks.iter().map(|c| u64::from(c.len)).sum();
                assert_eq!(covered, inode.attr.size, "hints at {p:?}");
            }
            if let Ok(meta::PathFound {
                inode,
                xattrs: Some(x),
                ..
            }) = &found
            {
                let names = m.list_xattr(inode.id).unwrap();
                let now: Vec<_> = names
                    .into_iter()
                    .map(|n| (n.clone(), m.get_xattr(inode.id, &n).unwrap()))
                    .collect();
                assert_eq!(x, &now, "xattrs at {p:?}");
            }
            let got = found.map(|f| f.inode).map_err(|e| e.to_string());
            assert_eq!(got, want, "path {p:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn every_path_answers_as_the_walk(ops in proptest::collection::vec(op(), 1..40)) {
        let (dir, mut m) = store();
        let mut seen = BTreeSet::new();
        for (step, op) in ops.iter().enumerate() {
            apply(dir.path(), &mut m, op, step as i64 + 2);
            for (p, _) in tree(&m) {
                seen.insert(p);
            }
            agree(&m, &seen);
        }
        prop_assert!(m.verify().unwrap().is_empty());
    }
}

#[test]
fn a_directory_renamed_before_a_reopen_leaves_no_trusted_stale_entry() {
    let (dir, m) = store();
    let a = mkdir(&m, ROOT, "a");
    let f = mkfile(&m, a, "f");
    assert_eq!(m.lookup_path(b"a/f").unwrap().inode.id, f);
    m.rename(
        ROOT,
        b"a",
        ROOT,
        b"b",
        RenameFlags::default(),
        &|_| false,
        t(2),
    )
    .unwrap();
    m.sync().unwrap();
    drop(m);
    let m = RedbMeta::open(&dir.path().join("meta.redb"), 0, 0).unwrap();
    assert!(m.lookup_path(b"a/f").is_err());
    assert_eq!(m.lookup_path(b"b/f").unwrap().inode.id, f);
    // A new file where the old one was is found, not the old one.
    let a = mkdir(&m, ROOT, "a");
    let g = mkfile(&m, a, "f");
    assert_eq!(m.lookup_path(b"a/f").unwrap().inode.id, g);
}

#[test]
fn more_directory_renames_than_remembered_still_answer_right() {
    let (_dir, m) = store();
    let d = mkdir(&m, ROOT, "d");
    let f = mkfile(&m, d, "f");
    let other = mkdir(&m, ROOT, "o");
    let g = mkfile(&m, other, "g");
    assert_eq!(m.lookup_path(b"d/f").unwrap().inode.id, f);
    assert_eq!(m.lookup_path(b"o/g").unwrap().inode.id, g);
    let flags = RenameFlags::default();
    for i in 0..meta::MAX_MOVES as i64 + 3 {
        m.rename(ROOT, b"d", ROOT, b"e", flags, &|_| false, t(i))
            .unwrap();
        assert!(m.lookup_path(b"d/f").is_err());
        m.rename(ROOT, b"e", ROOT, b"d", flags, &|_| false, t(i))
            .unwrap();
        assert_eq!(m.lookup_path(b"d/f").unwrap().inode.id, f);
    }
    assert!(m.lookup_path(b"e/f").is_err());
    assert_eq!(m.lookup_path(b"o/g").unwrap().inode.id, g);
    assert!(m.verify().unwrap().is_empty());
}

/// A recovered namespace (`cairn recover` imports one) starts with an
/// empty index: every path is walked once, then read from the index.
#[test]
fn an_imported_namespace_is_answered_by_walks_then_the_index() {
    let (dir, m) = store();
    let d = mkdir(&m, ROOT, "d");
    let f = m
        .create(
            d,
            b"f",
            meta::NewInode {
                content: Content::Inline(b"bytes".to_vec()),
                ..new(FileKind::File)
            },
            t(2),
        )
        .unwrap()
        .id;
    let view = m.view().unwrap();
    let mut inodes = Vec::new();
    view.for_each_inode(&mut |i| {
        inodes.push(meta::ImportInode {
            inode: i.clone(),
            xattrs: Vec::new(),
        })
    })
    .unwrap();
    let entries = vec![
        meta::ImportEntry {
            parent: ROOT,
            name: b"d".to_vec(),
            ino: d,
        },
        meta::ImportEntry {
            parent: d,
            name: b"f".to_vec(),
            ino: f,
        },
    ];
    let back = RedbMeta::import(&dir.path().join("imported.redb"), inodes, entries).unwrap();
    for _ in 0..2 {
        let got = back.lookup_path(b"d/f").unwrap().inode;
        assert_eq!(got, back.get(f).unwrap());
        assert_eq!(got.content, Content::Inline(b"bytes".to_vec()));
    }
    assert!(back.lookup_path(b"d/g").is_err());
    assert!(back.verify().unwrap().is_empty());
}

/// Hints go on through every rewrite of the entry that keeps the file's
/// content (a chmod, an xattr, a reopen) and go with the first change of
/// its content, or of its name (its entry is new then).
#[test]
fn hints_last_as_long_as_the_content_they_describe() {
    let (dir, m) = store();
    let d = mkdir(&m, ROOT, "d");
    let f = mkfile(&m, d, "f");
    let root = ChunkId::from_bytes([5; 32]);
    m.set_content(f, Content::Recipe(root), 300, t(2)).unwrap();
    let hints = ContentHints {
        root,
        chunks: vec![ChunkHint {
            id: ChunkId::from_bytes([6; 32]),
            len: 300,
            location: [7; meta::LOCATION_LEN],
        }],
    };
    // No entry yet: nothing to give them to.
    assert!(!m.path_indexed(f).unwrap());
    assert!(!m.set_path_hints(f, &hints).unwrap());
    assert_eq!(m.lookup_path(b"d/f").unwrap().hints, None);
    assert!(m.path_indexed(f).unwrap());
    assert!(m.set_path_hints(f, &hints).unwrap());
    assert_eq!(m.lookup_path(b"d/f").unwrap().hints.as_ref(), Some(&hints));
    let chmod = SetAttr {
        perm: Some(0o600),
        ..Default::default()
    };
    m.set_attr(f, &chmod, t(3)).unwrap();
    m.set_xattr(f, b"user.x", b"1", XattrFlags::Either, t(4))
        .unwrap();
    assert_eq!(m.lookup_path(b"d/f").unwrap().hints.as_ref(), Some(&hints));
    m.rename(d, b"f", d, b"g", RenameFlags::default(), &|_| false, t(5))
        .unwrap();
    assert_eq!(m.lookup_path(b"d/g").unwrap().hints, None);
    assert!(m.set_path_hints(f, &hints).unwrap());
    m.sync().unwrap();
    drop(m);
    let m = RedbMeta::open(&dir.path().join("meta.redb"), 0, 0).unwrap();
    assert_eq!(m.lookup_path(b"d/g").unwrap().hints.as_ref(), Some(&hints));
    assert!(m.verify().unwrap().is_empty());
    // Hints for another size are refused; a new content drops the old.
    let short = ContentHints {
        chunks: vec![ChunkHint {
            len: 299,
            ..hints.chunks[0]
        }],
        ..hints.clone()
    };
    assert!(!m.set_path_hints(f, &short).unwrap());
    m.set_content(f, Content::Recipe(ChunkId::from_bytes([8; 32])), 300, t(6))
        .unwrap();
    assert_eq!(m.lookup_path(b"d/g").unwrap().hints, None);
    m.set_content(f, Content::Recipe(root), 300, t(7)).unwrap();
    assert_eq!(m.lookup_path(b"d/g").unwrap().hints, None);
    assert!(m.verify().unwrap().is_empty());
}
