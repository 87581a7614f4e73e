use ids::ChunkId;

/// An inode number. Stable across remounts, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InodeId(pub u64);

impl InodeId {
    /// The root directory (FUSE's root inode number).
    pub const ROOT: InodeId = InodeId(1);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileKind {
    /// The byte that stands for the kind in stored records (the metadata
    /// engine's and the version trees').
    pub fn code(self) -> u8 {
        match self {
            FileKind::File => 1,
            FileKind::Dir => 2,
            FileKind::Symlink => 3,
            FileKind::Fifo => 4,
            FileKind::Socket => 5,
            FileKind::CharDevice => 6,
            FileKind::BlockDevice => 7,
        }
    }

    pub fn from_code(b: u8) -> Option<FileKind> {
        Some(match b {
            1 => FileKind::File,
            2 => FileKind::Dir,
            3 => FileKind::Symlink,
            4 => FileKind::Fifo,
            5 => FileKind::Socket,
            6 => FileKind::CharDevice,
            7 => FileKind::BlockDevice,
            _ => return None,
        })
    }
}

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

impl Timestamp {
    pub fn now() -> Self {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp {
            secs: d.as_secs() as i64,
            nanos: d.subsec_nanos(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub kind: FileKind,
    /// Permission bits including setuid, setgid and sticky (mode & 0o7777).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u32,
    pub rdev: u32,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub crtime: Timestamp,
}

/// Where a file's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// No bytes (directories, special files, empty files).
    Empty,
    /// The bytes themselves: small files and symlink targets.
    Inline(Vec<u8>),
    /// A recipe tree in the chunk store (see the `recipe` crate).
    Recipe(ChunkId),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inode {
    pub id: InodeId,
    pub attr: Attr,
    pub content: Content,
}

/// What `create` makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInode {
    pub kind: FileKind,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    /// A symlink's target goes here as `Content::Inline`.
    pub content: Content,
    /// Extended attributes the inode is created with (an inherited ACL or
    /// policy), stored in the same operation.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl NewInode {
    /// An empty inode of `kind` owned by root: mode 0755 for a directory,
    /// 0644 otherwise, no content, no extended attributes.
    pub fn empty(kind: FileKind) -> NewInode {
        NewInode {
            kind,
            perm: if kind == FileKind::Dir { 0o755 } else { 0o644 },
            uid: 0,
            gid: 0,
            rdev: 0,
            content: Content::Empty,
            xattrs: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: InodeId,
    pub kind: FileKind,
}

/// Attribute changes; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub perm: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
}

/// An extended attribute set to a value, or removed (`None`), as one part
/// of [`crate::MetaStore::update`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XattrChange {
    pub name: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum XattrFlags {
    #[default]
    Either,
    Create,
    Replace,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub files: u64,
    pub dirs: u64,
}

/// An inode's extended attributes, name -> value, in name order.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// What [`crate::MetaStore::lookup_path`] finds: the inode, and its
/// extended attributes when the path index carried them (`None` when the
/// path was walked or they are over the entry's bound: ask for them), and
/// where a small file's data chunks were stored, when the entry carried
/// that for the recipe the inode has now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathFound {
    pub inode: Inode,
    pub xattrs: Option<Xattrs>,
    pub hints: Option<ContentHints>,
}

impl PathFound {
    /// An inode found without its xattrs or hints.
    pub fn walked(inode: Inode) -> Self {
        PathFound {
            inode,
            xattrs: None,
            hints: None,
        }
    }
}

/// The bytes of a chunk's location as the chunk store encodes it: the
/// engine keeps them for `fs`, and never reads them.
pub const LOCATION_LEN: usize = 28;

/// One data chunk of a small file as its path-index entry remembers it:
/// the chunk, the bytes of the file it gives (from its start), and where
/// the chunk store had it when the entry was written. Only a hint: the
/// chunk may have moved since, and its reader verifies the id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHint {
    pub id: ChunkId,
    pub len: u32,
    pub location: [u8; LOCATION_LEN],
}

/// A small file's data chunks, in file order, with no holes between
/// them, for the recipe root they were computed from
/// ([`crate::MetaStore::set_path_hints`]). An entry keeps them only while
/// its file has that root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentHints {
    pub root: ChunkId,
    pub chunks: Vec<ChunkHint>,
}
