//! The Evals service's boundary: a run request checked and typed
//! (`TryFrom`) into the engine's [`RunSpec`].

use std::path::PathBuf;

use tinycode_shared::proto::RunEvalRequest;
use tonic::Status;

use super::super::validate;
use crate::eval::RunSpec;

/// `Evals.Run`, checked. (A newtype: both types are other crates'.)
pub struct Spec(pub RunSpec);

impl TryFrom<RunEvalRequest> for Spec {
    type Error = Status;

    fn try_from(req: RunEvalRequest) -> Result<Self, Status> {
        for (field, value) in [
            ("labels", &req.labels),
            ("train", &req.train),
            ("model", &req.model),
            ("target", &req.target),
        ] {
            validate::max_len(field, value, 4096)?;
        }
        if req.runs > 20 {
            return Err(Status::invalid_argument(format!(
                "`runs` must be at most 20, got {}",
                req.runs
            )));
        }
        if req.concurrency > 64 {
            return Err(Status::invalid_argument(format!(
                "`concurrency` must be at most 64, got {}",
                req.concurrency
            )));
        }
        for (field, price) in [
            ("price_input_per_mtok", req.price_input_per_mtok),
            ("price_output_per_mtok", req.price_output_per_mtok),
        ] {
            if !(0.0..=1e6).contains(&price) {
                return Err(Status::invalid_argument(format!(
                    "`{field}` must be a price from 0 to 1000000 per million tokens, got {price}"
                )));
            }
        }
        if !(0.0..1.0).contains(&req.target_accuracy) {
            return Err(Status::invalid_argument(format!(
                "`target_accuracy` must be from 0 (the default, 0.98) to below 1, got {}",
                req.target_accuracy
            )));
        }
        if req.with_history && !req.train.trim().is_empty() {
            return Err(Status::invalid_argument(
                "`with_history` measures the agent with the desk's learned model; `train` measures a fresh learner: use one",
            ));
        }
        let path = |p: &str| (!p.trim().is_empty()).then(|| PathBuf::from(p.trim()));
        Ok(Spec(RunSpec {
            labels: path(&req.labels),
            from_history: req.from_history,
            model: req.model,
            runs: req.runs.max(1),
            concurrency: if req.concurrency == 0 {
                4
            } else {
                req.concurrency as usize
            },
            train: path(&req.train),
            target: req.target,
            price_input: req.price_input_per_mtok,
            price_output: req.price_output_per_mtok,
            target_accuracy: req.target_accuracy,
            with_history: req.with_history,
        }))
    }
}
