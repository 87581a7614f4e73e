//! Test support shared by every crate that tests against branches: the
//! conformance suite that each [`Branch`] implementation passes, and a real
//! S3 server (S3Proxy) to run S3 branches against. Behind the `testing`
//! feature; another crate's tests enable it with
//! `branch = { workspace = true, features = ["testing"] }` in
//! `[dev-dependencies]`.

use parking_lot::Mutex;
use std::fs::{self, File};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{BlobKey, Branch, BranchError, S3Config};

type Check = fn(&dyn Branch);

const CHECKS: &[(&str, Check)] = &[
    ("round_trip", round_trip),
    ("put_never_replaces", put_never_replaces),
    ("read_range_is_exact", read_range_is_exact),
    ("missing_blobs", missing_blobs),
    ("list_by_prefix", list_by_prefix),
    ("delete", delete),
    ("empty_blob", empty_blob),
    ("large_blob", large_blob),
    ("put_many_reports_each_blob", put_many_reports_each_blob),
    ("concurrent_puts", concurrent_puts),
];

/// Runs every check of the [`Branch`] contract, each on a fresh, empty
/// branch from `make`, and panics naming the checks that failed.
pub fn conformance(make: impl Fn() -> Arc<dyn Branch>) {
    let failed: Vec<&str> = CHECKS
        .iter()
        .filter(|(_, check)| {
            let branch = make();
            panic::catch_unwind(AssertUnwindSafe(|| check(&*branch))).is_err()
        })
        .map(|(name, _)| *name)
        .collect();
    assert!(failed.is_empty(), "conformance checks failed: {failed:?}");
}

fn key(s: &str) -> BlobKey {
    BlobKey::new(s).unwrap()
}

/// Deterministic bytes that differ from one seed to the next.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn round_trip(b: &dyn Branch) {
    let data = pattern(10_000, 1);
    b.put(&key("c/00/a"), &data).unwrap();
    assert_eq!(b.get(&key("c/00/a")).unwrap(), data);
    assert_eq!(b.size(&key("c/00/a")).unwrap(), 10_000);
}

fn put_never_replaces(b: &dyn Branch) {
    b.put(&key("k"), b"first").unwrap();
    let err = b.put(&key("k"), b"second").unwrap_err();
    assert!(matches!(err, BranchError::Exists { .. }), "{err}");
    assert_eq!(b.get(&key("k")).unwrap(), b"first");
}

fn read_range_is_exact(b: &dyn Branch) {
    let data = pattern(1000, 2);
    let k = key("r");
    b.put(&k, &data).unwrap();
    assert_eq!(b.read_range(&k, 0, 1000).unwrap(), data);
    assert_eq!(b.read_range(&k, 10, 100).unwrap(), &data[10..110]);
    assert_eq!(b.read_range(&k, 995, 5).unwrap(), &data[995..]);
    assert_eq!(b.read_range(&k, 0, 0).unwrap(), b"");
    for (offset, len) in [(995, 6), (1000, 1), (5000, 10)] {
        match b.read_range(&k, offset, len) {
            Err(BranchError::Truncated { size: 1000, .. }) => {}
            other => panic!("read of {len} at {offset} of 1000 bytes gave {other:?}"),
        }
    }
}

