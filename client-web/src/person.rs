//! Who is using the page: a leaf every other module may name.

/// A person using the page (one browser's session).
#[derive(Debug, Clone)]
pub struct Person {
    pub id: String,
    /// The name they gave (recorded with their decisions); empty until
    /// asked.
    pub name: String,
    pub csrf: String,
}
