//! Everything the daemon serves, opened in dependency order: the desk, the
//! approvals and sessions, the MCP servers, the triage worker, the control
//! and the evaluations.

use std::path::Path;
use std::sync::Arc;

use tinycode_shared::paths::Layout;
use tokio::signal::unix::{SignalKind, signal};

use crate::cluster::Cluster;
use crate::config::Config;
use crate::domain::desk::{Desk, FilesLook};
use crate::progress::Progress;
use crate::store::EventStore;

use super::{DaemonError, Stages, io};

/// SIGHUP reloads the config, as `tinycode daemon reload` does; the
/// outcome goes to the daemon's log.
fn reload_on_sighup(
    control: Arc<crate::control::Control>,
    layout: &Layout,
) -> Result<(), DaemonError> {
    let mut hangup = signal(SignalKind::hangup())
        .map_err(io("cannot install SIGHUP handler", &layout.state_dir))?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the config");
            if let Err(e) = control.reload().await {
                tracing::error!(error = %e, "the config was not reloaded");
            }
        }
    });
    Ok(())
}

/// Everything the daemon serves, opened in dependency order.
pub(super) struct Engine {
    pub(super) desk: Arc<Desk>,
    pub(super) sessions: Arc<crate::sessions::Sessions>,
    pub(super) triage: Arc<crate::triage::Triage>,
    pub(super) mcp: Arc<crate::mcp::McpHub>,
    pub(super) calls: Arc<crate::calls::DirectCalls>,
    pub(super) control: Arc<crate::control::Control>,
    pub(super) extensions: Arc<crate::extensions::Extensions>,
    pub(super) evals: Arc<crate::eval::Evals>,
    pub(super) reports: Arc<crate::reports::Reports>,
    pub(super) connectors: Arc<crate::connectors::Connectors>,
    pub(super) credentials: Arc<crate::auth::Credentials>,
    pub(super) store: EventStore,
}

/// What every part of the engine is opened with.
struct Opening<'a> {
    store: &'a EventStore,
    workspace: &'a Path,
    /// The daemon's state directory (the offline model is kept there).
    state_dir: &'a Path,
    config: &'a Config,
    cluster: &'a Arc<Cluster>,
    progress: &'a Arc<Progress>,
}

impl Engine {
    pub(super) async fn open(
        store: &EventStore,
        layout: &Layout,
        workspace: &Path,
        config: &Config,
        (cluster, progress, look): (&Arc<Cluster>, &Arc<Progress>, FilesLook),
        stages: &mut Stages,
    ) -> Result<Self, DaemonError> {
        let opening = Opening {
            store,
            workspace,
            state_dir: &layout.state_dir,
            config,
            cluster,
            progress,
        };
        let (desk, learner) = opening.desk(look, stages).await?;
        let skills = discover_skills(workspace);
        let artifacts = layout.state_dir.join("artifacts");
        let defaults = crate::sessions::TurnDefaults::from_config(config, Some(artifacts.clone()));
        let eval_model = defaults.model.clone();
        let opened = opening.sessions(&desk, &skills, &learner, defaults, stages);
        let (sessions, credentials) = opened.await?;
        // MCP servers connect in the background: the daemon serves meanwhile.
        let mcp = Arc::new(crate::mcp::McpHub::start(
            &config.mcp_servers,
            workspace,
            sessions.tools().dynamic(),
        ));
        let triage = crate::triage::Triage::open(
            store.clone(),
            Arc::clone(&desk),
            Arc::clone(&sessions),
            config.auto_triage.clone(),
            Arc::clone(cluster),
        )
        .await?;
        stages.done("triage");
        let connectors = crate::connectors::Connectors::open(
            store.clone(),
            Arc::clone(&desk),
            config.connectors.clone(),
            cluster.id().to_string(),
        )?;
        let control = crate::control::Control::new(
            config.clone(),
            artifacts,
            Arc::clone(&sessions),
            Arc::clone(&triage),
            (Arc::clone(&mcp), Arc::clone(&connectors)),
            Arc::clone(&skills),
        );
        reload_on_sighup(Arc::clone(&control), layout)?;
        let evals = crate::eval::Evals::open(
            store.clone(),
            learner.projector().clone(),
            workspace.to_path_buf(),
            layout.state_dir.clone(),
            config.clone(),
            eval_model,
        )?;
        let reports = serve_reports(store, layout, config, &desk, &sessions, &evals);
        Ok(Self {
            connectors,
            credentials,
            calls: crate::calls::DirectCalls::new(store.clone(), Arc::clone(&sessions)),
            extensions: crate::extensions::Extensions::new(workspace, Arc::clone(&mcp), skills),
            evals,
            reports,
            control,
            desk,
            sessions,
            triage,
            mcp,
            store: store.clone(),
        })
    }
}

