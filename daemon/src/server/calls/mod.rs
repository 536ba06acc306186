//! The Calls service: direct tool calls through the permission gate, and
//! the skills (`tinycode mcp serve` offers them as prompts).

mod convert;

use std::sync::Arc;

use tinycode_shared::proto::calls_server::Calls;
use tinycode_shared::proto::{
    CallToolRequest, CallToolUpdate, CallableTool, GetSkillRequest, ListCallToolsRequest,
    ListCallToolsResponse, ListSkillsRequest, ListSkillsResponse, SkillInfo,
};
use tonic::{Request, Response, Status};

use super::{IntoStatus, ResponseStream, Shared, stream_from};
use crate::calls::DirectCalls;
use crate::permissions::Rule;
pub(super) use convert::skill_info;
use convert::{Call, update_pb};

pub struct CallsService {
    calls: Arc<DirectCalls>,
    shared: Shared,
}

impl CallsService {
    pub fn new(shared: Shared) -> Self {
        Self {
            calls: Arc::clone(&shared.calls),
            shared,
        }
    }
}

#[tonic::async_trait]
impl Calls for CallsService {
    async fn list_tools(
        &self,
        _request: Request<ListCallToolsRequest>,
    ) -> Result<Response<ListCallToolsResponse>, Status> {
        let tools = self
            .calls
            .tools()
            .into_iter()
            .map(|spec| {
                let rule = match self.calls.rule(&spec.name, &serde_json::json!({})) {
                    Rule::Allow => "allow",
                    Rule::Ask(_) => "ask",
                    Rule::Deny(_) => "deny",
                };
                CallableTool {
                    read_only: crate::permissions::is_read_only(&spec.name),
                    review_required: self.shared.sessions.tools().review_required(&spec.name),
                    input_schema_json: spec.parameters.to_string(),
                    rule: rule.into(),
                    name: spec.name,
                    description: spec.description,
                }
            })
            .collect();
        Ok(Response::new(ListCallToolsResponse { tools }))
    }

    type CallStream = ResponseStream<CallToolUpdate>;

    async fn call(
        &self,
        request: Request<CallToolRequest>,
    ) -> Result<Response<Self::CallStream>, Status> {
        let Call(call) = Call::try_from(request)?;
        let calls = Arc::clone(&self.calls);
        Ok(Response::new(stream_from(move |tx| async move {
            let (updates, mut rx) = tokio::sync::mpsc::channel(8);
            let run = tokio::spawn(async move { calls.call(call, updates).await });
            while let Some(update) = rx.recv().await {
                if tx.send(Ok(update_pb(update))).await.is_err() {
                    return;
                }
            }
            match run.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    let _ = tx.send(Err(e.into_status())).await;
                }
                Err(e) => {
                    let _ = tx
                        .send(Err(Status::internal(format!("the call stopped: {e}"))))
                        .await;
                }
            }
        })))
    }

    async fn list_skills(
        &self,
        _request: Request<ListSkillsRequest>,
    ) -> Result<Response<ListSkillsResponse>, Status> {
        let skills = self
            .calls
            .skills()
            .all()
            .map(|s| skill_info(s, false))
            .collect();
        Ok(Response::new(ListSkillsResponse { skills }))
    }

    async fn get_skill(
        &self,
        request: Request<GetSkillRequest>,
    ) -> Result<Response<SkillInfo>, Status> {
        let name = request.into_inner().name;
        let skills = self.calls.skills();
        let skill = skills.get(name.trim()).ok_or_else(|| {
            Status::not_found(format!(
                "there is no skill named {}; skills: {}",
                crate::domain::ids::quoted(&name),
                skills.names().join(", ")
            ))
        })?;
        Ok(Response::new(skill_info(skill, true)))
    }
}
