//! The Providers service: keys set, removed and listed (never returned),
//! each provider's models. The work is `crate::auth`.

use std::sync::Arc;

use tinycode_shared::proto::providers_server::Providers as ProvidersRpc;
use tinycode_shared::proto::{
    CredentialInfo, CredentialReceipt, ListCredentialsRequest, ListCredentialsResponse,
    ListModelsRequest, ListModelsResponse, ProviderModels, RemoveCredentialRequest,
    SetCredentialRequest,
};
use tonic::{Request, Response, Status};

use super::OrStatus;
use super::peer::caller_and;
use super::validate;
use crate::auth::{Credentials, ProviderKey};

pub struct ProvidersService {
    credentials: Arc<Credentials>,
}

impl ProvidersService {
    pub fn new(credentials: Arc<Credentials>) -> Self {
        Self { credentials }
    }
}

fn info(k: ProviderKey) -> CredentialInfo {
    let last = k.last.unwrap_or_default();
    CredentialInfo {
        source: k.source.name().into(),
        env: k.env,
        required: k.required,
        last_result: match (last.at.is_empty(), last.ok) {
            (true, _) => String::new(),
            (false, true) => "ok".into(),
            (false, false) => "failed".into(),
        },
        last_at: last.at,
        last_error: last.error,
        problem: k.problem.unwrap_or_default(),
        provider: k.provider,
    }
}

#[tonic::async_trait]
impl ProvidersRpc for ProvidersService {
    async fn set_credential(
        &self,
        request: Request<SetCredentialRequest>,
    ) -> Result<Response<CredentialReceipt>, Status> {
        let (by, req) = caller_and(request);
        validate::max_len("provider", &req.provider, 64)?;
        let set = self.credentials.set(&req.provider, &req.key, by);
        let sequence = set.await.or_status()?;
        Ok(Response::new(CredentialReceipt {
            provider: req.provider,
            sequence,
            unchanged: false,
        }))
    }

    async fn remove_credential(
        &self,
        request: Request<RemoveCredentialRequest>,
    ) -> Result<Response<CredentialReceipt>, Status> {
        let (by, req) = caller_and(request);
        validate::max_len("provider", &req.provider, 64)?;
        let removed = self
            .credentials
            .remove(&req.provider, by)
            .await
            .or_status()?;
        Ok(Response::new(CredentialReceipt {
            provider: req.provider,
            sequence: removed.unwrap_or(0),
            unchanged: removed.is_none(),
        }))
    }

    async fn list_credentials(
        &self,
        _request: Request<ListCredentialsRequest>,
    ) -> Result<Response<ListCredentialsResponse>, Status> {
        let (providers, master) = self.credentials.list();
        Ok(Response::new(ListCredentialsResponse {
            providers: providers.into_iter().map(info).collect(),
            master_key: master.unwrap_or_default(),
        }))
    }

    async fn list_models(
        &self,
        request: Request<ListModelsRequest>,
    ) -> Result<Response<ListModelsResponse>, Status> {
        let only = request.into_inner().provider;
        validate::max_len("provider", &only, 64)?;
        let lists = self.credentials.models(&only).await;
        let providers = lists
            .into_iter()
            .map(|p| ProviderModels {
                provider: p.provider,
                models: p.models,
                error: p.error.unwrap_or_default(),
            })
            .collect();
        Ok(Response::new(ListModelsResponse { providers }))
    }
}
