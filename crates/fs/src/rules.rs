//! Which protection a file's data gets: the `user.cairn.policy` xattr, else
//! the first matching rule of `cairn.toml`, else the default rule.
//!
//! Rules match what is known when a file's write stream opens: its path
//! relative to the mount root (from the metadata engine's parent pointers:
//! the name it was last given), its
//! extension, its size so far and its owner. A directory's xattr is copied
//! to each child created in it, so inheritance is an xattr like any other.
//!
//! Chunking rules ([`ChunkingRule`]) choose a file's chunking mode the same
//! way, after its `user.cairn.chunking` xattr (see [`crate::chunkmode`]).

use cas::Protection;

use crate::chunkmode::{Chunking, BLOCK_DEFAULT};
use globset::{Glob, GlobBuilder, GlobMatcher};

/// The xattr that overrides the rules for one file or directory.
pub const POLICY_XATTR: &[u8] = b"user.cairn.policy";

/// Why a rule's match cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum MatchError {
    #[error("bad path glob {glob:?}: {source}")]
    Glob {
        glob: String,
        #[source]
        source: globset::Error,
    },
    #[error("min_size {min} is above max_size {max}")]
    SizeRange { min: u64, max: u64 },
}

/// What is known about a file when its protection is chosen.
#[derive(Debug, Clone, Copy)]
pub struct FileFacts<'a> {
    /// Relative to the mount root, without a leading `/`; `None` when the
    /// file has no known name (an orphan, or a hard link's name gone).
    pub path: Option<&'a str>,
    pub size: u64,
    pub uid: u32,
}

/// The conditions of one rule; all given ones must hold.
#[derive(Debug, Clone, Default)]
pub struct Match {
    glob: Option<GlobMatcher>,
    extensions: Vec<String>,
    min_size: Option<u64>,
    max_size: Option<u64>,
    uid: Option<u32>,
}

impl Match {
    /// A glob's `*` stays within one path component; `**` crosses them.
    /// Extensions are compared without the dot and ignoring case.
    pub fn new(
        glob: Option<&str>,
        extensions: &[String],
        min_size: Option<u64>,
        max_size: Option<u64>,
        uid: Option<u32>,
    ) -> Result<Match, MatchError> {
        let glob = glob
            .map(|g| {
                GlobBuilder::new(g.trim_start_matches('/'))
                    .literal_separator(true)
                    .build()
                    .map(|g: Glob| g.compile_matcher())
                    .map_err(|source| MatchError::Glob {
                        glob: g.to_owned(),
                        source,
                    })
            })
            .transpose()?;
        if let (Some(lo), Some(hi)) = (min_size, max_size) {
            if lo > hi {
                return Err(MatchError::SizeRange { min: lo, max: hi });
            }
        }
        Ok(Match {
            glob,
            extensions: extensions
                .iter()
                .map(|e| e.trim_start_matches('.').to_ascii_lowercase())
                .collect(),
            min_size,
            max_size,
            uid,
        })
    }

    pub fn matches(&self, f: &FileFacts<'_>) -> bool {
        if let Some(glob) = &self.glob {
            if !f.path.is_some_and(|p| glob.is_match(p)) {
                return false;
            }
        }
        if !self.extensions.is_empty() {
            let ext = f
                .path
                .and_then(|p| p.rsplit('/').next())
                .and_then(|name| name.rsplit_once('.'))
                .map(|(_, ext)| ext.to_ascii_lowercase());
            if !ext.is_some_and(|e| self.extensions.contains(&e)) {
                return false;
            }
        }
        self.min_size.is_none_or(|lo| f.size >= lo)
            && self.max_size.is_none_or(|hi| f.size <= hi)
            && self.uid.is_none_or(|u| f.uid == u)
    }
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub matcher: Match,
    pub protection: Protection,
}

