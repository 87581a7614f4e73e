//! A random reader of a file read in place (a VM image) gets the ~128 KiB
//! around each read it misses pushed into the kernel's page cache, so its
//! next reads there never reach the daemon; the pushed bytes are the
//! file's. While the file has a handle open for writing nothing is pushed:
//! with the writeback cache a dirty page would be overwritten with the
//! daemon's older bytes, and the write lost.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;

use common::{random, with_shared_map, Mount};

const PAGE: usize = 4096;
const LEN: usize = 8 << 20;

/// Reads the detector learns the reader is random from (more than
/// `fs::pattern::MIN_SAMPLES`, jumping back and forth), all in the file's
/// first 3 MiB.
fn warm_up() -> impl Iterator<Item = usize> {
    (0..24usize).map(|i| (i * 37 % 24) * (128 << 10))
}

/// Reads whose neighbourhoods are checked: in the next 3 MiB, nothing
/// there cached yet, each jumping back.
fn probes() -> impl Iterator<Item = usize> {
    (0..6usize)
        .rev()
        .map(|i| (3 << 20) + i * (512 << 10) + 65536)
}

/// The cached pages as runs, for a failure's message.
fn runs(resident: &[bool]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (p, _) in resident.iter().enumerate().filter(|(_, &r)| r) {
        match out.last_mut() {
            Some(r) if r.end == p => r.end += 1,
            _ => out.push(p..p + 1),
        }
    }
    out
}

/// For each page of the file `f` reads, whether the kernel's page cache
/// holds it. Seen through the reader's own handle: a handle open for
/// writing, even to look, would stop the pushes.
fn resident(f: &fs::File) -> Vec<bool> {
    let mut vec = vec![0u8; LEN / PAGE];
    // SAFETY: mincore only reports on the live mapping it is given.
    with_shared_map(f, LEN, |_, addr| unsafe {
        assert_eq!(libc::mincore(addr, LEN, vec.as_mut_ptr()), 0);
    });
    vec.iter().map(|&b| b & 1 == 1).collect()
}

/// The pages within 32 KiB on either side of each probe that are cached,
/// fewest first. The probes sit at the start of a container region, so the
/// pages before them come from the region beside the read's, which is
/// read when the store can (most often: both sides); the read's own
/// region always gives the pages after it.
fn fewest_near_probes(resident: &[bool]) -> (usize, usize) {
    probes()
        .map(|at| {
            let page = at / PAGE;
            let near = (page - 8..page).chain(page + 1..page + 9);
            (near.filter(|&p| resident[p]).count(), at)
        })
        .min()
        .expect("probes")
}

/// Tells the kernel the file is read at random (as fio and databases do):
/// no read-ahead of its own.
fn random_advice(f: &fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor; advice only.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    assert_eq!(r, 0);
}

#[test]
fn a_random_reader_finds_its_neighbours_in_the_page_cache() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let mut image = random(LEN, 1);
    fs::write(m.path("disk.img"), &image).unwrap(); // fixed by the default rule
                                                    // Cold: stored and sealed, nothing in the daemon's cache.
    let (repo, dir) = m.unmount();
    let m = Mount::start(repo, dir);
    let reader = fs::File::open(m.path("disk.img")).unwrap();
    random_advice(&reader);
    let cached = resident(&reader).iter().filter(|&&r| r).count();
    assert_eq!(cached, 0, "cached after a remount");

    let mut got = vec![0u8; PAGE];
    for at in warm_up().chain(probes()) {
        reader.read_exact_at(&mut got, at as u64).unwrap();
        assert!(got == image[at..at + PAGE], "read at {at}");
    }
    // A push follows the answer to its read: wait until the last one
    // landed (they are never refused here: nothing writes the file).
    let waited = std::time::Instant::now();
    let resident = loop {
        let resident = resident(&reader);
        let (near, at) = fewest_near_probes(&resident);
        if near >= 8 {
            break resident;
        }
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "{near} pages next to the read at {at} were pushed; cached: {:?}",
            runs(&resident)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let cached = resident.iter().filter(|&&r| r).count();
    assert!(
        cached <= 30 * 33,
        "{cached} pages cached for 30 reads: more than their neighbourhoods"
    );
    // Every cached byte is the file's (the kernel serves them now).
    let mut whole = vec![0u8; LEN];
    reader.read_exact_at(&mut whole, 0).unwrap();
    assert!(
        whole == image,
        "the page cache holds bytes that are not the file's"
    );
    drop(reader);

    // A writer leaves dirty pages in the cache (the writeback cache): a
    // reader's misses next to them must not overwrite them. Cold again, so
    // that those reads reach the daemon.
    let (repo, dir) = m.unmount();
    let m = Mount::start(repo, dir);
    let reader = fs::File::open(m.path("disk.img")).unwrap();
    random_advice(&reader);
    for at in warm_up() {
        reader.read_exact_at(&mut got, at as u64).unwrap();
    }
    let at = 7 << 20;
    let writer = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("disk.img"))
        .unwrap();
    let fresh = random(4 * PAGE, 2);
    writer.write_all_at(&fresh, at as u64).unwrap();
    image[at..at + fresh.len()].copy_from_slice(&fresh);
    for near in [at + 16 * PAGE, at - 16 * PAGE, at + 6 * PAGE, at - 2 * PAGE] {
        reader.read_exact_at(&mut got, near as u64).unwrap();
        assert!(got == image[near..near + PAGE], "read at {near}");
    }
    let mut written = vec![0u8; fresh.len()];
    reader.read_exact_at(&mut written, at as u64).unwrap();
    assert!(
        written == fresh,
        "written pages lost their bytes while cached"
    );
    drop(writer);
    reader.read_exact_at(&mut whole, 0).unwrap();
    assert!(whole == image, "a write was lost");
    drop(reader);

    let (repo, dir) = m.unmount();
    let m = Mount::start(repo, dir);
    assert_eq!(
        fs::read(m.path("disk.img")).unwrap(),
        image,
        "after a remount"
    );
    m.unmount();
}
