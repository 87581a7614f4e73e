//! The value of a client's mounted mark (`u/<client>`): the registration
//! id of the process that mounted it, then that process's pid and host
//! name, so that a mount can tell the mark of a process that died on this
//! machine (taken over at once) from one of a process still running, here
//! or elsewhere (refused while its registration lives: two processes
//! with one client number would hand out the same container ids). A mark
//! of only the 8-byte id (written before session 32) names no holder.

/// A decoded mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    /// The per-open id the holder registered under (`c/<id>`).
    pub registration: u64,
    pub pid: Option<u32>,
    pub host: Option<String>,
}

impl Mark {
    /// This process's mark for registration `id`.
    pub fn mine(registration: u64) -> Mark {
        Mark {
            registration,
            pid: Some(std::process::id()),
            host: Some(this_host()),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.registration.to_be_bytes().to_vec();
        if let (Some(pid), Some(host)) = (self.pid, &self.host) {
            out.extend_from_slice(&pid.to_be_bytes());
            out.extend_from_slice(host.as_bytes());
        }
        out
    }

    pub fn decode(v: &[u8]) -> Option<Mark> {
        let registration = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
        let (pid, host) = match v.get(8..12) {
            Some(p) => (
                Some(u32::from_be_bytes(p.try_into().ok()?)),
                Some(String::from_utf8_lossy(&v[12..]).into_owned()),
            ),
            None => (None, None),
        };
        Some(Mark {
            registration,
            pid,
            host,
        })
    }

    /// Whether the holder is a process of this machine that is gone.
    pub fn holder_died_here(&self) -> bool {
        match (self.pid, &self.host) {
            (Some(pid), Some(host)) => {
                *host == this_host()
                    && pid != std::process::id()
                    && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            }
            _ => false,
        }
    }

    /// "pid P on HOST", for an error.
    pub fn holder(&self) -> String {
        match (self.pid, &self.host) {
            (Some(pid), Some(host)) => format!("pid {pid} on {host}"),
            _ => format!("registration {:016x}", self.registration),
        }
    }
}

/// This machine's host name (Linux), or "" when it cannot be read.
fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_round_trips_and_an_old_one_names_no_holder() {
        let m = Mark::mine(42);
        assert_eq!(Mark::decode(&m.encode()), Some(m.clone()));
        assert!(!m.holder_died_here(), "this process is alive");
        let old = Mark::decode(&42u64.to_be_bytes()).unwrap();
        assert_eq!(old.registration, 42);
        assert!(!old.holder_died_here());
        assert!(Mark::decode(b"short").is_none());
    }

    #[test]
    fn a_dead_process_of_this_machine_is_seen_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let m = Mark {
            pid: Some(pid),
            ..Mark::mine(7)
        };
        assert!(m.holder_died_here());
        let elsewhere = Mark {
            host: Some("another-machine".into()),
            ..m
        };
        assert!(!elsewhere.holder_died_here());
    }
}
