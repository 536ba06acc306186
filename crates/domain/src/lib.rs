//! `tinycode-domain`: the support domain — tickets and knowledge articles
//! (types, read models folded from the log, the workspace files they
//! mirror, full-text search), the desk's taxonomy, the permission rule table
//! and the durable approvals. It stands on the log and the leaves; it takes
//! its settings as values ([`desk::DeskSettings`]), never the daemon's
//! config.
#![forbid(unsafe_code)]

pub mod approvals;
pub mod desk;
pub mod knowledge;
pub mod permissions;
pub mod rules;
pub mod search;
pub mod skills;
pub mod sla;
pub mod taxonomy;
pub mod ticket;

pub use tinycode_base::{ids, limits};

pub(crate) use tinycode_base::{clock, error_limited, files, fnv, sync};
pub(crate) use tinycode_log::{projection, store};
