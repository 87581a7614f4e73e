//! Garbage collection across the clients of one shared namespace
//! (`docs/cluster.md`, "Collection across clients").
//!
//! Every client keeps references nobody else can see: the chunks its
//! writers deduplicated against and its open files (data written, not yet
//! recorded; files unlinked while open). A collector cannot mark those, so
//! it asks, through the namespace engine's [`CollectionBoard`], and
//! deletes nothing until every mounted client answered:
//!
//! 1. **Announce** (phase `Marking`). Each mounted client turns on its
//!    store's recording of deduplication hits (and of the chunks of each
//!    file it opens from then on: the collector marks the namespace only
//!    after every answer, and another client may overwrite or unlink the
//!    file before that), then, holding its history
//!    lock (a version on its way to a root is finished first), marks what
//!    its open files reach and hands that in (`gc/<epoch>/client-<n>-marks`
//!    on the branches), then answers. The collector waits for every
//!    client marked mounted, then marks every client's roots, the answers
//!    and the namespace (read after the answers: anything recorded later
//!    was recorded by a client already recording).
//! 2. **Sweep** (phase `Sweeping`). The collector copies the live chunks
//!    of the containers it chose (its own only), makes the copies durable,
//!    and names those containers and its orphans
//!    (`gc/<epoch>/doomed`). Each client stops deduplicating against
//!    them and indexing them again, hands in every chunk it deduplicated
//!    against since phase 1 (`client-<n>-hits`), and answers. The
//!    collector copies those still in a doomed container, then deletes.
//!    From its answer in phase 1 to the end, a client writes no version
//!    and no snapshot (`fs::FsError::HistoryPaused`): a root written
//!    after the collector listed the roots, from a view of the namespace
//!    older than the collector's, could name files deleted in between.
//! 3. **Finish.** The record goes; each client forgets the doomed
//!    containers' entries and finds what it still reads at its copies.
//!
//! A client that mounts while a collection runs starts recording before it
//! serves anything ([`participate`]), and is waited for from then on;
//! mounting during the sweep, it also avoids the doomed containers at
//! once (the collector may have passed its wait for answers already). A
//! client that does not answer within [`crate::GcOptions::peer_wait`]
//! (down, cut off, or crashed with its mounted mark left) ends the
//! collection before anything is deleted: space leaks until it is back,
//! nothing is lost. So does a collector that stops: its record stays
//! (the board uses no lease), other clients keep avoiding the containers
//! it named, and only it (restarted) replaces the record.

use std::collections::HashSet;
use std::sync::Weak;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cas::{ChunkId, ContainerId, Store};
use fs::reach::MarkSet;
use fs::Fs;
use meta::{CollectionBoard, Forget, Phase};

use crate::{GcError, Result};

/// How often a participant reads the board.
const POLL: Duration = Duration::from_secs(1);
/// How often the collector looks for answers.
const ANSWER_POLL: Duration = Duration::from_millis(200);

fn marks_note(client: u64) -> String {
    format!("client-{client}-marks")
}

fn hits_note(client: u64) -> String {
    format!("client-{client}-hits")
}

const DOOMED_NOTE: &str = "doomed";

fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::Marking => "marking",
        Phase::Sweeping => "sweeping",
    }
}

/// The collector's side: one collection announced on the board, ended
/// when dropped.
pub(crate) struct Across<'a> {
    board: &'a dyn CollectionBoard,
    store: &'a Store,
    me: u64,
    epoch: u64,
    wait: Duration,
}

