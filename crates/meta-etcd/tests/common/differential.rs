//! The differential property test's machinery: random sequences of
//! namespace operations applied to the redb engine and to another engine
//! give identical results (inodes field by field, numbers as the order of
//! creation, errors by kind) and identical final namespaces.
#![allow(dead_code)]

use meta::conformance::{consistent, kind, t};
use meta::{
    Content, FileKind, Inode, InodeId, MetaStore, NewInode, RedbMeta, RenameFlags, SetAttr,
    XattrFlags,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const NAMES: [&[u8]; 3] = [b"a", b"b", b"c"];
const XNAMES: [&[u8]; 2] = [b"user.x", b"user.y"];

#[derive(Debug, Clone)]
pub enum Op {
    Create {
        dir: usize,
        name: usize,
        kind: u8,
    },
    Link {
        ino: usize,
        dir: usize,
        name: usize,
    },
    Unlink {
        dir: usize,
        name: usize,
        keep: bool,
    },
    Rmdir {
        dir: usize,
        name: usize,
    },
    Rename {
        dir: usize,
        name: usize,
        to: usize,
        to_name: usize,
        flags: u8,
    },
    SetAttr {
        ino: usize,
        perm: u16,
    },
    SetXattr {
        ino: usize,
        name: usize,
        value: u8,
        flags: u8,
    },
    RemoveXattr {
        ino: usize,
        name: usize,
    },
    SetContent {
        ino: usize,
        len: u8,
    },
    DropOrphan {
        ino: usize,
    },
}

pub fn op() -> impl Strategy<Value = Op> {
    let i = || 0usize..64;
    let n = || 0usize..NAMES.len();
    prop_oneof![
        4 => (i(), n(), 0u8..3).prop_map(|(dir, name, kind)| Op::Create { dir, name, kind }),
        1 => (i(), i(), n()).prop_map(|(ino, dir, name)| Op::Link { ino, dir, name }),
        2 => (i(), n(), any::<bool>()).prop_map(|(dir, name, keep)| Op::Unlink { dir, name, keep }),
        1 => (i(), n()).prop_map(|(dir, name)| Op::Rmdir { dir, name }),
        3 => (i(), n(), i(), n(), 0u8..3).prop_map(|(dir, name, to, to_name, flags)| Op::Rename {
            dir, name, to, to_name, flags
        }),
        1 => (i(), any::<u16>()).prop_map(|(ino, perm)| Op::SetAttr { ino, perm }),
        1 => (i(), 0usize..2, any::<u8>(), 0u8..3)
            .prop_map(|(ino, name, value, flags)| Op::SetXattr { ino, name, value, flags }),
        1 => (i(), 0usize..2).prop_map(|(ino, name)| Op::RemoveXattr { ino, name }),
        1 => (i(), any::<u8>()).prop_map(|(ino, len)| Op::SetContent { ino, len }),
        1 => i().prop_map(|ino| Op::DropOrphan { ino }),
    ]
}

/// What one operation returned, comparable across engines.
#[derive(Debug, PartialEq)]
pub enum Out {
    Inode(Inode),
    Gone(Option<Inode>),
    Unit,
    Err(&'static str),
}

/// An engine's inode number as the index of the inode in the order of
/// creation (engines number inodes differently: one over several
/// clusters puts a shard in the high bits); `u64::MAX` for one not seen yet.
fn idx(inos: &[InodeId], ino: InodeId) -> InodeId {
    InodeId(
        inos.iter()
            .position(|&i| i == ino)
            .map_or(u64::MAX, |p| p as u64),
    )
}

/// The root's birth time is the instant each store was opened: the only
/// field the two may differ in (its other times are set at the start).
fn norm(inos: &[InodeId], mut i: Inode) -> Inode {
    if i.id == InodeId::ROOT {
        i.attr.crtime = Default::default();
    }
    i.id = idx(inos, i.id);
    i
}

fn apply_raw(m: &dyn MetaStore, inos: &[InodeId], op: &Op, step: i64) -> Out {
    let at = |i: usize| inos[i % inos.len()];
    let now = t(step);
    let res = |r: meta::Result<Out>| r.unwrap_or_else(|e| Out::Err(kind(&e)));
    match *op {
        Op::Create { dir, name, kind } => {
            let (kind, content) = match kind {
                0 => (FileKind::File, Content::Inline(vec![step as u8; 3])),
                1 => (FileKind::Dir, Content::Empty),
                _ => (FileKind::Symlink, Content::Inline(b"target".to_vec())),
            };
            let new = NewInode {
                kind,
                perm: 0o640,
                uid: 7,
                gid: 8,
                rdev: 0,
                content,
                xattrs: vec![(b"user.born".to_vec(), vec![step as u8])],
            };
            res(m.create(at(dir), NAMES[name], new, now).map(Out::Inode))
        }
        Op::Link { ino, dir, name } => {
            res(m.link(at(ino), at(dir), NAMES[name], now).map(Out::Inode))
        }
        Op::Unlink { dir, name, keep } => {
            res(m.unlink(at(dir), NAMES[name], keep, now).map(Out::Inode))
        }
        Op::Rmdir { dir, name } => res(m.rmdir(at(dir), NAMES[name], now).map(|()| Out::Unit)),
        Op::Rename {
            dir,
            name,
            to,
            to_name,
            flags,
        } => {
            let flags = RenameFlags {
                noreplace: flags == 1,
                exchange: flags == 2,
            };
            let keep = |i: InodeId| idx(inos, i).0.is_multiple_of(2);
            res(m
                .rename(
                    at(dir),
                    NAMES[name],
                    at(to),
                    NAMES[to_name],
                    flags,
                    &keep,
                    now,
                )
                .map(Out::Gone))
        }
        Op::SetAttr { ino, perm } => {
            let changes = SetAttr {
                perm: Some(perm),
                mtime: Some(t(step + 1000)),
                ..SetAttr::default()
            };
            res(m.set_attr(at(ino), &changes, now).map(Out::Inode))
        }
        Op::SetXattr {
            ino,
            name,
            value,
            flags,
        } => {
            let flags =
                [XattrFlags::Either, XattrFlags::Create, XattrFlags::Replace][flags as usize];
            res(m
                .set_xattr(at(ino), XNAMES[name], &[value], flags, now)
                .map(|()| Out::Unit))
        }
        Op::RemoveXattr { ino, name } => res(m
            .remove_xattr(at(ino), XNAMES[name], now)
            .map(|()| Out::Unit)),
        Op::SetContent { ino, len } => res(m
            .set_content(
                at(ino),
                Content::Inline(vec![len; len as usize]),
                len as u64,
                now,
            )
            .map(Out::Inode)),
        Op::DropOrphan { ino } => res(m.drop_orphan(at(ino)).map(|()| Out::Unit)),
    }
}

/// Every inode with its xattrs, and every directory's entries, as a view
/// of the engine sees them.
pub fn snapshot(m: &dyn MetaStore, inos: &[InodeId]) -> Vec<String> {
    let view = m.view().unwrap();
    let mut out = Vec::new();
    let mut inodes = Vec::new();
    view.for_each_inode(&mut |i| inodes.push(i.clone()))
        .unwrap();
    for i in inodes {
        let n = idx(inos, i.id);
        out.push(format!(
            "{:?} xattrs {:?}",
            norm(inos, i.clone()),
            view.xattrs(i.id).unwrap()
        ));
        if i.attr.kind == FileKind::Dir {
            let entries: Vec<_> = view
                .entries(i.id)
                .unwrap()
                .into_iter()
                .map(|e| (e.name, idx(inos, e.ino), e.kind))
                .collect();
            out.push(format!("{n:?} entries {entries:?}"));
            out.push(format!(
                "{n:?} parent {:?}",
                idx(inos, m.parent(i.id).unwrap())
            ));
        } else {
            out.push(format!("{n:?} path {:?}", m.path_of(i.id).unwrap()));
        }
    }
    // Engines list inodes in their own number order.
    out.sort();
    out.push(format!("{:?}", m.counts().unwrap()));
    out
}

/// Runs `cases` random sequences, each on a fresh redb and a fresh
/// engine from `make`.
pub fn run(cases: u32, make: &dyn Fn() -> Box<dyn MetaStore>) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(op(), 1..48), |ops| {
            let dir = tempfile::tempdir().unwrap();
            let redb = RedbMeta::open(&dir.path().join("m.redb"), 1000, 1000).unwrap();
            let other = make();
            let times = SetAttr {
                atime: Some(t(0)),
                mtime: Some(t(0)),
                ..SetAttr::default()
            };
            for m in [&redb as &dyn MetaStore, other.as_ref()] {
                m.set_attr(InodeId::ROOT, &times, t(0)).unwrap();
            }
            let (mut ia, mut ib) = (vec![InodeId::ROOT], vec![InodeId::ROOT]);
            for (step, op) in ops.iter().enumerate() {
                let raw_a = apply_raw(&redb, &ia, op, step as i64);
                let raw_b = apply_raw(other.as_ref(), &ib, op, step as i64);
                let new = |raw: &Out, inos: &mut Vec<InodeId>| {
                    if let (Op::Create { .. }, Out::Inode(i)) = (op, raw) {
                        inos.push(i.id);
                    }
                };
                new(&raw_a, &mut ia);
                new(&raw_b, &mut ib);
                let (a, b) = (normed(raw_a, &ia), normed(raw_b, &ib));
                prop_assert_eq!(&a, &b, "step {}: {:?}", step, op);
            }
            prop_assert_eq!(snapshot(&redb, &ia), snapshot(other.as_ref(), &ib));
            consistent(other.as_ref());
            prop_assert!(redb.verify().unwrap().is_empty());
            Ok(())
        })
        .unwrap();
}

fn normed(out: Out, inos: &[InodeId]) -> Out {
    match out {
        Out::Inode(i) => Out::Inode(norm(inos, i)),
        Out::Gone(g) => Out::Gone(g.map(|i| norm(inos, i))),
        other => other,
    }
}
