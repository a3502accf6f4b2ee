//! The optimizer: AdamW as `torch.optim.AdamW` runs it (the step's scalars come from
//! [`AdamWStep`], computed on the host in f64 as PyTorch computes them). Only a `train` run has
//! the moments.
//!
//! Two schedules ([`OptimizerSchedule`]):
//! - **overlapped** (the default): the backward finishes the gradients of the LM head and final
//!   norm first, then of each block from the last, then of the embedding. As soon as a group's
//!   gradients are final, its update is launched on the optimizer's stream
//!   ([`crate::gpu::device::Gpu::side`], low priority), so that it runs beside the backward
//!   kernels still to come: an event recorded on the main stream after the group's last gradient
//!   orders the update after everything that reads the group's weights or writes its gradients,
//!   and at the end of the step the main stream waits for the optimizer's stream, so that the
//!   next forward reads updated weights and the next backward overwrites gradients only once
//!   they have been used. The same pass writes the bf16 weight copy of a bf16 run, so the
//!   forward casts nothing. On the host, the `backward` range is closed around each launch and
//!   an `optimizer` range opened for it; the last `optimizer` range holds the embedding's update
//!   and the wait. The backward's GEMMs hold every SM, so in a bf16 run, whose updates move as
//!   many bytes as those GEMMs take time, cuBLAS plans them for all but [`BF16_OPTIMIZER_SMS`]
//!   SMs once the first update is launched, and the updates run on the rest
//!   ([`StepOptions::optimizer_sms`]). Under CUDA graphs ([`super::graph`]) the updates are still
//!   launched by the host, between the graphs, with each step's own scalars.
//! - **after the backward**: one update over the flat buffers on the main stream once the
//!   backward is done, and the bf16 copy cast at the next forward; the reference the overlapped
//!   schedule is checked against.

use cudarc::driver::CudaEvent;

use super::config::Precision;
use super::graph::Op;
use super::Model;
use crate::error::{CudaContext as _, Result};
use crate::gpu::ops::AdamWStep;
use crate::nvtx::{self, range};

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

/// When a `train` step runs AdamW.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OptimizerSchedule {
    /// Each group's update on the optimizer's stream as soon as its gradients are final, beside
    /// the rest of the backward, writing the bf16 weight copy too.
    #[default]
    Overlapped,
    /// One update over every parameter after the backward, on the main stream; the bf16 copy is
    /// cast at the next forward.
    AfterBackward,
}

impl OptimizerSchedule {
    pub fn as_str(self) -> &'static str {
        match self {
            OptimizerSchedule::Overlapped => "overlapped",
            OptimizerSchedule::AfterBackward => "after-backward",
        }
    }
}

impl std::fmt::Display for OptimizerSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for OptimizerSchedule {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<OptimizerSchedule> {
        match s {
            "overlapped" => Ok(OptimizerSchedule::Overlapped),
            "after-backward" => Ok(OptimizerSchedule::AfterBackward),
            other => Err(crate::Error::InvalidConfig(format!(
                "unknown optimizer schedule `{other}` (overlapped or after-backward)"
            ))),
        }
    }
}

/// How a model runs its steps; nothing here changes what a step computes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepOptions {
    pub optimizer: OptimizerSchedule,
    /// With the overlapped schedule: SMs left to the optimizer while its updates run beside the
    /// backward (cuBLAS is told to plan the backward's GEMMs for the others). 0 lets the GEMMs
    /// plan for every SM, the updates then filling what the GEMMs leave idle. `None`: the run's
    /// default ([`default_optimizer_sms`]).
    pub optimizer_sms: Option<u32>,
    /// Replay the step from CUDA graphs (the `graph` module); needs the caching allocator.
    pub cuda_graph: bool,
}

/// The SMs left to the overlapped optimizer unless asked otherwise: [`BF16_OPTIMIZER_SMS`] in a
/// bf16 run, none in an fp32 run, whose GEMMs take so long that the updates hide beside them and
/// planning them for fewer SMs costs more than the updates gain.
pub fn default_optimizer_sms(precision: Precision) -> u32 {
    match precision {
        Precision::Bf16 => BF16_OPTIMIZER_SMS,
        Precision::Fp32 => 0,
    }
}

/// In a bf16 run the updates move as many bytes as the backward's GEMMs take time to hide them
/// in, but the GEMMs hold every SM; leaving the updates 16 (of an H200's 132) was the best trade
/// measured on the H200, batch 4, ctx 256 (of 0, 8, 12, 16, 20, 24): the 2.7B step 64.3 ms with
/// none, 63.4 with 8, 61.2 with 16, 61.5 with 24; large 23.4, 22.3, 22.4, 22.6.
pub const BF16_OPTIMIZER_SMS: u32 = 16;

/// The events that order the optimizer's stream against the main stream. One of each is
/// enough: a wait takes the event's state at the time it is queued, so an event may be
/// recorded again right after.
pub(super) struct StepEvents {
    /// Recorded on the main stream when a group's gradients are final.
    ready: CudaEvent,
    /// Recorded on the optimizer's stream after the step's last update.
    done: CudaEvent,
}

impl StepEvents {
    pub(super) fn new(rt: &crate::gpu::ops::Runtime) -> Result<StepEvents> {
        Ok(StepEvents {
            ready: rt.gpu.ctx.new_event(None).during("cuEventCreate")?,
            done: rt.gpu.ctx.new_event(None).during("cuEventCreate")?,
        })
    }
}