/// Where a file's protection came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The file's own `user.cairn.policy` (set on it or inherited from its
    /// directory when it was created).
    Xattr,
    /// The named rule.
    Rule(String),
    /// No rule matched.
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Xattr => write!(f, "xattr {}", String::from_utf8_lossy(POLICY_XATTR)),
            Source::Rule(name) => write!(f, "rule {name:?}"),
            Source::Default => f.write_str("the default rule"),
        }
    }
}

/// A protection and why it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub source: Source,
    pub protection: Protection,
}

/// A rule choosing the chunking mode of the files it matches.
#[derive(Debug, Clone)]
pub struct ChunkingRule {
    pub name: String,
    pub matcher: Match,
    pub chunking: Chunking,
}

/// Extensions of files overwritten in place, chunked in fixed blocks when
/// `cairn.toml` names no chunking rules: disk images and databases.
pub const FIXED_EXTENSIONS: &[&str] = &[
    "img", "qcow2", "vmdk", "raw", "vdi", "vhd", "vhdx", "db", "sqlite", "sqlite3", "mdb", "ibd",
    "ldb",
];

/// The chunking rules that apply when `cairn.toml` names none: the
/// [`FIXED_EXTENSIONS`] in blocks of [`BLOCK_DEFAULT`].
pub fn default_chunking_rules() -> Vec<ChunkingRule> {
    let extensions: Vec<String> = FIXED_EXTENSIONS.iter().map(|e| e.to_string()).collect();
    vec![ChunkingRule {
        name: "images and databases".into(),
        matcher: Match::new(None, &extensions, None, None, None).expect("no glob, no sizes"),
        chunking: Chunking::Fixed(BLOCK_DEFAULT),
    }]
}

/// The rules, in order, and the default.
#[derive(Debug, Clone)]
pub struct Rules {
    rules: Vec<Rule>,
    default: Protection,
    chunking: Vec<ChunkingRule>,
}

impl Rules {
    /// Redundancy rules, with the default chunking rules.
    pub fn new(rules: Vec<Rule>, default: Protection) -> Rules {
        Rules {
            rules,
            default,
            chunking: default_chunking_rules(),
        }
    }

    /// Replaces the chunking rules (an empty list leaves every file's
    /// mode to its xattr and the detector).
    pub fn with_chunking(mut self, chunking: Vec<ChunkingRule>) -> Rules {
        self.chunking = chunking;
        self
    }

    /// The mode of the first chunking rule matching `facts`, and its name.
    pub fn chunking(&self, facts: &FileFacts<'_>) -> Option<(&str, Chunking)> {
        self.chunking
            .iter()
            .find(|r| r.matcher.matches(facts))
            .map(|r| (r.name.as_str(), r.chunking))
    }

    pub fn chunking_rules(&self) -> &[ChunkingRule] {
        &self.chunking
    }

    /// Whether any chunking rule looks at a file's path.
    pub fn chunking_paths(&self) -> bool {
        self.chunking
            .iter()
            .any(|r| r.matcher.glob.is_some() || !r.matcher.extensions.is_empty())
    }

    /// The default rule's protection.
    pub fn default_protection(&self) -> &Protection {
        &self.default
    }

