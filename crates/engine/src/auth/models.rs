//! `Providers.ListModels`: the offline model first, then what each
//! provider with a key (or a config entry) serves, asked all at once.

use std::sync::Arc;

use crate::model::keys::Keys;

use super::{Credentials, Source};

/// One provider's models (`provider/model`), or why they could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderModels {
    pub provider: String,
    pub models: Vec<String>,
    pub error: Option<String>,
}

impl Credentials {
    /// The models of `only` (empty: every provider that has a key, or that
    /// config names), the offline model first.
    pub async fn models(self: &Arc<Self>, only: &str) -> Vec<ProviderModels> {
        let providers = self
            .providers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let (known, _) = self.list();
        let asked: Vec<_> = known
            .into_iter()
            .filter(|k| match only {
                "" => k.source != Source::None || providers.iter().any(|p| p.name == k.provider),
                name => k.provider == name,
            })
            .collect();
        let env = |k: &str| std::env::var(k).ok();
        let lists = asked.iter().map(|k| {
            let at =
                crate::model::catalog::endpoint(&format!("{}/-", k.provider), &providers, &env);
            let keys = Arc::clone(self) as Arc<dyn Keys>;
            async move {
                let listed = match at {
                    Ok(Some(at)) => crate::model::list_models(&at, keys).await,
                    Ok(None) => Ok(Vec::new()),
                    Err(e) => Err(e),
                };
                let (models, error) = match listed {
                    Ok(ids) => (ids, None),
                    Err(e) => (Vec::new(), Some(e.to_string())),
                };
                ProviderModels {
                    models: models
                        .into_iter()
                        .map(|m| format!("{}/{m}", k.provider))
                        .collect(),
                    provider: k.provider.clone(),
                    error,
                }
            }
        });
        let mut out = Vec::new();
        if only.is_empty() || only == "offline" {
            out.push(ProviderModels {
                provider: "offline".into(),
                models: vec!["offline".into()],
                error: None,
            });
        }
        out.extend(futures::future::join_all(lists).await);
        out
    }
}
