//! Progress bars, standard output and human-readable numbers.

use parking_lot::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use service::Progress;

/// A progress bar on stderr, hidden when `quiet` or when stderr is not a
/// terminal (scripts and CI get clean output).
pub fn bar(quiet: bool, total: Option<u64>, what: &str) -> ProgressBar {
    let pb = match total {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    if quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    let template = if total.is_some() {
        "{msg:>8} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg:>8} {spinner} {bytes} {bytes_per_sec}"
    };
    pb.set_style(
        ProgressStyle::with_template(template)
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// Progress of a long operation counted in steps (containers, chunks,
/// shards), on stderr and hidden like [`bar`]: a bar once the total is
/// known, a spinner with a running count while it is not (gc's marking
/// cannot know how many chunks it will meet). Nothing is drawn before the
/// first step is reported.
pub struct Steps {
    pb: ProgressBar,
    /// Whether the bar style is on (`None` before the first update).
    bar: Mutex<Option<bool>>,
}

impl Steps {
    pub fn new(quiet: bool) -> Steps {
        let pb = ProgressBar::hidden();
        if !quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            pb.set_draw_target(ProgressDrawTarget::stderr());
        }
        pb.set_style(ProgressStyle::with_template("").expect("valid template"));
        Steps {
            pb,
            bar: Mutex::new(None),
        }
    }

    /// `done` of `total` steps of `what`; a `total` of 0 means unknown.
    pub fn update(&self, what: &str, done: u64, total: u64) {
        let known = total > 0;
        // The length goes first: a style or message change draws, and must
        // not draw the new bar against the old (zero) length.
        if known {
            self.pb.set_length(total);
        }
        let mut bar = self.bar.lock();
        if *bar != Some(known) {
            let template = if known {
                "{msg:>8} [{bar:30}] {pos}/{len}, eta {eta}"
            } else {
                "{msg:>8} {spinner} {pos}"
            };
            self.pb.set_style(
                ProgressStyle::with_template(template)
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            if !known {
                self.pb.enable_steady_tick(Duration::from_millis(200));
            }
            *bar = Some(known);
        }
        if self.pb.message() != what {
            self.pb.set_message(what.to_string());
        }
        self.pb.set_position(done);
    }

    pub fn finish(&self) {
        self.pb.finish_and_clear();
    }
}

impl Progress for Steps {
    fn step(&self, what: &str, done: u64, total: u64) {
        self.update(what, done, total);
    }
}

/// A [`bar`] counting bytes, as a [`Progress`]: a `put`'s or `get`'s.
pub struct Bytes(pub ProgressBar);

impl Progress for Bytes {
    fn step(&self, _: &str, done: u64, total: u64) {
        if total > 0 && self.0.length() != Some(total) {
            self.0.set_length(total);
        }
        self.0.set_position(done);
    }
}

/// `println!` that survives a closed standard output: when the reader went
/// away (`cairn roots | head -1`), the command ends quietly with status 0;
/// any other failure to write is reported (status 1).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            $crate::ui::stdout_failed(e);
        }
    }};
}
pub(crate) use out;

/// Ends the process after a failed write to standard output. Everything a
/// command changes is durable before it prints its report, so stopping here
/// loses nothing.
pub fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    say!("cairn: error: cannot write to standard output: {e}");
    std::process::exit(1);
}

pub use service::human_bytes as bytes;

/// What every command that creates a repository says of its key.
pub fn key_backup(root: &std::path::Path) -> String {
    format!(
        "its key is {}: back it up now, somewhere else, with `cairn key export FILE`; \
         without it nothing stored can be read",
        repo::Repo::key_path(root).display()
    )
}

/// A reply as one line of JSON, keys in alphabetical order (as `--json`
/// has always printed them).
pub fn json<T: serde::Serialize>(reply: &T) -> serde_json::Result<String> {
    Ok(serde_json::to_value(reply)?.to_string())
}

pub fn rate(bytes_done: u64, secs: f64) -> String {
    if secs <= 0.0 {
        return "-".into();
    }
    format!("{}/s", bytes((bytes_done as f64 / secs) as u64))
}

/// Seconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn utc(secs: i64) -> String {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Civil-from-days (proleptic Gregorian), shifted so years start in March.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00");
        assert_eq!(super::utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(super::utc(1_795_000_000), "2026-11-18 11:06:40");
    }
}
