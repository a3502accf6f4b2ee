//! `collect bench`: the benchmark harness. For every point of the grid (sizes × contexts × modes
//! × precisions) it builds the model, runs the warm-up steps inside an NVTX `warmup` range and
//! the timed steps inside `measurement`, each timed step inside `step_N`, synchronising after
//! every step; each step is timed by CUDA events around it and by the host clock from its launch
//! to the end of the synchronize (as a Python `perf_counter` around `step(); synchronize()`
//! does). A configuration that cannot run becomes one row and the sweep goes on: refused before
//! it starts (a tensor over the 32-bit limits, a shape its attention does not run), or out of
//! device memory (everything it held is freed); where the other attention implementation or
//! activation checkpointing would run it, the row says `--attention flash` (or `naive`) or
//! `--checkpoint on`. `--checkpoint auto` turns checkpointing on for exactly the configurations
//! whose plan without it does not fit the device's memory.
//!
//! With the caching allocator ([`AllocatorKind::Caching`]) the peak is the allocator's own
//! `max_memory_allocated` over the last timed step, reset just before it as PyTorch's recipe
//! does (warm up, `reset_peak_memory_stats()`, step). [`Recording`] asks for more: a memory
//! snapshot of that last step (history recorded with our own frames: the phase ranges and the
//! model's module paths; the step waits for the device at the end of each phase so that the
//! snapshot's phase marks follow the GPU) and an nsys-schema SQLite trace of the whole
//! configuration (CUPTI activity records and the NVTX ranges, from the model's build to the last
//! step) with its run metadata. Both are written atomically once the configuration has run; with
//! more than one configuration each file name gets the configuration's label ([`output_path`]).
//!
//! Statistics are pure functions (`analyze::formats::step_times`); the table, the JSON results file and a trace's run
//! metadata are built from the rows in [`report`]. Beside the harness: [`numerics`], which dumps
//! one step's tensors for a PyTorch check, through [`safetensors`]; and [`attention`], the
//! benchmark of the attention core alone (`collect attention`).

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use analyze::formats::nsys_sqlite;
use analyze::render::cells::format_bytes;
use cudarc::driver::sys::CUevent_flags;

pub mod attention;
pub mod numerics;
pub mod report;
pub mod safetensors;

use crate::error::{CudaContext as _, Error, Result};
use crate::gpu::caching::SharedCaching;
use crate::gpu::device_memory::AllocatorKind;
use crate::gpu::ops::Runtime;
use crate::memory::frames::{self as memory_frames, PhaseFrames};
use crate::memory::history::MemoryContext;
use crate::memory::snapshot as memory_snapshot;
use crate::nvtx::{self, range, RangeListener};
use crate::trace::session::TraceSession;
use crate::transformer::config::{Attention, Checkpoint, Mode, ModelConfig, Precision, RunConfig};
use crate::transformer::{plan, Model, StepOptions};
use analyze::formats::step_times::StepTimes as Stats;
use report::run_metadata;

/// History entries kept while recording (PyTorch's `max_entries` default is larger than any
/// one step of these models needs: the large model's train step at ctx 256 makes 2,829).
pub const MAX_HISTORY_ENTRIES: usize = 1_000_000;

/// What to record while each configuration runs, besides its step times.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recording {
    /// Write an nsys-schema SQLite trace (CUPTI and NVTX) of the configuration here.
    pub trace: Option<PathBuf>,
    /// Record the memory history of the last timed step and write the snapshot (PyTorch's
    /// pickle; gzip when the name ends in `.gz`) here. Needs the caching allocator.
    pub memory_snapshot: Option<PathBuf>,
    /// Run every matrix product inside an operator range labelled with its shapes, as PyTorch's
    /// `emit_nvtx(record_shapes=True)` does ([`crate::gpu::blas`]), so that a trace's GEMMs are
    /// tied to operators whose FLOPs follow from their shapes. Cuts CUDA graphs at every product.
    pub operator_ranges: bool,
}

impl Recording {
    pub fn any(&self) -> bool {
        self.trace.is_some() || self.memory_snapshot.is_some()
    }