fn missing_blobs(b: &dyn Branch) {
    let k = key("no/such/blob");
    let err = b.get(&k).unwrap_err();
    assert!(matches!(err, BranchError::NotFound { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("no/such/blob") && message.contains(b.name()),
        "{message}"
    );
    assert!(matches!(
        b.read_range(&k, 0, 1),
        Err(BranchError::NotFound { .. })
    ));
    assert!(matches!(b.size(&k), Err(BranchError::NotFound { .. })));
    b.delete(&k).unwrap();
}

fn list_by_prefix(b: &dyn Branch) {
    for k in ["p/a1", "p/b/1", "p/a2", "q/a1", "pa"] {
        b.put(&key(k), k.as_bytes()).unwrap();
    }
    let keys = |v: &[&str]| v.iter().map(|s| key(s)).collect::<Vec<_>>();
    assert_eq!(
        b.list("").unwrap(),
        keys(&["p/a1", "p/a2", "p/b/1", "pa", "q/a1"])
    );
    assert_eq!(b.list("p/").unwrap(), keys(&["p/a1", "p/a2", "p/b/1"]));
    assert_eq!(b.list("p/a").unwrap(), keys(&["p/a1", "p/a2"]));
    assert_eq!(b.list("p").unwrap(), keys(&["p/a1", "p/a2", "p/b/1", "pa"]));
    assert_eq!(b.list("p/b/").unwrap(), keys(&["p/b/1"]));
    assert!(b.list("z").unwrap().is_empty());
}

fn delete(b: &dyn Branch) {
    let k = key("d/x");
    b.put(&k, b"gone soon").unwrap();
    b.put(&key("d/y"), b"stays").unwrap();
    b.delete(&k).unwrap();
    b.delete(&k).unwrap();
    assert!(matches!(b.get(&k), Err(BranchError::NotFound { .. })));
    assert_eq!(b.list("d/").unwrap(), vec![key("d/y")]);
    b.put(&k, b"again").unwrap();
    assert_eq!(b.get(&k).unwrap(), b"again");
}

fn empty_blob(b: &dyn Branch) {
    let k = key("empty");
    b.put(&k, b"").unwrap();
    assert_eq!(b.get(&k).unwrap(), b"");
    assert_eq!(b.size(&k).unwrap(), 0);
    assert_eq!(b.read_range(&k, 0, 0).unwrap(), b"");
    assert!(matches!(
        b.read_range(&k, 0, 1),
        Err(BranchError::Truncated { size: 0, .. })
    ));
    assert_eq!(b.list("").unwrap(), vec![k]);
}

fn large_blob(b: &dyn Branch) {
    let data = pattern(8 << 20, 3);
    let k = key("big");
    b.put(&k, &data).unwrap();
    assert_eq!(b.size(&k).unwrap(), 8 << 20);
    assert!(b.get(&k).unwrap() == data, "8 MiB blob came back different");
    let mid = (4 << 20) - 100;
    assert_eq!(
        b.read_range(&k, mid as u64, 300_000).unwrap(),
        &data[mid..mid + 300_000]
    );
}

fn put_many_reports_each_blob(b: &dyn Branch) {
    b.put(&key("m/2"), b"old").unwrap();
    let results = b.put_many(&[
        (key("m/1"), b"one".as_slice()),
        (key("m/2"), b"two".as_slice()),
        (key("m/3"), b"three".as_slice()),
    ]);
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(
        matches!(results[1], Err(BranchError::Exists { .. })),
        "{results:?}"
    );
    assert_eq!(b.get(&key("m/1")).unwrap(), b"one");
    assert_eq!(b.get(&key("m/2")).unwrap(), b"old");
    assert_eq!(b.get(&key("m/3")).unwrap(), b"three");
    assert!(b.put_many(&[]).is_empty());
}

fn concurrent_puts(b: &dyn Branch) {
    const THREADS: u64 = 4;
    const EACH: u64 = 8;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for i in 0..EACH {
                    let k = key(&format!("t{t}/{i}"));
                    b.put(&k, &pattern(65_536, t * 100 + i)).unwrap();
                }
            });
        }
    });
    assert_eq!(b.list("").unwrap().len(), (THREADS * EACH) as usize);
    for t in 0..THREADS {
        for i in 0..EACH {
            let k = key(&format!("t{t}/{i}"));
            assert!(
                b.get(&k).unwrap() == pattern(65_536, t * 100 + i),
                "{k} differs"
            );
        }
    }
}

pub const S3PROXY_VERSION: &str = "2.6.0";
/// The access key and secret every [`S3Proxy`] accepts.
pub const S3PROXY_ACCESS_KEY: &str = "cairn-test";
pub const S3PROXY_SECRET: &str = "cairn-test-secret";

/// A real S3 API server (S3Proxy over a temporary directory) on a free
/// loopback port, killed on drop.
///
/// Needs `java` (17 or later). The jar is `$CAIRN_S3PROXY_JAR`, else
/// `~/.cache/cairn/s3proxy-2.6.0.jar`, else fetched there once with `mvn`.
/// A missing Java or jar is a panic saying what to install: tests that need
/// S3 fail rather than skip.
///
/// The server gets SIGKILL when the thread that started it exits (so a
/// killed test run leaves no server behind): start it on the thread that
/// uses it, such as the test's own.
pub struct S3Proxy {
    child: Child,
    endpoint: String,
    dir: tempfile::TempDir,
    buckets: AtomicU64,
}

impl S3Proxy {
    pub fn start() -> S3Proxy {
        let jar = s3proxy_jar();
        let dir = tempfile::tempdir().expect("temporary directory for S3Proxy");
        let data = dir.path().join("data");
        fs::create_dir(&data).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let endpoint = format!("http://127.0.0.1:{port}");
        let properties = dir.path().join("s3proxy.properties");
        fs::write(
            &properties,
            format!(
                "s3proxy.endpoint={endpoint}\n\
                 s3proxy.authorization=aws-v2-or-v4\n\
                 s3proxy.identity={S3PROXY_ACCESS_KEY}\n\
                 s3proxy.credential={S3PROXY_SECRET}\n\
                 jclouds.provider=filesystem\n\
                 jclouds.filesystem.basedir={}\n",
                data.display()
            ),
        )
        .unwrap();
        let log_path = dir.path().join("s3proxy.log");
        let log = File::create(&log_path).unwrap();
        let mut command = Command::new("java");
        // A small, quickly started JVM: this is a test fixture.
        command
            .args([
                "-Xmx512m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-jar",
            ])
            .arg(&jar)
            .arg("--properties")
            .arg(&properties)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = match command.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "java not found: the S3 tests run S3Proxy, which needs a Java 17 runtime \
                 (Debian: apt-get install openjdk-17-jre-headless)"
            ),
            Err(e) => panic!("cannot start java for S3Proxy: {e}"),
        };
        let mut proxy = S3Proxy {
            child,
            endpoint,
            dir,
            buckets: AtomicU64::new(0),
        };
        proxy.wait_until_listening(port, &log_path);
        proxy
    }

    fn wait_until_listening(&mut self, port: u16, log: &Path) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "S3Proxy exited ({status}) before listening on port {port}; its output:\n{}",
                    tail(log)
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "S3Proxy did not listen on port {port} within 90 s; its output:\n{}",
                    tail(log)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Creates an empty bucket. With S3Proxy's filesystem back end a bucket
    /// is a directory, which spares the harness a signed CreateBucket call.
    pub fn create_bucket(&self, bucket: &str) {
        fs::create_dir(self.dir.path().join("data").join(bucket)).unwrap();
    }

    /// Where the filesystem back end keeps `bucket`'s objects, one file
    /// per object: a test damages objects by writing there.
    pub fn bucket_dir(&self, bucket: &str) -> PathBuf {
        self.dir.path().join("data").join(bucket)
    }

    /// A configuration for `bucket` on this server, whether or not it exists.
    pub fn config(&self, bucket: &str) -> S3Config {
        let mut config = S3Config::new(&self.endpoint, bucket, S3PROXY_ACCESS_KEY, S3PROXY_SECRET);
        config.max_retries = 1;
        config
    }

    /// Creates a fresh, empty bucket and returns its configuration.
    pub fn new_bucket(&self) -> S3Config {
        let bucket = format!("cairn-{}", self.buckets.fetch_add(1, Ordering::Relaxed));
        self.create_bucket(&bucket);
        self.config(&bucket)
    }
}

