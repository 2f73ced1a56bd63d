//! Learning-rate schedules, exactly as transformers computes them
//! (`get_cosine_schedule_with_warmup`, `get_cosine_with_min_lr_schedule_with_warmup`,
//! `get_constant_schedule_with_warmup`), in f64 and rounded once to f32.
//!
//! Steps are 0-based optimizer steps: the k-th update (k = 0, 1, …) uses `lr_at(k)`. This is
//! the transformers convention (`optimizer.step()` then `scheduler.step()`, with LambdaLR
//! setting lr = base·λ(0) at construction), so with warmup the first update has lr 0: AdamW's
//! moments still take in that step's gradient, but the parameters do not move.

use crate::base::error::Error;

/// The shape of the schedule after warmup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleKind {
    /// Half a cosine from lr down to lr·min_lr_ratio at `total_steps`.
    Cosine,
    /// lr after warmup.
    Constant,
}

impl std::str::FromStr for ScheduleKind {
    type Err = Error;
    /// "cosine"; "constant" (or transformers' name "constant_with_warmup").
    fn from_str(s: &str) -> Result<ScheduleKind, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cosine" => Ok(ScheduleKind::Cosine),
            "constant" | "constant_with_warmup" => Ok(ScheduleKind::Constant),
            _ => Err(Error::msg(format!("unknown learning-rate schedule {s:?} (cosine or constant)"))),
        }
    }
}

impl std::fmt::Display for ScheduleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ScheduleKind::Cosine => "cosine",
            ScheduleKind::Constant => "constant",
        })
    }
}

/// A learning-rate schedule: linear warmup from 0, then cosine decay or constant.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub kind: ScheduleKind,
    /// Peak (base) learning rate.
    pub lr: f32,
    pub warmup_steps: u32,
    /// Optimizer steps of the whole run (the cosine reaches its floor there).
    pub total_steps: u32,
    /// Cosine only: the floor as a fraction of lr (transformers' `min_lr_rate`); 0 by default.
    pub min_lr_ratio: f32,
}

impl Default for Schedule {
    fn default() -> Schedule {
        Schedule { kind: ScheduleKind::Cosine, lr: 2e-4, warmup_steps: 0, total_steps: 1, min_lr_ratio: 0.0 }
    }
}

impl Schedule {
    /// The multiplier of lr at 0-based step `step` (transformers' `lr_lambda`):
    /// `step / max(1, warmup)` while `step < warmup`; then Constant: 1; Cosine:
    /// `max(0, f·(1 − min) + min)` with `f = 0.5·(1 + cos(π·progress))` and
    /// `progress = (step − warmup) / max(1, total − warmup)`. As in transformers, progress is
    /// not clamped: past `total_steps` the cosine rises again.
    pub fn factor(&self, step: u32) -> f64 {
        let (s, w, total) = (step as i64, self.warmup_steps as i64, self.total_steps as i64);
        if s < w {
            return s as f64 / w.max(1) as f64;
        }
        match self.kind {
            ScheduleKind::Constant => 1.0,
            ScheduleKind::Cosine => {
                let progress = (s - w) as f64 / (total - w).max(1) as f64;
                let f = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
                let min = self.min_lr_ratio as f64;
                (f * (1.0 - min) + min).max(0.0)
            }
        }
    }

    /// The learning rate of the update at 0-based step `step` (see the module docs: with
    /// warmup, `lr_at(0)` is 0).
    pub fn lr_at(&self, step: u32) -> f32 {
        (self.lr as f64 * self.factor(step)) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f32, want: f64, what: &str) {
        assert!((got as f64 - want).abs() <= 1e-7 * want.abs() + 1e-12, "{what}: got {got} want {want}");
    }

    #[test]
    fn cosine_with_warmup_matches_transformers() {
        // get_cosine_schedule_with_warmup(opt, num_warmup_steps=10, num_training_steps=110), lr 1e-3.
        let s =
            Schedule { kind: ScheduleKind::Cosine, lr: 1e-3, warmup_steps: 10, total_steps: 110, min_lr_ratio: 0.0 };
        let lr = 1e-3f32 as f64;
        for (step, want) in [
            (0, 0.0),
            (1, lr * 0.1),
            (5, lr * 0.5),
            (9, lr * 0.9),
            (10, lr),
            (35, lr * 0.853_553_390_593_273_8), // progress 1/4: (1 + cos(π/4)) / 2
            (60, lr * 0.5),
            (85, lr * 0.146_446_609_406_726_24), // progress 3/4
            (109, lr * 0.000_246_719_817_134_2), // progress 99/100: (1 + cos(0.99π)) / 2
            (110, 0.0),
            (160, lr * 0.5), // past the end the cosine rises again, as in transformers
        ] {
            close(s.lr_at(step), want, &format!("cosine step {step}"));
        }
    }

    #[test]
    fn cosine_min_lr_and_no_warmup() {
        // get_cosine_with_min_lr_schedule_with_warmup(..., num_warmup_steps=0, num_training_steps=8, min_lr_rate=0.1)
        let s = Schedule { kind: ScheduleKind::Cosine, lr: 2e-4, warmup_steps: 0, total_steps: 8, min_lr_ratio: 0.1 };
        let lr = 2e-4f32 as f64;
        close(s.lr_at(0), lr, "step 0 without warmup is the full lr");
        close(s.lr_at(4), lr * (0.5 * 0.9 + 0.1), "halfway");
        close(s.lr_at(2), lr * (0.853_553_390_593_273_8 * 0.9 + 0.1), "quarter");
        close(s.lr_at(8), lr * 0.1, "floor");
        // total ≤ warmup: progress divides by max(1, total − warmup) = 1.
        let s = Schedule { kind: ScheduleKind::Cosine, lr: 1.0, warmup_steps: 4, total_steps: 3, min_lr_ratio: 0.0 };
        close(s.lr_at(3), 0.75, "warmup step 3");
        close(s.lr_at(4), 1.0, "step 4: progress 0");
        close(s.lr_at(5), 0.0, "step 5: progress 1");
    }

    #[test]
    fn constant_with_warmup_matches_transformers() {
        // get_constant_schedule_with_warmup(opt, num_warmup_steps=4), lr 5e-5.
        let s =
            Schedule { kind: ScheduleKind::Constant, lr: 5e-5, warmup_steps: 4, total_steps: 100, min_lr_ratio: 0.5 };
        let lr = 5e-5f32 as f64;
        for (step, want) in [(0, 0.0), (1, lr * 0.25), (2, lr * 0.5), (3, lr * 0.75), (4, lr), (99, lr), (1000, lr)] {
            close(s.lr_at(step), want, &format!("constant step {step}"));
        }
        let s =
            Schedule { kind: ScheduleKind::Constant, lr: 5e-5, warmup_steps: 0, total_steps: 10, min_lr_ratio: 0.0 };
        close(s.lr_at(0), lr, "constant without warmup");
    }

    #[test]
    fn kind_names() {
        for k in [ScheduleKind::Cosine, ScheduleKind::Constant] {
            assert_eq!(k.to_string().parse::<ScheduleKind>().ok(), Some(k));
        }
        assert_eq!("constant_with_warmup".parse::<ScheduleKind>().ok(), Some(ScheduleKind::Constant));
        assert_eq!(" Cosine ".parse::<ScheduleKind>().ok(), Some(ScheduleKind::Cosine));
        assert!("linear".parse::<ScheduleKind>().is_err());
    }
}