impl<'a> Across<'a> {
    /// Refuses when another client's collection runs; `None` when the
    /// namespace is this client's own.
    pub(crate) fn check(fs: &'a Fs) -> Result<Option<&'a dyn CollectionBoard>> {
        let Some(board) = fs.board() else {
            return Ok(None);
        };
        let me = u64::from(fs.store().client().get());
        match board.collecting()? {
            Some(other) if other.collector != me => Err(GcError::OtherCollecting {
                collector: other.collector,
            }),
            _ => Ok(Some(board)),
        }
    }

    /// Announces a collection (phase `Marking`).
    pub(crate) fn announce(
        board: &'a dyn CollectionBoard,
        store: &'a Store,
        wait: Duration,
    ) -> Result<Self> {
        let me = u64::from(store.client().get());
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let epoch = (millis << 16) | (me & 0xffff);
        if let Some(other) = board.announce(me, epoch)? {
            return Err(GcError::OtherCollecting {
                collector: other.collector,
            });
        }
        tracing::info!(
            epoch = format!("{epoch:016x}"),
            "announced a collection across clients"
        );
        Ok(Across {
            board,
            store,
            me,
            epoch,
            wait,
        })
    }

    /// Waits until every client marked mounted (but this one) answered
    /// `phase`; returns them.
    fn wait_for(&self, phase: Phase) -> Result<Vec<u64>> {
        let started = Instant::now();
        loop {
            let mounted: Vec<u64> = self
                .board
                .mounted_clients()?
                .into_iter()
                .filter(|c| *c != self.me)
                .collect();
            let answered: HashSet<u64> = self
                .board
                .answered(self.epoch, phase)?
                .into_iter()
                .collect();
            let missing: Vec<u64> = mounted
                .iter()
                .copied()
                .filter(|c| !answered.contains(c))
                .collect();
            if missing.is_empty() {
                return Ok(mounted);
            }
            if started.elapsed() >= self.wait {
                return Err(GcError::PeersSilent {
                    phase: phase_name(phase),
                    clients: missing,
                    waited: self.wait,
                });
            }
            std::thread::sleep(ANSWER_POLL);
        }
    }

    /// Phase 1's answers: what every other client's open files reach.
    pub(crate) fn gather_marks(&self, marks: &mut MarkSet) -> Result<()> {
        for client in self.wait_for(Phase::Marking)? {
            let bytes = self.store.get_note(self.epoch, &marks_note(client))?;
            if !marks.extend_from_bytes(&bytes) {
                return Err(GcError::BadAnswer { client });
            }
        }
        Ok(())
    }

    /// Phase 2: names `doomed` and returns the chunks other clients
    /// deduplicated against since phase 1.
    pub(crate) fn sweep(&self, doomed: &[ContainerId]) -> Result<Vec<ChunkId>> {
        let list: Vec<u8> = doomed.iter().flat_map(|c| c.0.to_le_bytes()).collect();
        self.store.put_note(self.epoch, DOOMED_NOTE, &list)?;
        self.board.advance(self.me, self.epoch, Phase::Sweeping)?;
        let mut hits = Vec::new();
        for client in self.wait_for(Phase::Sweeping)? {
            let bytes = self.store.get_note(self.epoch, &hits_note(client))?;
            if !bytes.len().is_multiple_of(32) {
                return Err(GcError::BadAnswer { client });
            }
            hits.extend(
                bytes
                    .chunks_exact(32)
                    .map(|b| ChunkId::from_bytes(b.try_into().expect("32 bytes"))),
            );
        }
        Ok(hits)
    }
}

impl Drop for Across<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.board.finish(self.me, self.epoch) {
            tracing::warn!(error = %e, "the record of a collection across clients was not ended; this client ends it at its next collection");
        }
        if let Err(e) = self.store.delete_notes(self.epoch) {
            tracing::warn!(error = %e, "a collection's notes were left on the branches");
        }
    }
}

/// How long [`leave`] waits for another client's collection to end.
const LEAVE_WAIT: Duration = Duration::from_secs(30);

/// This client's part ends (at unmount, after the file system made
/// everything durable): its mounted mark is taken away, so collections stop
/// waiting for it. While another client's collection runs, the mark stays
/// until it ended (at most [`LEAVE_WAIT`]; the participant goes on
/// answering meanwhile): the collector still needs what this client hands
/// in at the sweep. Past that, the mark is left (logged): the next
/// collection waits for this client until it is mounted again or
/// forgotten. A process that exits without this leaves its mark too.
pub fn leave(fs: &Fs) {
    let Some(board) = fs.board() else {
        return;
    };
    let me = u64::from(fs.store().client().get());
    let started = Instant::now();
    loop {
        match board.collecting() {
            Ok(Some(c)) if c.collector != me => {
                if started.elapsed() >= LEAVE_WAIT {
                    tracing::warn!(
                        collector = c.collector,
                        "unmounted during another client's collection: the mounted mark stays; \
                         collections wait for this client until it is mounted again"
                    );
                    return;
                }
                std::thread::sleep(ANSWER_POLL);
            }
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(error = %e, "the mounted mark was left: collections wait for this client until it is mounted again");
                return;
            }
        }
    }
    if let Err(e) = board.unmounted(me) {
        tracing::warn!(error = %e, "the mounted mark was left: collections wait for this client until it is mounted again");
    }
}

/// Takes away the mounted mark of `client`, killed or lost for good, so
/// that collections stop waiting for it ([`CollectionBoard::forget`]):
/// refused while its registration with the engine lives. `Ok(false)`
/// when it was not marked mounted. Run it only for a client that is not
/// coming back with what it held: a client forgotten while it was merely
/// cut off writes nothing more once it is back (it must be mounted
/// again), and what it wrote but had not recorded may be lost.
pub fn forget_client(board: &dyn CollectionBoard, client: u64) -> Result<bool> {
    match board.forget(client)? {
        Forget::Forgotten => {
            tracing::warn!(
                client,
                "forgot the client: collections no longer wait for it"
            );
            Ok(true)
        }
        Forget::NotMounted => Ok(false),
        Forget::Alive => {
            let e = GcError::StillAlive { client };
            tracing::error!(error = %e, "the client was not forgotten");
            Err(e)
        }
    }
}

