//! The Knowledge service: each handler converts its request
//! (`convert.rs`), calls the desk once and converts the answer back.

mod convert;

use tinycode_shared::proto::knowledge_server::Knowledge;
use tinycode_shared::proto::{
    GetArticleRequest, KnowledgeArticle, ListArticlesRequest, ListArticlesResponse, SearchRequest,
    SearchResponse,
};
use tonic::{Request, Response, Status};

use super::tickets::search_kind;
use super::{OrStatus, Shared};
use crate::domain::search::Kind;
use convert::List;

pub struct KnowledgeService {
    shared: Shared,
}

impl KnowledgeService {
    pub fn new(shared: Shared) -> Self {
        Self { shared }
    }
}

#[tonic::async_trait]
impl Knowledge for KnowledgeService {
    async fn list(
        &self,
        request: Request<ListArticlesRequest>,
    ) -> Result<Response<ListArticlesResponse>, Status> {
        let q = List::try_from(request.into_inner())?;
        let all = self.shared.desk.list_articles(&q.tag);
        let (articles, next) = super::page(all, |a| a.id.clone(), q.after, q.limit);
        Ok(Response::new(ListArticlesResponse {
            articles,
            next_page_token: next.unwrap_or_default(),
        }))
    }

    async fn get(
        &self,
        request: Request<GetArticleRequest>,
    ) -> Result<Response<KnowledgeArticle>, Status> {
        self.shared
            .desk
            .get_article(&request.into_inner().id)
            .map(Response::new)
            .or_status()
    }

    async fn search(
        &self,
        request: Request<SearchRequest>,
    ) -> Result<Response<SearchResponse>, Status> {
        search_kind(&self.shared, request.into_inner(), Kind::Article)
    }
}
