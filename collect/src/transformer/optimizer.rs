//! The optimizer: AdamW as `torch.optim.AdamW` runs it, one kernel over the flat parameter,
//! gradient and moment buffers (the step's scalars come from [`AdamWStep`], computed on the host
//! in f64 as PyTorch computes them). Only a `train` run has the moments.

use super::Model;
use crate::error::Result;
use crate::gpu::ops::AdamWStep;

/// AdamW's settings (the CS336 assignment's: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight
/// decay 0.01).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamW {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamW {
    fn default() -> AdamW {
        AdamW {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

impl Model<'_> {
    /// One AdamW step over every parameter (one kernel over the flat buffers).
    pub fn optimizer_step(&mut self) -> Result<()> {
        self.steps += 1;
        let a = self.adamw;
        let h = AdamWStep::new(self.steps, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay);
        let (Some(g), Some(m), Some(v)) = (&self.grads, &self.adam_m, &self.adam_v) else {
            return Err(crate::Error::InvalidConfig(
                "the optimizer runs only in train mode".to_owned(),
            ));
        };
        self.rt.adamw(
            self.params.ptr(),
            g.ptr(),
            m.ptr(),
            v.ptr(),
            self.layout.total,
            h,
        )
    }
}