    /// The files for `run`: as given for a single configuration, labelled for one of many.
    pub fn for_run(&self, run: &RunConfig, many: bool) -> Recording {
        Recording {
            trace: self.trace.as_deref().map(|p| output_path(p, run, many)),
            memory_snapshot: self
                .memory_snapshot
                .as_deref()
                .map(|p| output_path(p, run, many)),
            operator_ranges: self.operator_ranges,
        }
    }
}

/// `trace.sqlite` for a single configuration; `trace.small-ctx256-train-fp32.sqlite` (the label
/// before the first `.` of the file name, `-flash` at its end with FlashAttention) when a sweep
/// writes one file per configuration.
pub fn output_path(base: &Path, run: &RunConfig, many: bool) -> PathBuf {
    if !many {
        return base.to_owned();
    }
    let label = format!(
        "{}-ctx{}-{}-{}{}{}",
        run.model.label(),
        run.ctx,
        run.mode,
        run.precision,
        if run.tf32 { "-tf32" } else { "" },
        if run.attention == Attention::Flash {
            "-flash"
        } else {
            ""
        }
    );
    let name = base
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let new = match name.find('.') {
        Some(i) if i > 0 => format!("{}.{label}{}", &name[..i], &name[i..]),
        _ => format!("{name}.{label}"),
    };
    base.with_file_name(new)
}

/// What `collect bench` was asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchOptions {
    pub models: Vec<ModelConfig>,
    pub ctxs: Vec<usize>,
    pub modes: Vec<Mode>,
    pub precisions: Vec<Precision>,
    pub attentions: Vec<Attention>,
    pub batch: usize,
    pub warmup: usize,
    pub steps: usize,
    pub tf32: bool,
    /// Activation checkpointing, decided per configuration by [`plan::checkpoint_on`].
    pub checkpoint: Checkpoint,
    pub seed: u64,
    /// Where device memory comes from (the caching allocator whenever a snapshot is recorded).
    pub allocator: AllocatorKind,
    pub recording: Recording,
    /// How each step runs (the optimizer's schedule).
    pub step: StepOptions,
}

impl BenchOptions {
    /// Every configuration of the grid, in the order they run (size, ctx, mode, precision,
    /// attention), with checkpointing as `checkpoint` asks on a device of `capacity` bytes.
    pub fn grid(&self, capacity: u64) -> Vec<RunConfig> {
        let mut out = Vec::new();
        for m in &self.models {
            for &ctx in &self.ctxs {
                for &mode in &self.modes {
                    for &precision in &self.precisions {
                        for &attention in &self.attentions {
                            let run = RunConfig {
                                model: m.clone(),
                                ctx,
                                batch: self.batch,
                                mode,
                                precision,
                                tf32: self.tf32,
                                attention,
                                checkpoint: false,
                            };
                            out.push(RunConfig {
                                checkpoint: plan::checkpoint_on(self.checkpoint, &run, capacity),
                                ..run
                            });
                        }
                    }
                }
            }
        }
        out
    }
}

/// Memory of one configuration, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// Ours, after the model is built (weights, gradients, optimizer state...).
    pub after_build: u64,
    /// Ours, after the last step.
    pub in_use: u64,
    /// Ours, the most at once during the configuration.
    pub peak: u64,
    /// The whole device in use (total minus free) after the last step, cached pool included.
    pub device_used: u64,
}

/// The caching allocator's counters, peaks over the last timed step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocatorUse {
    /// `max_memory_allocated()`: block bytes, as PyTorch counts them.
    pub max_allocated: u64,
    /// `max_memory_reserved()`: segment bytes.
    pub max_reserved: u64,
    /// `memory_allocated()` after the last step.
    pub allocated: u64,
    /// `memory_reserved()` after the last step.
    pub reserved: u64,
    /// Segments allocated from the driver during the whole configuration.
    pub device_allocs: u64,
    /// History entries of the recorded step (0 when nothing was recorded).
    pub history_entries: usize,
}

/// A configuration that ran.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// Host clock per timed step, launch to end of synchronize.
    pub host_ms: Vec<f64>,
    /// CUDA events around each timed step.
    pub event_ms: Vec<f64>,
    pub host: Stats,
    pub event: Stats,
    /// Loss after the last step (modes with a backward).
    pub loss: Option<f32>,
    /// With the caching allocator, `memory.peak` is its `max_allocated`.
    pub memory: MemoryUse,
    pub allocator: Option<AllocatorUse>,
    /// Files written for this configuration (trace, snapshot).
    pub written: Vec<PathBuf>,
}

