//! Real processes and network faults for cairn's tests: [`etcd::Etcd`],
//! an etcd cluster of one or more members on free loopback ports, whose
//! members a test kills and restarts; [`proxy::Proxy`], a TCP proxy that
//! holds, resets and heals a link (a partition without network
//! namespaces); [`powercut::Disks`], ext4 disks whose power a test cuts
//! (what was not flushed is lost); [`wait::until`], polling with a
//! deadline.
//!
//! **Owns:** the processes and sockets it starts; each is stopped when its
//! handle is dropped.
//!
//! **Never:** is a dependency of anything but tests.
//!
//! **Invariants:** every port is a free loopback port; every process and
//! thread started ends with its handle.

pub mod etcd;
pub mod powercut;
pub mod proxy;
pub mod wait;
