use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tinycode_shared::client::{self, DaemonChannel};
use tinycode_shared::proto::SubscribeRequest;
use tinycode_shared::proto::events_client::EventsClient;
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// First global sequence to print.
    #[arg(long, default_value_t = 1, value_name = "N")]
    from: u64,
    /// Only streams whose id starts with PREFIX (e.g. `ticket-`, `daemon`).
    #[arg(long, value_name = "PREFIX", default_value = "")]
    stream: String,
    /// Keep running and print new events as they are recorded. When the
    /// daemon restarts, wait for it and resume after the last event shown.
    #[arg(long, short = 'f')]
    follow: bool,
}

pub async fn run(ctx: &Ctx, args: EventsArgs) -> anyhow::Result<ExitCode> {
    let mut channel = ctx.connect().await?;
    let mut next = args.from;
    loop {
        let ended_cleanly = print_from(ctx, channel, &args, &mut next).await;
        match ended_cleanly {
            Ok(()) if !args.follow => return Ok(ExitCode::SUCCESS),
            Err(e) if !args.follow => return Err(e),
            _ => {}
        }
        eprintln!(
            "tinycode: tinycoded went away; waiting for it to come back to resume at #{next} (Ctrl+C to stop)"
        );
        channel = wait_for_daemon(ctx).await;
    }
}

/// Print events from `*next` until the stream ends; `*next` tracks the
/// first sequence not yet printed, so a resumed stream never repeats or
/// skips one.
async fn print_from(
    ctx: &Ctx,
    channel: DaemonChannel,
    args: &EventsArgs,
    next: &mut u64,
) -> anyhow::Result<()> {
    let mut stream = EventsClient::new(channel)
        .subscribe(SubscribeRequest {
            from_sequence: *next,
            stream_prefix: args.stream.clone(),
            follow: args.follow,
        })
        .await?
        .into_inner();
    while let Some(event) = stream.message().await? {
        if ctx.json {
            output::json_line(&render::event_json(&event));
        } else {
            println!("{}", render::event_line(&event));
        }
        *next = event.sequence + 1;
    }
    Ok(())
}

pub async fn wait_for_daemon(ctx: &Ctx) -> DaemonChannel {
    loop {
        if let Ok(channel) = client::connect(&ctx.layout.socket, &ctx.client).await {
            return channel;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The log's last sequence now (to follow only what comes next).
pub async fn head(ctx: &Ctx) -> anyhow::Result<u64> {
    let status = tinycode_shared::proto::daemon_client::DaemonClient::new(ctx.connect().await?)
        .get_status(tinycode_shared::proto::GetStatusRequest {})
        .await?
        .into_inner();
    Ok(status.last_sequence)
}