impl Drop for S3Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The end of a log, where the reason a server stopped is.
fn tail(log: &Path) -> String {
    let text = fs::read(log).unwrap_or_default();
    String::from_utf8_lossy(&text[text.len().saturating_sub(4000)..]).into_owned()
}

/// The S3Proxy jar: `$CAIRN_S3PROXY_JAR`, else the cached copy, else one
/// fetched from Maven Central into the cache.
pub fn s3proxy_jar() -> PathBuf {
    if let Some(jar) = std::env::var_os("CAIRN_S3PROXY_JAR") {
        let jar = PathBuf::from(jar);
        assert!(
            jar.is_file(),
            "CAIRN_S3PROXY_JAR={} is not a file",
            jar.display()
        );
        return jar;
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .expect("HOME is set")
        .join("cairn");
    let jar = cache.join(format!("s3proxy-{S3PROXY_VERSION}.jar"));
    // One fetch per process; the rename makes a concurrent fetch by another
    // test process harmless.
    static FETCH: Mutex<()> = Mutex::new(());
    let _once = FETCH.lock();
    if !jar.is_file() {
        fetch_s3proxy(&cache, &jar);
    }
    jar
}

fn fetch_s3proxy(cache: &Path, jar: &Path) {
    fs::create_dir_all(cache).unwrap();
    let staging = tempfile::tempdir_in(cache).unwrap();
    let artifact = format!("org.gaul:s3proxy:{S3PROXY_VERSION}:jar:jar-with-dependencies");
    let output = Command::new("mvn")
        .args(["-q", "-B", "dependency:copy"])
        .arg(format!("-Dartifact={artifact}"))
        .arg(format!("-DoutputDirectory={}", staging.path().display()))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run mvn to fetch S3Proxy ({e}): install Maven (Debian: apt-get install \
                 maven) or set CAIRN_S3PROXY_JAR to {artifact}"
            )
        });
    let fetched = staging.path().join(format!(
        "s3proxy-{S3PROXY_VERSION}-jar-with-dependencies.jar"
    ));
    assert!(
        output.status.success() && fetched.is_file(),
        "mvn could not fetch {artifact}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    fs::rename(&fetched, jar).unwrap();
}

/// A [`crate::Clock`] whose sleeps wait until the test opens the gate: a
/// [`crate::FaultyBranch`] with [`crate::Fault::Slow`] or
/// [`crate::Fault::SlowReads`] over it holds an operation at a point the
/// test chooses, for as long as it chooses, with no timing involved.
#[derive(Debug, Default)]
pub struct GateClock {
    /// (sleepers waiting, open)
    state: Mutex<(usize, bool)>,
    cv: parking_lot::Condvar,
}

impl GateClock {
    pub fn new() -> Arc<GateClock> {
        Arc::new(GateClock::default())
    }

    /// Waits until an operation is held at the gate.
    pub fn until_waiting(&self) {
        let mut s = self.state.lock();
        while s.0 == 0 {
            self.cv.wait(&mut s);
        }
    }

    /// Whether an operation is held at the gate now.
    pub fn is_waiting(&self) -> bool {
        self.state.lock().0 > 0
    }

    /// Lets every held operation, and every later one, through.
    pub fn open(&self) {
        self.state.lock().1 = true;
        self.cv.notify_all();
    }
}

impl crate::Clock for GateClock {
    fn now(&self) -> Duration {
        Duration::ZERO
    }

    fn sleep(&self, _: Duration) {
        let mut s = self.state.lock();
        s.0 += 1;
        self.cv.notify_all();
        while !s.1 {
            self.cv.wait(&mut s);
        }
        s.0 -= 1;
    }
}
