use std::io::Read;
use std::process::ExitCode;

use clap::Subcommand;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_shared::proto::{
    AddCustomerMessageRequest, CreateTicketRequest, GetTicketRequest, ListTicketsRequest,
    ListTicketsResponse, SearchRequest, SearchResponse, Ticket,
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
}

pub async fn run(ctx: &Ctx, action: TicketAction) -> anyhow::Result<ExitCode> {
    let mut client = TicketsClient::new(ctx.connect().await?);
    match action {
        TicketAction::List {
            status,
            queue,
            priority,
            category,
            limit,
        } => {
            let mut request = ListTicketsRequest {
                status: status.unwrap_or_default(),
                queue: queue.unwrap_or_default(),
                priority: priority.unwrap_or_default(),
                category: category.unwrap_or_default(),
                ..Default::default()
            };
            // Page until `limit` tickets (or the last page).
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
        }
        TicketAction::Show { id } => {
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
        }
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
            let body = if body == "-" {
                let mut text = String::new();
                std::io::stdin().read_to_string(&mut text)?;
                text
            } else {
                body
            };
            let t = client
                .create(CreateTicketRequest {
                    subject,
                    customer,
                    channel,
                    body,
                    sla_minutes: sla,
                })
                .await?
                .into_inner();
            if ctx.json {
                output::json_pretty(&render::message_json("tinycode.v1.Ticket", &t));
            } else {
                println!("created {} ({}): {}", t.id, t.status, t.subject);
            }
        }
        TicketAction::Message { id, text } => {
            let t = client
                .add_customer_message(AddCustomerMessageRequest { id, text })
                .await?
                .into_inner();
            if ctx.json {
                output::json_pretty(&render::message_json("tinycode.v1.Ticket", &t));
            } else {
                println!(
                    "{}: {} messages, status {}",
                    t.id,
                    t.messages.len(),
                    t.status
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
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
                output::clip(&t.subject, 60),
            ]
        })
        .collect();
    output::table(
        &["ID", "STATUS", "PRI", "CATEGORY", "QUEUE", "SUBJECT"],
        &rows,
    )
}

fn show_ticket(t: &Ticket) -> String {
    let mut out = format!("{}  {}\n", t.id, t.subject);
    out.push_str(&format!("  customer   {} ({})\n", t.customer, t.channel));
    out.push_str(&format!(
        "  created    {} · SLA {} min\n",
        t.created_at, t.sla_minutes
    ));
    out.push_str(&format!("  status     {}\n", t.status));
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
