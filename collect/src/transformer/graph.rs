//! The step as CUDA graphs ([`super::StepOptions::cuda_graph`]): the step's host code runs once
//! under stream capture, and each later step replays what it captured, so that a step costs a
//! few graph launches instead of one launch per kernel (the small models are bound by the host's
//! launches otherwise).
//!
//! The capture is cut wherever the host acts between kernels: at every range's push and pop
//! ([`nvtx::RangeDiversion`]), and where an AdamW update goes to the optimizer's stream. Each piece
//! of the main stream's work between two cuts becomes a graph, and the capture keeps, in order,
//! the pieces and what came between them ([`Op`]). A replay launches the pieces and, between them,
//! opens and closes the same ranges and launches the updates itself, as an eager step does: the
//! NVTX ranges and a trace's phases are those of an eager step, every kernel's launch call (a
//! graph launch) inside its range, and each update gets its own step's AdamW scalars.
//!
//! Limits. The first step under a given set of options runs eagerly, so that the bf16 weight
//! copy is in the state every later step starts in; the next one is captured. The activations'
//! addresses are part of the graphs: the step needs the caching allocator, which keeps the
//! blocks it freed for the graphs while nothing else allocates. The graphs are captured again
//! when the options change or the memory in use between steps does (something else holds
//! memory now), and dropped when the tokens or parameters are replaced.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaGraph, CudaStream};

use super::{Model, StepOptions};
use crate::error::{CudaContext as _, Error, Result};
use crate::nvtx::{self, range};

/// What a replay does, in order.
pub(super) enum Op {
    /// Launch a piece of the main stream's work.
    Piece(CudaGraph),
    /// Open a range.
    Push(String),
    /// Close the innermost range.
    Pop,
    /// An overlapped update of elements `start..end` on the optimizer's stream.
    Update(usize, usize),
    /// The step's last overlapped update, and the main stream's wait for the optimizer's.
    Finish(usize, usize),
    /// The update of every parameter after the backward (main stream).
    OptimizerStep,
}

/// A captured step.
pub(super) struct StepGraphs {
    ops: Vec<Op>,
    /// What it was captured under.
    options: StepOptions,
    in_use: u64,
}

/// A capture in progress: the main stream is capturing between two cuts.
pub(super) struct Capture {
    stream: Arc<CudaStream>,
    ops: Vec<Op>,
    /// The first error met where none could be returned (a range's push or pop).
    error: Option<Error>,
}

impl Capture {
    fn begin(stream: Arc<CudaStream>) -> Result<Capture> {
        // Relaxed: the caching allocator may take a new segment from the driver meanwhile.
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .during("cuStreamBeginCapture")?;
        Ok(Capture {
            stream,
            ops: Vec::new(),
            error: None,
        })
    }

    /// End the capture of the current piece (kept as a graph if it holds any work).
    fn end_piece(&mut self) -> Result<()> {
        let graph = self
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .during("cuStreamEndCapture")?;
        if let Some(g) = graph {
            let mut nodes = 0usize;
            // SAFETY: counts the nodes of the graph `g` owns; no node array is written.
            unsafe { sys::cuGraphGetNodes(g.cu_graph(), std::ptr::null_mut(), &mut nodes) }
                .result()
                .during("cuGraphGetNodes")?;
            if nodes > 0 {
                g.upload().during("cuGraphUpload")?;
                self.ops.push(Op::Piece(g));
            }
        }
        Ok(())
    }

    /// Cut the capture here and note `op` between the two pieces.
    pub(super) fn note(&mut self, op: Op) {
        let cut = self.end_piece().and_then(|()| {
            self.stream
                .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
                .during("cuStreamBeginCapture")
        });
        match cut {
            Ok(()) => self.ops.push(op),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }

    /// End the capture; the ops, or the first error of the capture or of `ran`.
    fn finish(mut self, ran: Result<()>) -> Result<Vec<Op>> {
        let ended = self.end_piece();
        ran?;
        if let Some(e) = self.error {
            return Err(e);
        }
        ended?;
        Ok(self.ops)
    }
}

/// The ranges of a captured step, noted into its capture.
struct Diversion(Rc<RefCell<Capture>>);

impl nvtx::RangeDiversion for Diversion {
    fn push(&mut self, name: &str) {
        self.0.borrow_mut().note(Op::Push(name.to_owned()));
    }

    fn pop(&mut self) {
        self.0.borrow_mut().note(Op::Pop);
    }
}

impl Model<'_> {
    /// One step through the graphs: eager under new options, captured at the next step, then
    /// replayed.
    pub(super) fn graph_step(&mut self) -> Result<()> {
        let in_use = self.rt.gpu.memory.stats().in_use;
        if self
            .graphs
            .as_ref()
            .is_some_and(|g| g.options != self.options || g.in_use != in_use)
        {
            self.graphs = None;
        }
        if self.graphs.is_none() {
            if self.graph_warm != Some(self.options) {
                self.eager_step()?;
                self.graph_warm = Some(self.options);
                return Ok(());
            }
            let ops = self.capture_step()?;
            self.graphs = Some(StepGraphs {
                ops,
                options: self.options,
                in_use,
            });
        }
        self.replay()
    }

    /// Forget the graphs (the buffers they name are replaced); the next step runs eagerly.
    pub(super) fn drop_graphs(&mut self) {
        self.graphs = None;
        self.graph_warm = None;
    }

    /// Run the step's host code with the main stream captured, launching nothing.
    fn capture_step(&mut self) -> Result<Vec<Op>> {
        if self.rt.gpu.caching.is_none() {
            return Err(Error::InvalidConfig(
                "a step in CUDA graphs needs the caching allocator (--allocator caching)"
                    .to_owned(),
            ));
        }
        let capture = Rc::new(RefCell::new(Capture::begin(self.rt.gpu.stream.clone())?));
        self.capture = Some(capture.clone());
        let old = nvtx::set_diversion(Some(Box::new(Diversion(capture.clone()))));
        let ran = self.eager_step();
        nvtx::set_diversion(old);
        self.capture = None;
        let capture = Rc::try_unwrap(capture)
            .ok()
            .expect("the diversion and the model have let go of the capture")
            .into_inner();
        capture.finish(ran)
    }

    /// Replay the captured step.
    fn replay(&mut self) -> Result<()> {
        let graphs = self.graphs.take().expect("a captured step");
        let ran = self.replay_ops(&graphs.ops);
        self.graphs = Some(graphs);
        ran
    }

    fn replay_ops(&mut self, ops: &[Op]) -> Result<()> {
        let mut open = Vec::new();
        let mut updates = None;
        for op in ops {
            match op {
                Op::Piece(g) => g.launch().during("cuGraphLaunch")?,
                Op::Push(name) => open.push(range(name)),
                Op::Pop => drop(open.pop()),
                Op::Update(start, end) => {
                    let u = match &mut updates {
                        Some(u) => u,
                        None => updates.insert(self.begin_updates()),
                    };
                    self.launch_update(u, *start, *end)?;
                }
                Op::Finish(start, end) => {
                    let u = match updates.take() {
                        Some(u) => u,
                        None => self.begin_updates(),
                    };
                    self.finish_updates(u, *start, *end)?;
                }
                Op::OptimizerStep => self.optimizer_step()?,
            }
        }
        Ok(())
    }
}
