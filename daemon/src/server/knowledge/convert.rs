//! The Knowledge service's boundary: requests checked and typed
//! (`TryFrom`).

use tinycode_shared::proto::ListArticlesRequest;
use tonic::Status;

use super::super::validate::{self, MAX_NAME};

/// `Knowledge.List`: articles with a tag (empty: all), a page after an id.
pub struct List {
    pub tag: String,
    pub limit: usize,
    pub after: Option<String>,
}

impl TryFrom<ListArticlesRequest> for List {
    type Error = Status;

    fn try_from(req: ListArticlesRequest) -> Result<Self, Status> {
        validate::max_len("tag", &req.tag, MAX_NAME)?;
        let limit = validate::limit("limit", req.limit, 100, 1_000)?;
        let after = validate::optional_id("page_token", &req.page_token)?;
        Ok(Self {
            tag: req.tag,
            limit,
            after: (!after.is_empty()).then_some(after),
        })
    }
}
