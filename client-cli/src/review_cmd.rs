//! `tinycode triage review`: the review queue — model decisions held
//! because their confidence was below `triage.reviewBelow` — listed, and
//! each accepted or corrected (a person's decision, which the learner
//! learns from).

use std::process::ExitCode;

use clap::Subcommand;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_shared::proto::{ListTicketsRequest, ReviewTicketRequest, Ticket};
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Subcommand, Debug, Clone)]
pub enum ReviewAction {
    /// Take the suggested decision as it is.
    Accept { id: String },
    /// Decide otherwise: the fields given replace the suggestion's.
    Correct {
        id: String,
        #[arg(long)]
        category: Option<String>,
        #[arg(long)]
        priority: Option<String>,
        #[arg(long)]
        queue: Option<String>,
    },
}

pub async fn run(ctx: &Ctx, action: Option<ReviewAction>) -> anyhow::Result<ExitCode> {
    let mut client = TicketsClient::new(ctx.connect().await?);
    let Some(action) = action else {
        return list(ctx, &mut client).await;
    };
    let request = match action {
        ReviewAction::Accept { id } => ReviewTicketRequest {
            ticket_id: id,
            ..Default::default()
        },
        ReviewAction::Correct {
            id,
            category,
            priority,
            queue,
        } => {
            anyhow::ensure!(
                category.is_some() || priority.is_some() || queue.is_some(),
                "`correct` needs --category, --priority or --queue (or use `accept`)"
            );
            ReviewTicketRequest {
                ticket_id: id,
                category: category.unwrap_or_default(),
                priority: priority.unwrap_or_default(),
                queue: queue.unwrap_or_default(),
            }
        }
    };
    let t = client.review(request).await?.into_inner();
    if ctx.json {
        output::json_pretty(&render::message_json("tinycode.v1.Ticket", &t));
    } else {
        println!(
            "{}: {} · {} → {} ({})",
            t.id, t.category, t.priority, t.queue, t.status
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(
    ctx: &Ctx,
    client: &mut TicketsClient<tinycode_shared::client::DaemonChannel>,
) -> anyhow::Result<ExitCode> {
    let tickets: Vec<Ticket> = client
        .list(ListTicketsRequest {
            needs_review: true,
            brief: true,
            order: "urgent".into(),
            limit: 1000,
            ..Default::default()
        })
        .await?
        .into_inner()
        .tickets;
    if ctx.json {
        for t in &tickets {
            output::json_line(&render::message_json("tinycode.v1.Ticket", t));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if tickets.is_empty() {
        println!("nothing waits for review");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = tickets
        .iter()
        .map(|t| {
            let s = t.suggestion.clone().unwrap_or_default();
            vec![
                t.id.clone(),
                t.subject.chars().take(40).collect(),
                render::suggestion(&s),
            ]
        })
        .collect();
    print!("{}", output::table(&["TICKET", "SUBJECT", "HELD"], &rows));
    println!(
        "decide: tinycode triage review accept ID | correct ID --category C --priority P --queue Q"
    );
    Ok(ExitCode::SUCCESS)
}
