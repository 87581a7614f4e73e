//! The web dashboard `cairn serve` shows at `/-/` on its HTTP port.
//!
//! **Owns:** the page (three static files in `assets/`, built into the
//! binary: HTML, one script drawing its plots as plain SVG, one style
//! sheet; no framework, nothing fetched from elsewhere), its JSON API
//! (`api`: the overview and the jobs an operator starts) and the
//! capacity trend the plots draw (`trend`: a bounded series sampled by a
//! thread of its own and at every overview computed).
//!
//! **Never:** runs an operation of its own: every figure and action is a
//! [`service::Request`] executed by [`service::exec`] or started as a
//! job by [`service::jobs::start`], the same calls the CLI makes (whose
//! long operations show among the jobs too). Never acts
//! for a caller the gateway did not call an operator (a read-write key
//! for every bucket, see [`gateway::console`]); without one it is read
//! only.
//!
//! **Invariants:**
//! - The overview is computed at most once per [`api::OVERVIEW_MAX_AGE`]
//!   (it syncs and walks the file system, as `cairn stats` does); the jobs
//!   list in it is always current.
//! - Memory is bounded: the trend keeps [`trend::POINTS`] points, the jobs
//!   list [`service::jobs::KEPT`] finished jobs.

mod api;
mod assets;
mod trend;

pub use api::Dashboard;
