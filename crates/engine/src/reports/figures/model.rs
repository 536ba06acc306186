//! The agent's model use in a report: the steps of the triage sessions
//! whose provider reported usage, by model and per ticket, priced at
//! `reports.prices`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Period;
use crate::config::{Price, Prices};
use crate::domain::sla::Facts;

/// The agent's model use in the period: the steps of triage sessions whose
/// provider reported usage, by model, and per ticket.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelUse {
    /// Tickets with model use in the period.
    pub tickets: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Tokens (input + output) per ticket.
    pub tokens_per_ticket: Option<f64>,
    /// At `reports.prices`; `None` when a model used has no price.
    pub cost: Option<f64>,
    pub cost_per_ticket: Option<f64>,
    pub by_model: Vec<ModelRow>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelRow {
    /// `provider/model` (`(unknown)`: a step stored before steps named
    /// their model).
    pub model: String,
    pub tickets: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `None`: no price for this model in `reports.prices`.
    pub cost: Option<f64>,
}

/// Per model: tickets, input and output tokens; and the tickets with any
/// model use.
#[derive(Default)]
pub(super) struct Tally {
    by: BTreeMap<String, (u64, u64, u64)>,
    tickets: u64,
}

impl Tally {
    /// One ticket's model use in `period`.
    pub(super) fn add(&mut self, period: Period, f: &Facts) {
        let mut mine: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for (at, model, input, output) in f.usage() {
            if period.holds(at) {
                let row = mine.entry(model).or_default();
                row.0 += input;
                row.1 += output;
            }
        }
        if mine.is_empty() {
            return;
        }
        self.tickets += 1;
        for (model, (input, output)) in mine {
            let name = if model.is_empty() { "(unknown)" } else { model };
            let row = self.by.entry(name.to_string()).or_default();
            row.0 += 1;
            row.1 += input;
            row.2 += output;
        }
    }

    /// The model use of the period, priced: a model without a price leaves
    /// the total cost unknown (its own row says so), never counted as free.
    /// The offline model runs on the desk's machine and costs nothing.
    pub(super) fn finish(self, prices: &Prices) -> ModelUse {
        let (tickets, by) = (self.tickets, self.by);
        let mut total = ModelUse {
            tickets,
            cost: Some(0.0),
            ..ModelUse::default()
        };
        for (model, (n, input, output)) in by {
            let price = match prices.get(&model) {
                Some(p) => Some(*p),
                None if model == "offline" => Some(Price {
                    input: 0.0,
                    output: 0.0,
                }),
                None => None,
            };
            let cost = price.map(|p| (input as f64 * p.input + output as f64 * p.output) / 1e6);
            total.input_tokens += input;
            total.output_tokens += output;
            total.cost = total.cost.zip(cost).map(|(a, b)| a + b);
            total.by_model.push(ModelRow {
                model,
                tickets: n,
                input_tokens: input,
                output_tokens: output,
                cost,
            });
        }
        if tickets == 0 {
            total.cost = None;
        } else {
            let n = tickets as f64;
            total.tokens_per_ticket = Some((total.input_tokens + total.output_tokens) as f64 / n);
            total.cost_per_ticket = total.cost.map(|c| c / n);
        }
        total
    }
}
