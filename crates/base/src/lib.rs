//! `tinycode-base`: the leaves every layer above may use, and that use
//! nothing of tinycode's — the desk's clock, `sanitize_id` and the size
//! limits, FNV-1a, durable file replacement, paging, one way to take a lock,
//! rate-limited warnings, and handing freed heap back to the OS.
//!
//! Unsafe code is denied in this crate and forbidden in every other one;
//! [`heap`] is the one module allowed it, and says why.

pub mod clock;
pub mod files;
pub mod fnv;
pub mod heap;
pub mod hex;
pub mod ids;
pub mod limits;
pub mod paging;
pub mod progress;
pub mod ratelimit;
pub mod sync;
