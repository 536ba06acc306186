//! The Calls service's boundary: a call request checked and typed
//! (`TryFrom`), updates, tools and skills in their wire form.

use tinycode_shared::proto::{
    CallPending, CallResult, CallToolRequest, CallToolUpdate, CallWaiting, SkillInfo,
    call_tool_update,
};
use tonic::{Request, Status};

use super::super::OrStatus;
use super::super::peer::caller_and;
use crate::calls::{CallRequest, Update};
use crate::domain::skills::Skill;

/// `Calls.Call`, checked by the engine's own constructor. (A newtype: both
/// types are other crates'.)
pub struct Call(pub CallRequest);

impl TryFrom<Request<CallToolRequest>> for Call {
    type Error = Status;

    fn try_from(request: Request<CallToolRequest>) -> Result<Self, Status> {
        let (by, r) = caller_and(request);
        CallRequest::new(&r.caller, &r.tool, &r.arguments_json, r.wait_seconds, by)
            .map(Self)
            .or_status()
    }
}

/// A skill on the wire; `body` only when asked for one skill.
pub fn skill_info(s: &Skill, with_body: bool) -> SkillInfo {
    SkillInfo {
        name: s.name.clone(),
        description: s.description.clone(),
        body: if with_body {
            s.body.clone()
        } else {
            String::new()
        },
        disable_model_invocation: !s.model_invocable,
    }
}

/// A domain update as it goes on the wire.
pub fn update_pb(update: Update) -> CallToolUpdate {
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