// One per configuration of a sweep: boxing the larger variant would save nothing that matters.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Ran(Measured),
    /// Ran out of device memory; `hint` names the flag that would fit it.
    OutOfMemory {
        what: String,
        hint: Option<&'static str>,
    },
    /// Not started: see [`RunConfig::refusal`].
    Refused {
        reason: String,
        hint: Option<&'static str>,
    },
}

impl Outcome {
    /// `ok`, `oom` or `refused`, as the results file writes it.
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Ran(_) => "ok",
            Outcome::OutOfMemory { .. } => "oom",
            Outcome::Refused { .. } => "refused",
        }
    }

    /// Why it did not run and what to try, in one line; `None` for a row that ran.
    pub fn reason(&self) -> Option<String> {
        let (what, hint) = match self {
            Outcome::Ran(_) => return None,
            Outcome::OutOfMemory { what, hint } => (format!("out of device memory ({what})"), hint),
            Outcome::Refused { reason, hint } => (reason.clone(), hint),
        };
        Some(match hint {
            Some(h) => format!("{what}; try {h}"),
            None => what,
        })
    }
}

/// What to try when `run` ran out of `total_memory` bytes of device memory: FlashAttention, when
/// the run was naive and the plan says the flash run fits; else activation checkpointing, when
/// it was off and the plan with it fits.
pub fn oom_hint(run: &RunConfig, total_memory: u64) -> Option<&'static str> {
    let flash = RunConfig {
        attention: Attention::Flash,
        ..run.clone()
    };
    let checkpointed = RunConfig {
        checkpoint: true,
        ..run.clone()
    };
    if run.attention == Attention::Naive
        && flash.refusal().is_none()
        && plan::fits(&flash, total_memory)
    {
        Some("--attention flash")
    } else if !run.checkpoint && run.mode.backward() && plan::fits(&checkpointed, total_memory) {
        Some("--checkpoint on")
    } else {
        None
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub run: RunConfig,
    pub outcome: Outcome,
}

/// Run one configuration: build, warm up, time `steps` steps.
pub fn run_one(
    rt: &Runtime,
    run: &RunConfig,
    warmup: usize,
    steps: usize,
    seed: u64,
) -> Result<Measured> {
    run_one_with(
        rt,
        run,
        warmup,
        steps,
        seed,
        &Recording::default(),
        StepOptions::default(),
    )
}

/// Puts the thread's range listener and memory frames back, and switches history recording
/// off, however the configuration ends.
struct RecordingGuard {
    old_listener: Option<Option<Box<dyn RangeListener>>>,
    old_frames: Option<Option<MemoryContext>>,
    caching: Option<SharedCaching>,
}

impl Drop for RecordingGuard {
    fn drop(&mut self) {
        if let Some(old) = self.old_listener.take() {
            nvtx::set_listener(old);
        }
        if let Some(old) = self.old_frames.take() {
            memory_frames::install(old);
        }
        if let Some(c) = &self.caching {
            if let Ok(mut a) = c.try_borrow_mut() {
                a.stop_recording();
            }
        }
    }
}

