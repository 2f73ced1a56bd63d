//! Training sessions: a run started on the loaded model, its steps, and its checkpoints in the
//! store, listed, resumed and deleted.
//!
//! A session `id` keeps `sessions/<id>/state.json` (configuration, dataset, step, losses, which
//! checkpoint slot is current and its checksum) and two checkpoint slots
//! `sessions/<id>/checkpoint-0|1`, written alternately; state.json is written last, so an
//! interrupted save leaves the previous checkpoint current.

use super::{Run, Runtime, SessionInfo, SessionSummary, StepInfo, SESSIONS};
use crate::base::bytes::{fnv1a64, matches};
use crate::base::error::{Error, Result};
use crate::data::dataset::load_jsonl;
use crate::store::AsyncChunkStore;
use crate::train::trainer::{StepReport, TrainConfig, Trainer};
use serde::{Deserialize, Serialize};

/// `sessions/<id>/state.json`
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SessionState {
    summary: SessionSummary,
    config: TrainConfig,
    dataset: String,
    /// The current checkpoint slot (0 or 1), its size and checksum.
    slot: u8,
    bytes: usize,
    fnv1a64: String,
}

fn check_session_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 100 || !id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(Error::msg(format!("session id {id:?}: use 1 to 100 letters, digits, '-', '_' or '.'")));
    }
    Ok(())
}

fn state_key(id: &str) -> String {
    format!("{SESSIONS}/{id}/state.json")
}

fn slot_key(id: &str, slot: u8) -> String {
    format!("{SESSIONS}/{id}/checkpoint-{slot}")
}

