use std::process::ExitCode;

use clap::Subcommand;
use tinycode_shared::proto::knowledge_client::KnowledgeClient;
use tinycode_shared::proto::{
    GetArticleRequest, ListArticlesRequest, ListArticlesResponse, SearchRequest,
};
use tinycode_shared::render;

use crate::ticket_cmd::print_hits;
use crate::{Ctx, output};

#[derive(Subcommand, Debug)]
pub enum KbAction {
    /// List knowledge articles, optionally only those with a tag.
    List {
        #[arg(long)]
        tag: Option<String>,
    },
    /// Show one article.
    Show { id: String },
    /// Full-text search over articles (title, tags, body).
    Search {
        query: String,
        #[arg(long, default_value_t = 10)]
        limit: u32,
    },
}

pub async fn run(ctx: &Ctx, action: KbAction) -> anyhow::Result<ExitCode> {
    let mut client = KnowledgeClient::new(ctx.connect().await?);
    match action {
        KbAction::List { tag } => {
            // Every page.
            let mut request = ListArticlesRequest {
                tag: tag.unwrap_or_default(),
                limit: 1_000,
                ..Default::default()
            };
            let mut resp = ListArticlesResponse::default();
            loop {
                let page = client.list(request.clone()).await?.into_inner();
                resp.articles.extend(page.articles);
                if page.next_page_token.is_empty() {
                    break;
                }
                request.page_token = page.next_page_token;
            }
            if ctx.json {
                output::json_pretty(&render::message_json(
                    "tinycode.v1.ListArticlesResponse",
                    &resp,
                ));
            } else {
                let rows: Vec<Vec<String>> = resp
                    .articles
                    .iter()
                    .map(|a| {
                        vec![
                            a.id.clone(),
                            a.owner.clone(),
                            output::clip(&a.tags.join(", "), 30),
                            output::clip(&a.title, 50),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    output::table(&["ID", "OWNER", "TAGS", "TITLE"], &rows)
                );
            }
        }
        KbAction::Show { id } => {
            let a = client.get(GetArticleRequest { id }).await?.into_inner();
            if ctx.json {
                output::json_pretty(&render::message_json("tinycode.v1.KnowledgeArticle", &a));
            } else {
                println!("{}  {}", a.id, a.title);
                println!(
                    "  owner {} · tags {} · updated {}\n",
                    a.owner,
                    a.tags.join(", "),
                    a.updated_at
                );
                print!("{}", a.body);
            }
        }
        KbAction::Search { query, limit } => {
            let resp = client
                .search(SearchRequest { query, limit })
                .await?
                .into_inner();
            print_hits(ctx, &resp);
        }
    }
    Ok(ExitCode::SUCCESS)
}
