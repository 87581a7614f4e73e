//! Listing a bucket in S3's order (keys sorted by their UTF-8 bytes) by
//! walking its directories, without reading what the answer skips.
//!
//! A directory sorts as its name followed by `/` (every key below it
//! starts so), so expanding each directory's sorted entries in place
//! yields every key in order. The walk keeps the directories on its way
//! down in an explicit stack (no recursion): each holds its sorted
//! entries, so memory is bounded by the entries of one branch of the tree.
//! Subtrees that sort before the start point, lie outside the prefix, or
//! fold into one common prefix are not read at all.

use meta::{FileKind, Inode, InodeId};
use s3s::{S3ErrorCode, S3Result};

use crate::error::s3_from_fs;
use crate::names::UPLOAD_PREFIX;
use crate::tree::Tree;

/// Entries one readdir call returns.
const PAGE: usize = 1024;

pub struct Query<'a> {
    pub prefix: &'a str,
    pub delimiter: Option<&'a str>,
    /// Only names after this one (start-after, or the continuation token).
    pub start: Option<&'a str>,
    pub max: usize,
}

pub enum Item {
    /// A file, or an empty directory as its marker `dir/`.
    Key {
        key: String,
        inode: Inode,
    },
    Prefix(String),
}

impl Item {
    pub fn name(&self) -> &str {
        match self {
            Item::Key { key, .. } => key,
            Item::Prefix(p) => p,
        }
    }
}

pub struct Listing {
    pub items: Vec<Item>,
    pub truncated: bool,
}

struct Node {
    /// The key (a directory's with its `/`).
    key: String,
    ino: InodeId,
    dir: bool,
}

/// The entries of directory `ino` at key prefix `path`, sorted as keys.
/// Names that cannot be keys (not UTF-8, a PUT's temporary file) and
/// anything but files and directories are left out.
fn children(tree: &Tree, ino: InodeId, path: &str) -> S3Result<Vec<Node>> {
    let mut out = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = tree
            .readdir(ino, after.as_deref(), PAGE)
            .map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, path))?;
        let Some(last) = page.last() else { break };
        after = Some(last.name.clone());
        for e in page {
            let Ok(name) = String::from_utf8(e.name) else {
                continue;
            };
            if name.starts_with(UPLOAD_PREFIX) {
                continue;
            }
            match e.kind {
                FileKind::File => out.push(Node {
                    key: format!("{path}{name}"),
                    ino: e.ino,
                    dir: false,
                }),
                FileKind::Dir => out.push(Node {
                    key: format!("{path}{name}/"),
                    ino: e.ino,
                    dir: true,
                }),
                _ => {}
            }
        }
    }
    out.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

struct Collect<'a> {
    q: &'a Query<'a>,
    items: Vec<Item>,
    truncated: bool,
}

impl Collect<'_> {
    /// The common prefix `key` folds into, if the delimiter occurs in it
    /// after the prefix.
    fn folds(&self, key: &str) -> Option<String> {
        let d = self.q.delimiter.filter(|d| !d.is_empty())?;
        let plen = self.q.prefix.len();
        key[plen..]
            .find(d)
            .map(|i| key[..plen + i + d.len()].to_string())
    }

    /// Takes one item in order; false once the page is full and one more
    /// item proved it truncated.
    fn push(&mut self, item: Item) -> bool {
        if self.q.start.is_some_and(|s| item.name() <= s) {
            return true;
        }
        if let (Some(Item::Prefix(last)), Item::Prefix(p)) = (self.items.last(), &item) {
            if last == p {
                return true;
            }
        }
        if self.items.len() >= self.q.max {
            self.truncated = true;
            return false;
        }
        self.items.push(item);
        true
    }
}

pub fn list(tree: &Tree, bucket: InodeId, q: &Query<'_>) -> S3Result<Listing> {
    let mut c = Collect {
        q,
        items: Vec::new(),
        truncated: false,
    };
    let mut stack = vec![children(tree, bucket, "")?.into_iter()];
    while let Some(top) = stack.last_mut() {
        let Some(node) = top.next() else {
            stack.pop();
            continue;
        };
        let inside = node.key.starts_with(q.prefix);
        if !node.dir {
            if !inside {
                continue;
            }
            let item = match c.folds(&node.key) {
                Some(p) => Item::Prefix(p),
                None => {
                    let inode = tree
                        .getattr(node.ino)
                        .map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, &node.key))?;
                    Item::Key {
                        key: node.key,
                        inode,
                    }
                }
            };
            if !c.push(item) {
                break;
            }
            continue;
        }
        if !inside && !q.prefix.starts_with(&node.key) {
            continue;
        }
        // Everything below sorts before the start point.
        if q.start
            .is_some_and(|s| s > node.key.as_str() && !s.starts_with(&node.key))
        {
            continue;
        }
        if inside {
            if let Some(p) = c.folds(&node.key) {
                if !c.push(Item::Prefix(p)) {
                    break;
                }
                continue;
            }
        }
        let below = children(tree, node.ino, &node.key)?;
        if below.is_empty() {
            if inside {
                let inode = tree
                    .getattr(node.ino)
                    .map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, &node.key))?;
                if !c.push(Item::Key {
                    key: node.key,
                    inode,
                }) {
                    break;
                }
            }
            continue;
        }
        stack.push(below.into_iter());
    }
    Ok(Listing {
        items: c.items,
        truncated: c.truncated,
    })
}