/// [`run_one`], recording what `rec` asks for (file names as given: see [`Recording::for_run`]),
/// steps run as `step` says.
pub fn run_one_with(
    rt: &Runtime,
    run: &RunConfig,
    warmup: usize,
    steps: usize,
    seed: u64,
    rec: &Recording,
    step: StepOptions,
) -> Result<Measured> {
    if steps == 0 {
        return Err(crate::Error::InvalidConfig(
            "--steps must be at least 1".to_owned(),
        ));
    }
    let mem = &rt.gpu.memory;
    let caching = rt.gpu.caching.clone();
    if rec.memory_snapshot.is_some() && caching.is_none() {
        return Err(crate::Error::InvalidConfig(
            "a memory snapshot needs the caching allocator".to_owned(),
        ));
    }
    if rec.memory_snapshot.is_some() && step.cuda_graph {
        return Err(crate::Error::InvalidConfig(
            "a memory snapshot records allocations, which a step replayed from CUDA graphs makes \
             none of"
                .to_owned(),
        ));
    }
    rt.blas.set_operator_ranges(rec.operator_ranges);
    let mut guard = RecordingGuard {
        old_listener: None,
        old_frames: None,
        caching: caching.clone(),
    };
    let mut listeners: Vec<Box<dyn RangeListener>> = Vec::new();
    let trace = match &rec.trace {
        Some(_) => Some(TraceSession::start()?),
        None => None,
    };
    // The trace's listener goes first: a range ends there, as in NVTX, before the phase frames
    // below wait for the device.
    if let Some(t) = &trace {
        listeners.push(t.range_listener());
    }
    // Set during the recorded step: its phases end when their GPU work has (see PhaseFrames).
    let sync_phases = Rc::new(std::cell::Cell::new(false));
    if let (Some(_), Some(c)) = (&rec.memory_snapshot, &caching) {
        let ctx = c.borrow().context().clone();
        guard.old_frames = Some(memory_frames::install(Some(ctx.clone())));
        let (stream, side) = (rt.gpu.stream.clone(), rt.gpu.side.clone());
        let sync = Box::new(move || {
            // Both streams: an optimizer range's work runs on the optimizer's. A failure here is
            // the next call's error too; the recording goes on regardless.
            let _ = side.synchronize();
            let _ = stream.synchronize();
        });
        listeners.push(Box::new(
            PhaseFrames::new(ctx).sync_at_phase_end(sync_phases.clone(), sync),
        ));
    }
    if !listeners.is_empty() {
        let fanout = Box::new(nvtx::Fanout(listeners));
        guard.old_listener = Some(nvtx::set_listener(Some(fanout)));
    }

    mem.reset_peak();
    let mut model = Model::new(rt, run, seed)?;
    model.options = step;
    rt.gpu.synchronize()?;
    let after_build = mem.stats().in_use;
    if warmup > 0 {
        let _r = range(nvtx::WARMUP);
        for _ in 0..warmup {
            model.step()?;
            rt.gpu.synchronize()?;
        }
    }
    let start = rt
        .gpu
        .ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .during("cuEventCreate")?;
    let end = rt
        .gpu
        .ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .during("cuEventCreate")?;
    let mut host_ms = Vec::with_capacity(steps);
    let mut event_ms = Vec::with_capacity(steps);
    let mut snapshot = None;
    {
        let _r = range(nvtx::MEASUREMENT);
        for i in 0..steps {
            let last = i + 1 == steps;
            // A step replayed from graphs allocates nothing: the peak stays the whole run's,
            // its capture included.
            if let (true, false, Some(c)) = (last, step.cuda_graph, &caching) {
                // PyTorch's recipe: after warming up, reset the peak, then record one step.
                let mut a = c.borrow_mut();
                a.reset_peak_stats();
                if rec.memory_snapshot.is_some() {
                    a.start_recording(MAX_HISTORY_ENTRIES);
                    sync_phases.set(true);
                }
            }
            {
                let _s = range(&nvtx::step_name(i));
                let t0 = Instant::now();
                start.record(&rt.gpu.stream).during("cuEventRecord")?;
                model.step()?;
                end.record(&rt.gpu.stream).during("cuEventRecord")?;
                rt.gpu.synchronize()?;
                host_ms.push(t0.elapsed().as_secs_f64() * 1e3);
                event_ms.push(start.elapsed_ms(&end).during("cuEventElapsedTime")? as f64);
            }
            if let (true, Some(_), Some(c)) = (last, &rec.memory_snapshot, &caching) {
                sync_phases.set(false);
                let mut a = c.borrow_mut();
                snapshot = Some(a.snapshot());
                a.stop_recording();
            }
        }
    }
    let loss = if run.mode.backward() && (steps + warmup) > 0 {
        Some(model.loss()?)
    } else {
        None
    };
    let stats = mem.stats();
    let device_used = rt.gpu.device_memory_used()?;
    let (Some(host), Some(event)) = (Stats::of(&host_ms), Stats::of(&event_ms)) else {
        return Err(crate::Error::InvalidConfig(
            "--steps must be at least 1".to_owned(),
        ));
    };
    let allocator = caching.as_ref().map(|c| {
        let a = c.borrow();
        let s = a.stats();
        AllocatorUse {
            max_allocated: s.allocated_bytes.peak,
            max_reserved: s.reserved_bytes.peak,
            allocated: s.allocated_bytes.current,
            reserved: s.reserved_bytes.current,
            device_allocs: s.device_allocs,
            history_entries: snapshot.as_ref().map_or(0, |s| s.trace.len()),
        }
    });
    let mut measured = Measured {
        host_ms,
        event_ms,
        host,
        event,
        loss,
        memory: MemoryUse {
            after_build,
            in_use: stats.in_use,
            peak: allocator.map_or(stats.peak, |a| a.max_allocated),
            device_used,
        },
        allocator,
        written: Vec::new(),
    };
    if let (Some(t), Some(path)) = (trace, &rec.trace) {
        let kind = if caching.is_some() {
            AllocatorKind::Caching
        } else {
            AllocatorKind::Pool
        };
        let meta = run_metadata(run, warmup, &measured, &rt.gpu.info, kind);
        let records = t.finish(&rt.gpu, meta)?;
        nsys_sqlite::write::to_file(path, &records).map_err(Error::TraceDb)?;
        measured.written.push(path.clone());
    }
    if let (Some(snap), Some(path)) = (snapshot, &rec.memory_snapshot) {
        memory_snapshot::write(&snap, path)?;
        measured.written.push(path.clone());
    }
    drop(model);
    drop(guard);
    Ok(measured)
}

