//! `tinycode sla watch`: SLA alerts as the daemon records them.

use std::process::ExitCode;

use clap::Subcommand;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::events_client::EventsClient;
use tinycode_shared::proto::{Event, SubscribeRequest};
use tinycode_shared::render;

use crate::{Ctx, events_cmd, output};

#[derive(Subcommand, Debug)]
pub enum SlaAction {
    /// Follow SLA alerts (at risk, breached) as they are recorded; with
    /// `--from N`, the recorded ones from sequence N first.
    Watch {
        #[arg(long, value_name = "N")]
        from: Option<u64>,
        /// Stop after the alerts recorded so far (with `--from`).
        #[arg(long)]
        no_follow: bool,
    },
}

pub async fn run(ctx: &Ctx, action: SlaAction) -> anyhow::Result<ExitCode> {
    let SlaAction::Watch { from, no_follow } = action;
    let mut next = match from {
        Some(n) => n,
        None => events_cmd::head(ctx).await? + 1,
    };
    let mut channel = ctx.connect().await?;
    if !ctx.json && !no_follow {
        eprintln!("following SLA alerts from #{next} (Ctrl+C to stop)");
    }
    loop {
        let result = async {
            let mut stream = EventsClient::new(channel)
                .subscribe(SubscribeRequest {
                    from_sequence: next,
                    stream_prefix: "sla-".into(),
                    follow: !no_follow,
                })
                .await?
                .into_inner();
            while let Some(event) = stream.message().await? {
                print_alert(ctx, &event);
                next = event.sequence + 1;
            }
            anyhow::Ok(())
        }
        .await;
        if no_follow {
            return result.map(|()| ExitCode::SUCCESS);
        }
        eprintln!("tinycode: tinycoded went away; waiting for it to resume at #{next}");
        channel = events_cmd::wait_for_daemon(ctx).await;
    }
}

fn print_alert(ctx: &Ctx, event: &Event) {
    if ctx.json {
        output::json_line(&render::event_json(event));
        return;
    }
    let (what, alert) = match &event.payload {
        Some(Payload::SlaAtRisk(a)) => ("at risk ", a),
        Some(Payload::SlaBreached(a)) => ("BREACHED", a),
        _ => return,
    };
    let cycle = if alert.cycle > 0 {
        format!(" #{}", alert.cycle)
    } else {
        String::new()
    };
    let late = if alert.late {
        " (recorded late: no daemon ran then)"
    } else {
        ""
    };
    println!(
        "{} {what} {} {}{cycle} · due {} · policy {}{late}",
        alert.at, alert.ticket_id, alert.target, alert.due_at, alert.policy
    );
}