/// The updates of one overlapped step, handed through the backward.
pub(super) struct Updates {
    /// The step's AdamW scalars; none while the step is captured (a replay brings its own).
    h: Option<AdamWStep>,
    /// The open `backward` range: closed around each launch.
    pub(super) backward: Option<nvtx::Range>,
    /// Whether cuBLAS has been told to leave SMs to the optimizer.
    narrowed: bool,
}

impl Model<'_> {
    /// The scalars of the next AdamW step (counting it).
    fn next_adamw_step(&mut self) -> AdamWStep {
        self.steps += 1;
        let a = self.adamw;
        AdamWStep::new(self.steps, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay)
    }

    /// Whether the step's updates run beside the backward (and write the bf16 copy).
    pub(super) fn overlapped(&self) -> bool {
        self.run.mode == super::config::Mode::Train
            && self.options.optimizer == OptimizerSchedule::Overlapped
    }

    /// One AdamW step over every parameter (one kernel over the flat buffers, on the main
    /// stream, after the backward): the schedule the overlapped one is checked against. The bf16
    /// copy is cast again at the next forward.
    pub fn optimizer_step(&mut self) -> Result<()> {
        if self.adam_m.is_none() {
            return Err(crate::Error::InvalidConfig(
                "the optimizer runs only in train mode".to_owned(),
            ));
        }
        if let Some(c) = &self.capture {
            c.borrow_mut().note(Op::OptimizerStep);
            self.bf16_current = false;
            return Ok(());
        }
        let h = self.next_adamw_step();
        let (Some(g), Some(m), Some(v)) = (&self.grads, &self.adam_m, &self.adam_v) else {
            unreachable!("train mode allocates gradients and both moments");
        };
        self.rt.adamw(
            self.params.ptr(),
            g.ptr(),
            m.ptr(),
            v.ptr(),
            self.layout.total,
            h,
        )?;
        self.bf16_current = false;
        Ok(())
    }

    /// Start an overlapped step's updates (inside the `backward` range the caller opens).
    pub(super) fn begin_updates(&mut self) -> Updates {
        Updates {
            h: self.capture.is_none().then(|| self.next_adamw_step()),
            backward: None,
            narrowed: false,
        }
    }

    /// Launch the update of elements `start..end` on the optimizer's stream once the main
    /// stream's work so far is done, with the host's `backward` range closed and an
    /// `optimizer` range around it. Called between blocks, outside any module frame.
    pub(super) fn interleave_update(
        &self,
        u: &mut Updates,
        start: usize,
        end: usize,
    ) -> Result<()> {
        u.backward = None;
        {
            let _r = range(nvtx::OPTIMIZER);
            self.launch_update(u, start, end)?;
        }
        let left = self
            .options
            .optimizer_sms
            .unwrap_or_else(|| default_optimizer_sms(self.run.precision));
        if !u.narrowed && left > 0 {
            let sms = self.rt.gpu.info.multiprocessors.max(1) as u32;
            // The GEMMs keep at least three quarters of a smaller device.
            let target = sms.saturating_sub(left.min(sms / 4)).max(1);
            self.rt.blas.set_sm_count_target(target)?;
            u.narrowed = true;
        }
        u.backward = Some(range(nvtx::BACKWARD));
        Ok(())
    }

    /// The last update (the embedding's, elements `start..end`) and the main stream's wait for
    /// the optimizer's stream; the caller holds the step's last `optimizer` range.
    pub(super) fn finish_updates(&mut self, u: Updates, start: usize, end: usize) -> Result<()> {
        if let Some(c) = &self.capture {
            c.borrow_mut().note(Op::Finish(start, end));
        } else {
            self.launch_update(&u, start, end)?;
            let ev = &self.events()?.done;
            ev.record(&self.rt.gpu.side).during("cuEventRecord")?;
            self.rt.gpu.stream.wait(ev).during("cuStreamWaitEvent")?;
        }
        if u.narrowed {
            self.rt.blas.set_sm_count_target(0)?;
        }
        self.bf16_current = self.params_bf16.is_some();
        Ok(())
    }

    fn events(&self) -> Result<&StepEvents> {
        self.events.as_ref().ok_or_else(|| {
            crate::Error::InvalidConfig("the optimizer runs only in train mode".to_owned())
        })
    }

    /// The update of elements `start..end` on the optimizer's stream, after the main stream's
    /// work so far (noted instead while the step is captured).
    pub(super) fn launch_update(&self, u: &Updates, start: usize, end: usize) -> Result<()> {
        if end <= start {
            return Ok(());
        }
        if let Some(c) = &self.capture {
            c.borrow_mut().note(Op::Update(start, end));
            return Ok(());
        }
        let h = u.h.expect("an eager step's updates have their scalars");
        let (Some(g), Some(m), Some(v)) = (&self.grads, &self.adam_m, &self.adam_v) else {
            return Err(crate::Error::InvalidConfig(
                "the optimizer runs only in train mode".to_owned(),
            ));
        };
        let ready = &self.events()?.ready;
        ready.record(&self.rt.gpu.stream).during("cuEventRecord")?;
        self.rt.gpu.side.wait(ready).during("cuStreamWaitEvent")?;
        let bf16 = self.params_bf16.as_ref().map_or(0, |b| b.at(start));
        self.rt.adamw_range(
            self.params.at(start),
            g.at(start),
            m.at(start),
            v.at(start),
            bf16,
            end - start,
            h,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_print() {
        for s in [
            OptimizerSchedule::Overlapped,
            OptimizerSchedule::AfterBackward,
        ] {
            assert_eq!(s.as_str().parse::<OptimizerSchedule>().unwrap(), s);
        }
        assert!("later".parse::<OptimizerSchedule>().is_err());
        assert_eq!(
            StepOptions::default().optimizer,
            OptimizerSchedule::Overlapped
        );
    }
}