impl Opening<'_> {
    /// Open the desk (its read models caught up, the workspace files read
    /// back: `look` listed and `stat`ed them while the log opened) and start
    /// the offline model's learner.
    async fn desk(
        &self,
        look: FilesLook,
        stages: &mut Stages,
    ) -> Result<(Arc<Desk>, Arc<crate::learn::tickets::TicketLearner>), DaemonError> {
        let settings = crate::domain::desk::DeskSettings {
            progress: Arc::clone(self.progress),
            ..self.config.desk()
        };
        let (desk, report) =
            Desk::open_looked(self.store.clone(), self.workspace, &settings, look).await?;
        stages.done("desk");
        self.progress
            .stage("opening the approvals, sessions and triage");
        // The offline model learns from the desk's history, in the background.
        let kept = self.state_dir.join(crate::learn::tickets::KEPT_MODEL_FILE);
        let learner = match std::env::var_os(crate::learn::tickets::FROZEN_MODEL_ENV) {
            Some(frozen) => {
                let frozen = std::path::PathBuf::from(frozen);
                crate::learn::tickets::TicketLearner::start_frozen(self.store, frozen).await?
            }
            None => crate::learn::tickets::TicketLearner::start(self.store, Some(kept))?,
        };
        tracing::info!(
            tickets = report.tickets,
            imported = report.imported,
            updated = report.updated,
            articles = report.articles,
            read_back = report.read,
            skipped = report.warnings.len(),
            "workspace loaded"
        );
        Ok((desk, learner))
    }

    /// Open the approvals, then the sessions.
    async fn sessions(
        &self,
        desk: &Arc<Desk>,
        skills: &Arc<crate::skills::Skills>,
        learner: &Arc<crate::learn::tickets::TicketLearner>,
        defaults: crate::sessions::TurnDefaults,
        stages: &mut Stages,
    ) -> Result<
        (
            Arc<crate::sessions::Sessions>,
            Arc<crate::auth::Credentials>,
        ),
        DaemonError,
    > {
        // Provider keys, asked on every model request.
        let credentials = crate::auth::Credentials::open(
            self.store.clone(),
            self.state_dir,
            self.config.providers.clone(),
            Box::new(|k| std::env::var(k).ok()),
        );
        let approvals = crate::approvals::Approvals::open(self.store.clone()).await?;
        stages.done("approvals");
        let sessions = crate::sessions::Sessions::open(
            crate::sessions::Parts {
                store: self.store.clone(),
                desk: Arc::clone(desk),
                skills: Arc::clone(skills),
                approvals,
                workspace: self.workspace.to_path_buf(),
                cluster: Arc::clone(self.cluster),
                // The offline model, handed the desk's learner (no global).
                offline: Arc::new(crate::offline::OfflineModel::new(Some(Arc::clone(learner)))),
                keys: Arc::clone(&credentials) as Arc<dyn crate::model::keys::Keys>,
            },
            defaults,
        )
        .await?;
        stages.done("sessions");
        Ok((sessions, credentials))
    }
}

/// The desk's reports, handed to the sessions (`render_report`) and made
/// daily when the config says so.
fn serve_reports(
    store: &EventStore,
    layout: &Layout,
    config: &Config,
    desk: &Arc<crate::domain::desk::Desk>,
    sessions: &Arc<crate::sessions::Sessions>,
    evals: &Arc<crate::eval::Evals>,
) -> Arc<crate::reports::Reports> {
    let reports = crate::reports::Reports::new(
        store.clone(),
        Arc::clone(desk),
        Arc::clone(sessions.approvals()),
        evals.projector().clone(),
        layout.state_dir.clone(),
        config.prices.clone(),
    );
    sessions.serve_reports(Arc::clone(&reports) as _);
    reports.warm_up();
    if let Some(minute) = config.daily_report {
        tokio::spawn(crate::reports::run_daily(Arc::clone(&reports), minute));
    }
    reports
}

/// The workspace's skills; what their discovery warns about is logged.
fn discover_skills(workspace: &Path) -> Arc<crate::skills::Skills> {
    let (skills, skill_warnings) = crate::skills::Skills::discover(workspace);
    let skills = Arc::new(skills);
    for w in &skill_warnings {
        tracing::warn!("{w}");
    }
    skills
}