/// A client's side, for as long as the file system lives: joins (see
/// [`Participant::join`], before the caller serves anything), then
/// answers every collection of another client from a thread that ends
/// with the file system. Nothing happens for a namespace that is this
/// client's own.
pub fn participate(fs: &std::sync::Arc<Fs>) -> Result<()> {
    let Some(peer) = Participant::join(fs)? else {
        return Ok(());
    };
    let weak = std::sync::Arc::downgrade(fs);
    std::thread::Builder::new()
        .name("cairn-gc-peer".into())
        .spawn(move || peer.run(weak))
        .map_err(GcError::Thread)?;
    Ok(())
}

/// One client's part in the other clients' collections.
pub struct Participant {
    me: u64,
    /// The collection this client takes part in, and the last phase it
    /// answered.
    answered: Option<(u64, Option<Phase>)>,
}

/// The containers collection `c` named to delete (phase `Sweeping`).
fn doomed(store: &Store, c: &meta::Collecting) -> Result<Vec<ContainerId>> {
    let list = store.get_note(c.epoch, DOOMED_NOTE)?;
    if !list.len().is_multiple_of(8) {
        return Err(GcError::BadAnswer {
            client: c.collector,
        });
    }
    Ok(list
        .chunks_exact(8)
        .map(|b| ContainerId(u64::from_le_bytes(b.try_into().expect("8 bytes"))))
        .collect())
}

impl Participant {
    /// Marks this client mounted and, if another client's collection runs
    /// now, starts recording at once; if it sweeps, also stops
    /// deduplicating against the containers it named (the collector may
    /// have gathered every answer it waits for before this client was
    /// marked, and then never asks what it deduplicated against). `None`
    /// for a namespace that is this client's own.
    pub fn join(fs: &Fs) -> Result<Option<Participant>> {
        let Some(board) = fs.board() else {
            return Ok(None);
        };
        let me = u64::from(fs.store().client().get());
        board.mounted(me)?;
        let mut peer = Participant { me, answered: None };
        if let Some(c) = board.collecting()? {
            if c.collector != me {
                let _history = fs.history_lock();
                fs.store().record_for_peer();
                if c.phase == Phase::Sweeping {
                    fs.store().doom(&doomed(fs.store(), &c)?);
                }
                fs.pause_history(Some(c.collector));
                peer.answered = Some((c.epoch, None));
            }
        }
        Ok(Some(peer))
    }

    fn run(mut self, fs: Weak<Fs>) {
        let mut last_error: Option<Instant> = None;
        loop {
            std::thread::sleep(POLL);
            let Some(fs) = fs.upgrade() else {
                return;
            };
            if let Err(e) = self.step(&fs) {
                // Unanswered, the collector gives up: logged, not fatal.
                if last_error.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!(error = %e, "could not take part in another client's collection");
                    last_error = Some(Instant::now());
                }
            }
        }
    }

    /// Reads the board once and does what it asks: answers the phase of a
    /// collection not answered yet, or ends this client's part in one
    /// that is over.
    pub fn step(&mut self, fs: &Fs) -> Result<()> {
        let board = fs
            .board()
            .expect("a participant runs over a shared namespace");
        let store = fs.store();
        let now = board.collecting()?.filter(|c| c.collector != self.me);
        if let Some((epoch, _)) = self.answered {
            if now.is_none_or(|c| c.epoch != epoch) {
                store.peer_collection_ended()?;
                fs.pause_history(None);
                self.answered = None;
            }
        }
        let Some(c) = now else {
            return Ok(());
        };
        let last = match self.answered {
            Some((_, last)) => last,
            None => {
                let _history = fs.history_lock();
                store.record_for_peer();
                fs.pause_history(Some(c.collector));
                self.answered = Some((c.epoch, None));
                None
            }
        };
        match (c.phase, last) {
            (Phase::Marking, None) => {
                let _history = fs.history_lock();
                let mut set = MarkSet::default();
                fs.mark_open(&mut set)?;
                store.put_note(c.epoch, &marks_note(self.me), &set.to_bytes())?;
                board.answer(self.me, c.epoch, Phase::Marking)?;
                self.answered = Some((c.epoch, Some(Phase::Marking)));
            }
            (Phase::Sweeping, None | Some(Phase::Marking)) => {
                let hits = store.doom(&doomed(store, &c)?);
                let bytes: Vec<u8> = hits.iter().flat_map(|h| *h.as_bytes()).collect();
                store.put_note(c.epoch, &hits_note(self.me), &bytes)?;
                board.answer(self.me, c.epoch, Phase::Sweeping)?;
                self.answered = Some((c.epoch, Some(Phase::Sweeping)));
            }
            _ => {}
        }
        Ok(())
    }
}
