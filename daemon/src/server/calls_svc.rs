//! The Calls service: direct tool calls through the permission gate, and
//! the skills (`tinycode mcp serve` offers them as prompts).

use std::sync::Arc;

use tinycode_shared::proto::calls_server::Calls;
use tinycode_shared::proto::{
    CallPending, CallResult, CallToolRequest, CallToolUpdate, CallWaiting, CallableTool,
    GetSkillRequest, ListCallToolsRequest, ListCallToolsResponse, ListSkillsRequest,
    ListSkillsResponse, SkillInfo, call_tool_update,
};
use tonic::{Request, Response, Status};

use super::sessions_svc::client_ref;
use super::{IntoStatus, OrStatus, ResponseStream, Shared, stream_from};
use crate::calls::{CallRequest, DirectCalls, Update};
use crate::permissions::Rule;

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

/// A domain update as it goes on the wire.
fn update_pb(update: Update) -> CallToolUpdate {
    let update = match update {
        Update::Waiting {
            approval_id,
            reason,
            waited,
        } => call_tool_update::Update::Waiting(CallWaiting {
            approval_id,
            reason,
            waited_seconds: waited.as_secs() as u32,
        }),
        Update::Result {
            call_id,
            output,
            approval_id,
        } => call_tool_update::Update::Result(CallResult {
            call_id,
            details_json: output.details_json(),
            content: output.content,
            is_error: output.is_error,
            approval_id,
        }),
        Update::Pending {
            call_id,
            approval_id,
            reason,
            message,
        } => call_tool_update::Update::Pending(CallPending {
            call_id,
            approval_id,
            reason,
            message,
        }),
    };
    CallToolUpdate {
        update: Some(update),
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
        let by = client_ref(&request);
        let req = request.into_inner();
        let call = CallRequest::new(
            &req.caller,
            &req.tool,
            &req.arguments_json,
            req.wait_seconds,
            by,
        )
        .or_status()?;
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
            .map(|s| SkillInfo {
                name: s.name.clone(),
                description: s.description.clone(),
                body: String::new(),
                disable_model_invocation: !s.model_invocable,
            })
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
        Ok(Response::new(SkillInfo {
            name: skill.name.clone(),
            description: skill.description.clone(),
            body: skill.body.clone(),
            disable_model_invocation: !skill.model_invocable,
        }))
    }
}
