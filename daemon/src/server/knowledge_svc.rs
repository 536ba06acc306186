use tinycode_shared::proto::knowledge_server::Knowledge;
use tinycode_shared::proto::{
    GetArticleRequest, KnowledgeArticle, ListArticlesRequest, ListArticlesResponse, SearchRequest,
    SearchResponse,
};
use tonic::{Request, Response, Status};

use super::tickets_svc::search_kind;
use super::validate::{self, MAX_NAME};
use super::{OrStatus, Shared};
use crate::domain::search::Kind;

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
        let req = request.into_inner();
        validate::max_len("tag", &req.tag, MAX_NAME)?;
        let limit = validate::limit("limit", req.limit, 100, 1_000)?;
        let after = validate::optional_id("page_token", &req.page_token)?;
        let (articles, next) = super::page(
            self.shared.desk.list_articles(&req.tag),
            |a| a.id.clone(),
            (!after.is_empty()).then_some(after),
            limit,
        );
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
        search_kind(&self.shared, &request.into_inner(), Kind::Article)
    }
}