    /// Whether any rule looks at a file's path (a glob or extensions).
    pub fn match_paths(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.matcher.glob.is_some() || !r.matcher.extensions.is_empty())
    }

    /// The first rule matching `facts`, else the default.
    pub fn choose(&self, facts: &FileFacts<'_>) -> Choice {
        match self.rules.iter().find(|r| r.matcher.matches(facts)) {
            Some(rule) => Choice {
                source: Source::Rule(rule.name.clone()),
                protection: rule.protection.clone(),
            },
            None => Choice {
                source: Source::Default,
                protection: self.default.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunkmode::BlockSize;
    use cas::{BranchId, Policy};

    fn prot(p: &str) -> Protection {
        Protection {
            policy: p.parse::<Policy>().unwrap(),
            branches: vec![BranchId(0), BranchId(1), BranchId(2)],
        }
    }

    fn rule(name: &str, m: Match, p: &str) -> Rule {
        Rule {
            name: name.into(),
            matcher: m,
            protection: prot(p),
        }
    }

    fn facts(path: Option<&str>, size: u64, uid: u32) -> FileFacts<'_> {
        FileFacts { path, size, uid }
    }

    #[test]
    fn first_matching_rule_wins_else_default() {
        let rules = Rules::new(
            vec![
                rule(
                    "photos",
                    Match::new(Some("photos/**"), &["JPG".into()], None, None, None).unwrap(),
                    "mirror:3",
                ),
                rule(
                    "big",
                    Match::new(None, &[], Some(1 << 20), None, None).unwrap(),
                    "rs:2+1",
                ),
                rule(
                    "alice",
                    Match::new(Some("*.txt"), &[], None, Some(100), Some(1000)).unwrap(),
                    "mirror:2",
                ),
            ],
            prot("single"),
        );
        let pick = |f: FileFacts<'_>| rules.choose(&f).source;
        let named = |n: &str| Source::Rule(n.into());
        assert_eq!(pick(facts(Some("photos/a/b.jpg"), 5, 0)), named("photos"));
        assert_eq!(pick(facts(Some("photos/a/b.png"), 5, 0)), Source::Default);
        assert_eq!(
            pick(facts(Some("photos/b.jpg"), 2 << 20, 0)),
            named("photos")
        );
        assert_eq!(pick(facts(Some("x/b.jpg"), 2 << 20, 0)), named("big"));
        assert_eq!(pick(facts(None, 2 << 20, 0)), named("big"));
        assert_eq!(pick(facts(Some("n.txt"), 100, 1000)), named("alice"));
        assert_eq!(pick(facts(Some("n.txt"), 101, 1000)), Source::Default);
        assert_eq!(pick(facts(Some("n.txt"), 10, 1001)), Source::Default);
        // `*` stays within one directory.
        assert_eq!(pick(facts(Some("d/n.txt"), 10, 1000)), Source::Default);
        assert_eq!(pick(facts(None, 10, 1000)), Source::Default);
        assert_eq!(
            rules.choose(&facts(Some("photos/x.jpg"), 0, 0)).protection,
            prot("mirror:3")
        );
    }

    #[test]
    fn images_and_databases_are_fixed_by_default() {
        let rules = Rules::new(Vec::new(), prot("single"));
        let fixed = Some(Chunking::Fixed(BLOCK_DEFAULT));
        let pick = |p| rules.chunking(&facts(Some(p), 0, 0)).map(|(_, c)| c);
        assert_eq!(pick("vm/disk.QCOW2"), fixed);
        assert_eq!(pick("x.sqlite"), fixed);
        assert_eq!(pick("notes.txt"), None);
        let mine = ChunkingRule {
            name: "db".into(),
            matcher: Match::new(Some("db/**"), &[], None, None, None).unwrap(),
            chunking: Chunking::Fixed(BlockSize::new(8192).unwrap()),
        };
        let rules = rules.with_chunking(vec![mine]);
        assert_eq!(rules.chunking(&facts(Some("vm/disk.img"), 0, 0)), None);
        assert_eq!(
            rules.chunking(&facts(Some("db/a/t"), 0, 0)),
            Some(("db", Chunking::Fixed(BlockSize::new(8192).unwrap())))
        );
    }

    #[test]
    fn bad_matches_are_refused() {
        let e = Match::new(Some("a/[b"), &[], None, None, None).unwrap_err();
        assert!(
            matches!(&e, MatchError::Glob { glob, .. } if glob == "a/[b"),
            "{e}"
        );
        let e = Match::new(None, &[], Some(10), Some(5), None).unwrap_err();
        assert!(
            matches!(e, MatchError::SizeRange { min: 10, max: 5 }),
            "{e}"
        );
        assert!(e.to_string().contains("min_size"), "{e}");
    }
}
