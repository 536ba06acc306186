//! The support domain: tickets and knowledge articles — types, projections
//! folded from events, the workspace files they mirror, `sanitize_id`, and
//! full-text search.

pub mod desk;
pub mod ids;
pub mod knowledge;
pub mod limits;
pub mod rules;
pub mod search;
pub mod taxonomy;
pub mod ticket;
