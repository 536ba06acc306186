use std::io::Read;
use std::process::ExitCode;

use clap::Subcommand;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_shared::proto::{
    AddCustomerMessageRequest, ClassifyTicketRequest, CreateTicketRequest, GetTicketRequest,
    ListTicketsRequest, ListTicketsResponse, RouteTicketRequest, SearchRequest, SearchResponse,
    SetTicketStatusRequest, Ticket, TicketTextRequest,
};
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Subcommand, Debug)]
pub enum TicketAction {
    /// List tickets (ordered by id), optionally filtered.
    List {
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        queue: Option<String>,
        #[arg(long)]
        priority: Option<String>,
        #[arg(long)]
        category: Option<String>,
        /// Only tickets with an SLA clock running that is due within this
        /// long (overdue ones included): 90s, 30m, 4h, 2d.
        #[arg(long, value_name = "DURATION", value_parser = parse_within)]
        due: Option<u64>,
        /// Only tickets with a breached SLA clock.
        #[arg(long)]
        breached: bool,
        /// At most this many (default 100; any number: pages are fetched
        /// until it is reached).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Show one ticket with its conversation and notes.
    Show { id: String },
    /// Full-text search over tickets (subject, messages, notes).
    Search {
        query: String,
        #[arg(long, default_value_t = 10)]
        limit: u32,
    },
    /// Create a ticket (intake); prints it with its new id.
    Create {
        #[arg(long)]
        subject: String,
        #[arg(long)]
        customer: String,
        /// email | chat | phone | web
        #[arg(long, default_value = "web")]
        channel: String,
        /// The customer's first message; `-` reads it from standard input.
        #[arg(long)]
        body: String,
        /// First-response SLA in minutes (default 480).
        #[arg(long, default_value_t = 0)]
        sla: u32,
    },
    /// Add a customer message to a ticket.
    Message { id: String, text: String },
    /// Reply to the customer, as yourself (`-` reads the text from
    /// standard input); recorded as a person's decision.
    Reply { id: String, text: String },
    /// Add an internal note.
    Note { id: String, text: String },
    /// Classify it yourself (any of the three; the rest stay).
    Classify {
        id: String,
        #[arg(long)]
        category: Option<String>,
        /// P0 | P1 | P2 | P3
        #[arg(long)]
        priority: Option<String>,
        #[arg(long)]
        intent: Option<String>,
    },
    /// Route (or reassign) it to a queue of the desk.
    Route {
        id: String,
        queue: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Close it (status `resolved`).
    Close {
        id: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Reopen it (status `open`).
    Reopen {
        id: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
}

/// The daemon's tickets service, as every subcommand here uses it.
type Client = TicketsClient<tinycode_shared::client::DaemonChannel>;

/// `tinycode ticket …`: one function per subcommand (a person's actions in
/// [`person`]).
pub async fn run(ctx: &Ctx, action: TicketAction) -> anyhow::Result<ExitCode> {
    let mut client = TicketsClient::new(ctx.connect().await?);
    match action {
        TicketAction::List {
            status,
            queue,
            priority,
            category,
            due,
            breached,
            limit,
        } => {
            let request = ListTicketsRequest {
                status: status.unwrap_or_default(),
                queue: queue.unwrap_or_default(),
                priority: priority.unwrap_or_default(),
                category: category.unwrap_or_default(),
                due_within_seconds: due.unwrap_or_default(),
                breached,
                ..Default::default()
            };
            list(ctx, &mut client, request, limit).await?;
        }
        TicketAction::Show { id } => show(ctx, &mut client, id).await?,
        TicketAction::Search { query, limit } => {
            let resp = client
                .search(SearchRequest { query, limit })
                .await?
                .into_inner();
            print_hits(ctx, &resp);
        }
        TicketAction::Create {
            subject,
            customer,
            channel,
            body,
            sla,
        } => {
            let request = CreateTicketRequest {
                subject,
                customer,
                channel,
                body,
                sla_minutes: sla,
            };
            create(ctx, &mut client, request).await?;
        }
        TicketAction::Message { id, text } => {
            let t = client
                .add_customer_message(AddCustomerMessageRequest { id, text })
                .await?
                .into_inner();
            changed(ctx, &t);
        }
        other => person(ctx, &mut client, other).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `ticket list`: page until `limit` tickets (or the last page), then the
/// table.
async fn list(
    ctx: &Ctx,
    client: &mut Client,
    mut request: ListTicketsRequest,
    limit: u32,
) -> anyhow::Result<()> {
    let mut resp = ListTicketsResponse::default();
    loop {
        let wanted = limit as usize - resp.tickets.len();
        request.limit = wanted.min(10_000) as u32;
        let page = client.list(request.clone()).await?.into_inner();
        resp.total = page.total;
        resp.tickets.extend(page.tickets);
        if page.next_page_token.is_empty() || resp.tickets.len() >= limit as usize {
            break;
        }
        request.page_token = page.next_page_token;
    }
    if ctx.json {
        output::json_pretty(&render::message_json(
            "tinycode.v1.ListTicketsResponse",
            &resp,
        ));
    } else {
        print!("{}", ticket_table(&resp.tickets));
        if resp.total as usize > resp.tickets.len() {
            println!(
                "({} of {} shown; use --limit)",
                resp.tickets.len(),
                resp.total
            );
        }
    }
    Ok(())
}

/// `ticket show`: one ticket with its conversation and notes.
async fn show(ctx: &Ctx, client: &mut Client, id: String) -> anyhow::Result<()> {
    let t = client
        .get(GetTicketRequest {
            id,
            ..Default::default()
        })
        .await?
        .into_inner();
    if ctx.json {
        output::json_pretty(&render::message_json("tinycode.v1.Ticket", &t));
    } else {
        print!("{}", show_ticket(&t));
    }
    Ok(())
}

/// `ticket create`: intake (a body of `-` is read from standard input).
async fn create(
    ctx: &Ctx,
    client: &mut Client,
    mut request: CreateTicketRequest,
) -> anyhow::Result<()> {
    if request.body == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        request.body = text;
    }
    let t = client.create(request).await?.into_inner();
    if ctx.json {
        output::json_pretty(&render::message_json("tinycode.v1.Ticket", &t));
    } else {
        println!("created {} ({}): {}", t.id, t.status, t.subject);
    }
    Ok(())
}

/// A person's action on a ticket, then the ticket as it is after it.
async fn person(ctx: &Ctx, client: &mut Client, action: TicketAction) -> anyhow::Result<()> {
    let text = |text: String| -> anyhow::Result<String> {
        if text != "-" {
            return Ok(text);
        }
        let mut read = String::new();
        std::io::stdin().read_to_string(&mut read)?;
        Ok(read)
    };
    let status = |ticket_id: String, status: &str, reason: String| SetTicketStatusRequest {
        ticket_id,
        status: status.into(),
        reason,
    };
    let t = match action {
        TicketAction::Reply { id, text: t } => {
            client
                .reply(TicketTextRequest {
                    ticket_id: id,
                    text: text(t)?,
                })
                .await?
        }
        TicketAction::Note { id, text: t } => {
            client
                .add_note(TicketTextRequest {
                    ticket_id: id,
                    text: text(t)?,
                })
                .await?
        }
        TicketAction::Classify {
            id,
            category,
            priority,
            intent,
        } => {
            client
                .classify(ClassifyTicketRequest {
                    ticket_id: id,
                    category: category.unwrap_or_default(),
                    priority: priority.unwrap_or_default(),
                    intent: intent.unwrap_or_default(),
                })
                .await?
        }
        TicketAction::Route { id, queue, reason } => {
            client
                .route(RouteTicketRequest {
                    ticket_id: id,
                    queue,
                    reason,
                })
                .await?
        }
        TicketAction::Close { id, reason } => {
            client.set_status(status(id, "resolved", reason)).await?
        }
        TicketAction::Reopen { id, reason } => {
            client.set_status(status(id, "open", reason)).await?
        }
        _ => return Ok(()),
    }
    .into_inner();
    changed(ctx, &t);
    Ok(())
}

/// A changed ticket: JSON, or one line.
fn changed(ctx: &Ctx, t: &Ticket) {
    if ctx.json {
        output::json_pretty(&render::message_json("tinycode.v1.Ticket", t));
    } else {
        println!(
            "{}: {} messages, status {}, {} · {} → {}",
            t.id,
            t.messages.len(),
            t.status,
            dash(&t.category),
            dash(&t.priority),
            dash(&t.queue)
        );
    }
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

pub fn ticket_table(tickets: &[Ticket]) -> String {
    let rows: Vec<Vec<String>> = tickets
        .iter()
        .map(|t| {
            vec![
                t.id.clone(),
                t.status.clone(),
                dash(&t.priority),
                dash(&t.category),
                dash(&t.queue),
                due_cell(t),
                sla_cell(t),
                output::clip(&t.subject, 60),
            ]
        })
        .collect();
    output::table(
        &[
            "ID", "STATUS", "PRI", "CATEGORY", "QUEUE", "DUE", "SLA", "SUBJECT",
        ],
        &rows,
    )
}

/// `--due 4h`: seconds (90s, 30m, 4h, 2d; a bare number is minutes).
fn parse_within(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 30m, 4h or 2d"))?;
    let scale = match unit {
        "s" => 1,
        "" | "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    match n.checked_mul(scale) {
        Some(s) if s > 0 && s <= 366 * 86_400 => Ok(s),
        _ => Err(format!("{text:?}: from 1 second to 366 days")),
    }
}

fn due_cell(t: &Ticket) -> String {
    render::sla::due(t)
}

fn sla_cell(t: &Ticket) -> String {
    render::sla::state(t).1
}

/// `ticket show`'s SLA lines, one per clock.
fn sla_lines(t: &Ticket) -> String {
    t.sla
        .iter()
        .map(|c| format!("  sla        {}\n", render::sla::line(c)))
        .collect()
}

fn show_ticket(t: &Ticket) -> String {
    let mut out = format!("{}  {}\n", t.id, t.subject);
    out.push_str(&format!("  customer   {} ({})\n", t.customer, t.channel));
    if let Some(x) = &t.external {
        out.push_str(&format!(
            "  source     {} · conversation {}\n",
            x.source, x.conversation
        ));
    }
    out.push_str(&format!(
        "  created    {} · SLA {} min\n",
        t.created_at, t.sla_minutes
    ));
    out.push_str(&format!("  status     {}\n", t.status));
    out.push_str(&sla_lines(t));
    if !t.category.is_empty() || !t.priority.is_empty() {
        out.push_str(&format!(
            "  triage     {} · {} · {}\n",
            dash(&t.category),
            dash(&t.priority),
            dash(&t.intent)
        ));
    }
    if !t.queue.is_empty() {
        out.push_str(&format!("  queue      {}\n", t.queue));
    }
    if !t.confidence.is_empty() {
        out.push_str(&format!(
            "  confidence {}\n",
            render::confidence(&t.confidence)
        ));
    }
    if let Some(s) = &t.suggestion {
        out.push_str(&format!(
            "  REVIEW     {} — `tinycode triage review accept {}`, or `correct {} --category …`\n",
            render::suggestion(s),
            t.id,
            t.id
        ));
    }
    if t.escalate_level > 0 {
        out.push_str(&format!("  escalated  L{}\n", t.escalate_level));
    }
    for m in &t.messages {
        out.push_str(&format!(
            "\n[{} · {}]\n{}\n",
            m.from,
            m.at,
            m.text.trim_end()
        ));
    }
    for n in &t.notes {
        out.push_str(&format!("\n(note · {}) {}\n", n.at, n.text.trim_end()));
    }
    out
}

pub fn print_hits(ctx: &Ctx, resp: &SearchResponse) {
    if ctx.json {
        output::json_pretty(&render::message_json("tinycode.v1.SearchResponse", resp));
        return;
    }
    if resp.hits.is_empty() {
        println!("no matches");
        return;
    }
    for h in &resp.hits {
        println!("{:>6.2}  {} {}  {}", h.score, h.kind, h.id, h.title);
        println!("        {}", h.snippet);
    }
}
