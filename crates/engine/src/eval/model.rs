//! The evals read model (tree `proj-evals`): the only fold of `eval-`
//! streams. `r/<id>` → the finished report (protobuf); `o/<finished
//! at><id>` → `()` for listing newest first.

use prost::Message;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{EvalReport, Event};

use crate::projection::{Projection, ProjectionError, Writes};

const REPORT: &[u8] = b"r/";
const ORDER: &[u8] = b"o/";

fn report_key(id: &str) -> Vec<u8> {
    [REPORT, id.as_bytes()].concat()
}

fn decode(bytes: &[u8]) -> Result<EvalReport, ProjectionError> {
    EvalReport::decode(bytes)
        .map_err(|e| ProjectionError::Corrupt(format!("a stored evaluation: {e}")))
}

pub fn get(tree: &sled::Tree, id: &str) -> Result<Option<EvalReport>, ProjectionError> {
    tree.get(report_key(id))?.map(|v| decode(&v)).transpose()
}

pub fn newest(tree: &sled::Tree, limit: usize) -> Result<Vec<EvalReport>, ProjectionError> {
    let mut out = Vec::new();
    for row in tree.scan_prefix(ORDER).rev().take(limit) {
        let (key, _) = row?;
        let id = String::from_utf8_lossy(&key[ORDER.len() + 8..]).to_string();
        if let Some(report) = get(tree, &id)? {
            out.push(report);
        }
    }
    Ok(out)
}

pub struct EvalsModel;

impl Projection for EvalsModel {
    fn name(&self) -> &'static str {
        "evals"
    }

    fn version(&self) -> u32 {
        1
    }

    fn apply(&self, writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
        let Some(Payload::EvalFinished(finished)) = &event.payload else {
            return Ok(());
        };
        let Some(report) = &finished.report else {
            return Ok(());
        };
        let order = [
            ORDER,
            &(report.finished_at.max(0) as u64).to_be_bytes(),
            report.eval_id.as_bytes(),
        ]
        .concat();
        writes.put(order, Vec::new());
        writes.put(report_key(&report.eval_id), report.encode_to_vec());
        Ok(())
    }
}