/// Run the whole grid; `progress` gets one line per configuration as it starts and ends. A
/// configuration that cannot run is a row of its own ([`Outcome::Refused`],
/// [`Outcome::OutOfMemory`]); any other error ends the sweep.
pub fn run_grid(
    rt: &Runtime,
    opts: &BenchOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Row>> {
    let grid = opts.grid(rt.gpu.info.total_memory);
    for run in &grid {
        run.validate_dimensions()?;
    }
    let mut rows = Vec::with_capacity(grid.len());
    for (i, run) in grid.iter().enumerate() {
        let name = describe(run);
        if let Some(r) = run.refusal() {
            progress(&format!("[{}/{}] {name}: refused: {r}", i + 1, grid.len()));
            rows.push(Row {
                run: run.clone(),
                outcome: Outcome::Refused {
                    hint: r.hint(),
                    reason: r.reason,
                },
            });
            continue;
        }
        progress(&format!(
            "[{}/{}] {name}: building, {} warm-up and {} timed steps",
            i + 1,
            grid.len(),
            opts.warmup,
            opts.steps
        ));
        let rec = opts.recording.for_run(run, grid.len() > 1);
        let result = run_one_with(rt, run, opts.warmup, opts.steps, opts.seed, &rec, opts.step);
        // Whatever the configuration held is dropped by now; give the pool's cache back so the
        // next configuration starts from an empty device.
        rt.gpu.memory.release_cached()?;
        let outcome = match result {
            Ok(m) => {
                progress(&format!(
                    "[{}/{}] {name}: mean {:.2} ms, median {:.2} ms, peak {}",
                    i + 1,
                    grid.len(),
                    m.host.mean,
                    m.host.median,
                    format_bytes(m.memory.peak)
                ));
                for f in &m.written {
                    progress(&format!("[{}/{}] wrote {}", i + 1, grid.len(), f.display()));
                }
                Outcome::Ran(m)
            }
            Err(e) if e.is_oom() => {
                let what = match e {
                    crate::Error::OutOfMemory { what } => what,
                    other => other.to_string(),
                };
                let outcome = Outcome::OutOfMemory {
                    what,
                    hint: oom_hint(run, rt.gpu.info.total_memory),
                };
                let reason = outcome.reason().unwrap_or_default();
                progress(&format!("[{}/{}] {name}: OOM: {reason}", i + 1, grid.len()));
                outcome
            }
            Err(e) => return Err(e),
        };
        rows.push(Row {
            run: run.clone(),
            outcome,
        });
    }
    Ok(rows)
}

fn describe(run: &RunConfig) -> String {
    format!(
        "{} ctx {} batch {} {} {}{} {} attention{}",
        run.model.label(),
        run.ctx,
        run.batch,
        run.mode,
        run.precision,
        if run.tf32 { " tf32" } else { "" },
        run.attention,
        if run.checkpoint { ", checkpointed" } else { "" }
    )
}

#[cfg(test)]
mod tests;
