use std::process::ExitCode;

use clap::Args;
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
    /// Keep running and print new events as they are recorded.
    #[arg(long, short = 'f')]
    follow: bool,
}

pub async fn run(ctx: &Ctx, args: EventsArgs) -> anyhow::Result<ExitCode> {
    let channel = ctx.connect().await?;
    let mut stream = EventsClient::new(channel)
        .subscribe(SubscribeRequest {
            from_sequence: args.from,
            stream_prefix: args.stream,
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
    }
    if args.follow {
        eprintln!("tinycode: tinycoded closed the event stream (it is stopping)");
    }
    Ok(ExitCode::SUCCESS)
}