impl<S: AsyncChunkStore + wgpu::WasmNotSendSync + 'static> Runtime<S> {
    /// Start a run of `config` on `dataset` (JSONL) with the loaded model.
    pub async fn start_training(&mut self, id: &str, config: TrainConfig, dataset: &str) -> Result<SessionInfo> {
        check_session_id(id)?;
        self.run = None;
        let l = self.loaded()?;
        let examples = load_jsonl(dataset, &l.tok).map_err(|e| Error::msg(format!("dataset: {e}")))?;
        let trainer = Trainer::new(&self.gpu, &l.model, examples, config.clone(), None)?;
        self.run = Some(Run { id: id.to_string(), config, dataset: dataset.to_string(), trainer, slot: None });
        self.session_info()
    }

    fn session_info(&self) -> Result<SessionInfo> {
        let (l, r) = (self.loaded()?, self.running()?);
        Ok(SessionInfo {
            session_id: r.id.clone(),
            model: l.info.name.clone(),
            total_steps: r.trainer.state.total_steps,
            step: r.trainer.state.step,
            examples: r.trainer.num_examples(),
            fused: r.trainer.fused(),
            losses: r.trainer.state.losses.clone(),
            warnings: r.trainer.warnings.clone(),
        })
    }

    fn running(&self) -> Result<&Run> {
        self.run.as_ref().ok_or_else(|| Error::msg("no training run: start or resume one first"))
    }

    pub fn training_done(&self) -> bool {
        self.run.as_ref().is_none_or(|r| r.trainer.done())
    }

    /// One optimizer step.
    pub async fn train_step(&mut self) -> Result<StepInfo> {
        let l = self.loaded.as_ref().ok_or_else(|| Error::msg("no model is loaded: load one first"))?;
        let r = self.run.as_mut().ok_or_else(|| Error::msg("no training run: start or resume one first"))?;
        if r.trainer.done() {
            return Err(Error::msg(format!("session {}: every step is done", r.id)));
        }
        self.gpu.alloc.reset_peaks();
        self.gpu.alloc.record_timeline(true);
        if self.profile {
            self.gpu.profile_start();
        }
        let rep = r.trainer.step(&self.gpu, &l.model).await;
        let profile = if self.profile { self.gpu.profile_take().await? } else { None };
        let rep: StepReport = rep?;
        let memory = self.memory();
        self.gpu.alloc.record_timeline(false);
        Ok(StepInfo {
            step: rep.step,
            total_steps: rep.total_steps,
            loss: rep.loss,
            lr: rep.lr,
            tokens: rep.tokens,
            ms: rep.ms,
            tokens_per_sec: rep.tokens as f64 / (rep.ms / 1000.0).max(1e-9),
            memory,
            skipped: rep.skipped,
            profile,
        })
    }

    /// Save the run: its checkpoint into the slot not current, then state.json.
    pub async fn save_session(&mut self) -> Result<()> {
        let l = self.loaded()?;
        let r = self.running()?;
        let bytes = r.trainer.checkpoint(&self.gpu).await?;
        let slot = match r.slot {
            Some(s) => 1 - s,
            None => match self.read_state(&r.id).await? {
                Some(st) => 1 - st.slot,
                None => 0,
            },
        };
        self.store.put(&slot_key(&r.id, slot), &bytes).await?;
        let st = SessionState {
            summary: SessionSummary {
                id: r.id.clone(),
                model: l.info.name.clone(),
                weights: l.info.weights.clone(),
                streamed: l.info.streamed,
                step: r.trainer.state.step,
                total_steps: r.trainer.state.total_steps,
                losses: r.trainer.state.losses.clone(),
                updated: crate::platform::wall_ms(),
            },
            config: r.config.clone(),
            dataset: r.dataset.clone(),
            slot,
            bytes: bytes.len(),
            fnv1a64: fnv1a64(&bytes),
        };
        let json = serde_json::to_vec(&st).map_err(|e| Error::msg(format!("session {}: {e}", r.id)))?;
        self.store.put(&state_key(&r.id), &json).await?;
        if let Some(r) = self.run.as_mut() {
            r.slot = Some(slot);
        }
        Ok(())
    }

    async fn read_state(&self, id: &str) -> Result<Option<SessionState>> {
        let Some(bytes) = self.store.get_opt(&state_key(id)).await? else { return Ok(None) };
        let st = serde_json::from_slice(&bytes)
            .map_err(|e| Error::msg(format!("session {id}: {} is damaged: {e}", state_key(id))))?;
        Ok(Some(st))
    }

    /// Every stored session.
    pub async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        let mut out = Vec::new();
        for key in self.store.keys(&format!("{SESSIONS}/")).await? {
            if let Some(id) = key.strip_prefix(&format!("{SESSIONS}/")).and_then(|k| k.strip_suffix("/state.json")) {
                if let Some(st) = self.read_state(id).await? {
                    out.push(st.summary);
                }
            }
        }
        Ok(out)
    }

    /// Continue a stored session from its last checkpoint (loading its model if another one,
    /// or none, is loaded).
    pub async fn resume_session(&mut self, id: &str) -> Result<SessionInfo> {
        check_session_id(id)?;
        let st = self.read_state(id).await?.ok_or_else(|| Error::msg(format!("session {id}: not found")))?;
        let loaded_ok = self
            .loaded
            .as_ref()
            .is_some_and(|l| l.info.name == st.summary.model && l.info.weights == st.summary.weights);
        if !loaded_ok {
            self.load_model(&st.summary.model, &st.summary.weights, st.summary.streamed).await?;
        }
        let key = slot_key(id, st.slot);
        let bytes = self.store.get(&key).await?;
        if !matches(&bytes, st.bytes, &st.fnv1a64) {
            return Err(Error::msg(format!("session {id}: {key} is damaged (size or checksum differs)")));
        }
        self.run = None;
        let l = self.loaded()?;
        let examples = load_jsonl(&st.dataset, &l.tok).map_err(|e| Error::msg(format!("dataset: {e}")))?;
        let trainer = Trainer::resume(&self.gpu, &l.model, examples, st.config.clone(), &bytes, &key)?;
        self.run =
            Some(Run { id: id.to_string(), config: st.config, dataset: st.dataset, trainer, slot: Some(st.slot) });
        self.session_info()
    }

    pub async fn delete_session(&mut self, id: &str) -> Result<()> {
        check_session_id(id)?;
        if self.run.as_ref().is_some_and(|r| r.id == id) {
            self.run = None;
        }
        self.store.delete(&state_key(id)).await?;
        for key in self.store.keys(&format!("{SESSIONS}/{id}/")).await? {
            self.store.delete(&key).await?;
        }
        Ok(())
    }
}
