//! The Extensions service: MCP servers and skills managed while the daemon
//! runs. Conversion to and from protobuf happens here; the work is
//! `crate::extensions`.

use std::sync::Arc;

use tinycode_shared::proto::extensions_server::Extensions as ExtensionsRpc;
use tinycode_shared::proto::{
    AddMcpServerRequest, InstallSkillRequest, ListMcpServersRequest, ListMcpServersResponse,
    McpServerInfo, RemoveMcpServerRequest, RemoveMcpServerResponse, RemoveSkillRequest,
    RemoveSkillResponse, SkillInfo,
};
use tonic::{Request, Response, Status};

use super::OrStatus;
use super::calls::skill_info;
use super::daemon::mcp_status;
use crate::config::McpServerSpec;
use crate::extensions::Extensions;
use crate::mcp::ServerStatus;

pub struct ExtensionsService {
    extensions: Arc<Extensions>,
}

impl ExtensionsService {
    pub fn new(extensions: Arc<Extensions>) -> Self {
        Self { extensions }
    }
}

fn info((spec, status): &(McpServerSpec, ServerStatus)) -> McpServerInfo {
    McpServerInfo {
        status: Some(mcp_status(status)),
        spec_json: spec.to_json().to_string(),
        launch: spec.launch(),
        enabled: spec.enabled,
    }
}

#[tonic::async_trait]
impl ExtensionsRpc for ExtensionsService {
    async fn list_mcp_servers(
        &self,
        _request: Request<ListMcpServersRequest>,
    ) -> Result<Response<ListMcpServersResponse>, Status> {
        let servers = self.extensions.mcp_servers().iter().map(info).collect();
        Ok(Response::new(ListMcpServersResponse { servers }))
    }

    async fn add_mcp_server(
        &self,
        request: Request<AddMcpServerRequest>,
    ) -> Result<Response<McpServerInfo>, Status> {
        let r = request.into_inner();
        let added = self
            .extensions
            .add_mcp_server(&r.name, &r.spec_json, r.replace)
            .await
            .or_status()?;
        Ok(Response::new(info(&added)))
    }

    async fn remove_mcp_server(
        &self,
        request: Request<RemoveMcpServerRequest>,
    ) -> Result<Response<RemoveMcpServerResponse>, Status> {
        let name = request.into_inner().name;
        self.extensions.remove_mcp_server(&name).await.or_status()?;
        Ok(Response::new(RemoveMcpServerResponse {}))
    }

    async fn install_skill(
        &self,
        request: Request<InstallSkillRequest>,
    ) -> Result<Response<SkillInfo>, Status> {
        let r = request.into_inner();
        let skill = self
            .extensions
            .install_skill(&r.path, r.replace)
            .await
            .or_status()?;
        Ok(Response::new(skill_info(&skill, false)))
    }

    async fn remove_skill(
        &self,
        request: Request<RemoveSkillRequest>,
    ) -> Result<Response<RemoveSkillResponse>, Status> {
        let name = request.into_inner().name;
        self.extensions.remove_skill(&name).await.or_status()?;
        Ok(Response::new(RemoveSkillResponse {}))
    }
}
