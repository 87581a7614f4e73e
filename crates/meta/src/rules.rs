//! What an engine accepts before it changes anything: names, extended
//! attribute names, a new inode's content. Public so that every
//! `MetaStore` (redb here, etcd in `meta-etcd`) refuses the same things.

use crate::{Content, FileKind, MetaError, NewInode, Result, NAME_MAX};

/// The longest extended-attribute name (Linux's `XATTR_NAME_MAX`).
const XATTR_NAME_MAX: usize = 255;

/// A directory entry's name: not empty, `.`, `..`, nor over
/// [`NAME_MAX`], without `/` or NUL.
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(MetaError::NameTooLong);
    }
    if name.is_empty() {
        return Err(MetaError::Invalid("empty name"));
    }
    if name == b"." || name == b".." {
        return Err(MetaError::Invalid("`.` and `..` cannot be named"));
    }
    if name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(MetaError::Invalid("a name cannot contain `/` or NUL"));
    }
    Ok(())
}

/// An extended attribute's name: not empty, at most 255 bytes, no NUL.
pub fn check_xattr_name(name: &[u8]) -> Result<()> {
    if name.len() > XATTR_NAME_MAX {
        return Err(MetaError::NameTooLong);
    }
    if name.is_empty() {
        return Err(MetaError::Invalid("empty extended-attribute name"));
    }
    if name.contains(&0) {
        return Err(MetaError::Invalid(
            "an extended-attribute name cannot contain NUL",
        ));
    }
    Ok(())
}

/// The size a new inode starts with, or why `new` is refused.
pub fn new_size(new: &NewInode) -> Result<u64> {
    match (new.kind, &new.content) {
        (FileKind::Symlink, Content::Inline(t)) if !t.is_empty() => Ok(t.len() as u64),
        (FileKind::Symlink, _) => Err(MetaError::Invalid("a symlink needs a non-empty target")),
        (FileKind::File, Content::Inline(b)) => Ok(b.len() as u64),
        (_, Content::Empty) => Ok(0),
        (FileKind::File, Content::Recipe(_)) => Err(MetaError::Invalid(
            "a new file's content is empty or inline (set_content gives a recipe)",
        )),
        _ => Err(MetaError::Invalid("only files and symlinks have content")),
    }
}
