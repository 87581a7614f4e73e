//! The board where clients of one shared namespace agree on a garbage
//! collection (`gc`'s `peers` module holds the protocol): which collection
//! runs and in which phase, which clients are mounted, and which of them
//! answered the phase. An engine shared by several clients (etcd) keeps
//! it beside the namespace; a private engine has none.

use crate::Result;

/// Where a collection across clients is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Every mounted client starts recording the chunks its writers
    /// deduplicate against and hands in what its open files reach.
    Marking,
    /// The collector named the containers it will delete: every mounted
    /// client stops deduplicating against them and hands in what it
    /// recorded.
    Sweeping,
}

/// The collection running now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Collecting {
    /// Unique per collection.
    pub epoch: u64,
    /// The client that collects.
    pub collector: u64,
    pub phase: Phase,
}

/// What [`CollectionBoard::forget`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forget {
    /// The client's mark is gone: collections no longer wait for it.
    Forgotten,
    /// The client is registered with the engine (running and reaching
    /// it): its mark stays.
    Alive,
    /// The client was not marked mounted.
    NotMounted,
}

/// See the module doc. Every call is one request (or one transaction) of
/// the engine, with its timeouts: none waits for another client. Clients
/// are named by their number in the chunk store (stable across restarts,
/// one process at a time), not by the engine's own per-open ids.
pub trait CollectionBoard: Send + Sync {
    /// The collection running now, if any.
    fn collecting(&self) -> Result<Option<Collecting>>;

    /// Announces a collection by this client in phase `Marking`: `Ok(None)`
    /// with it announced, `Ok(Some(other))` when another client's runs
    /// (nothing changed). A record of this client's own (a collection a
    /// crash cut short: one process holds a client number at a time) is
    /// replaced.
    fn announce(&self, me: u64, epoch: u64) -> Result<Option<Collecting>>;

    /// Moves this client's collection `epoch` to `phase`.
    fn advance(&self, me: u64, epoch: u64, phase: Phase) -> Result<()>;

    /// Ends this client's collection `epoch` (and forgets its answers).
    fn finish(&self, me: u64, epoch: u64) -> Result<()>;

    /// Marks client `me` mounted (until [`CollectionBoard::unmounted`] or
    /// the engine is closed; a crash leaves the mark, so a collection waits
    /// for this client until it mounts again).
    fn mounted(&self, me: u64) -> Result<()>;

    /// Takes this client's mounted mark away.
    fn unmounted(&self, me: u64) -> Result<()>;

    /// Takes away the mounted mark of `client`, gone for good (killed,
    /// its machine lost), so that collections stop waiting for it: only
    /// once its registration with the engine has lapsed (it is down or
    /// cut off), in the same transaction that checks so. A client
    /// forgotten while it was only cut off finds out before it writes
    /// again, and writes nothing more until it is mounted again.
    fn forget(&self, client: u64) -> Result<Forget>;

    /// Whether this client may still write what a collection must see
    /// before it deletes anything (a version or a snapshot, whose root
    /// names chunks): an error once it was forgotten
    /// ([`CollectionBoard::forget`]), for good. A yes holds for at least
    /// half the engine's registration TTL (no one can forget the client
    /// sooner), the time a root has to be written. An engine without
    /// registrations always says yes.
    fn may_write(&self) -> Result<()> {
        Ok(())
    }

    /// Records that client `me`'s repository reserved the container ids
    /// from `from` to below `below`, keeping the highest mark any
    /// repository with this number recorded. Refused when the recorded
    /// mark is above `from`: another repository with this client number
    /// (a copy of this one, used since it was copied) reserved ids this
    /// one would hand out again. Called at mount with the store's id mark
    /// as both, and after each reservation, once the store made it
    /// durable. An engine whose namespace is one client's always says yes.
    fn ids_reserved(&self, me: u64, from: u64, below: u64) -> Result<()> {
        let _ = (me, from, below);
        Ok(())
    }

    /// The clients marked mounted, in number order.
    fn mounted_clients(&self) -> Result<Vec<u64>>;

    /// Records that this client answered `phase` of collection `epoch`.
    fn answer(&self, me: u64, epoch: u64, phase: Phase) -> Result<()>;

    /// The clients that answered `phase` of collection `epoch`.
    fn answered(&self, epoch: u64, phase: Phase) -> Result<Vec<u64>>;
}
