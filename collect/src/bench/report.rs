//! What `collect bench` reports from its rows: the table on stdout ([`document`]), the JSON
//! results file ([`results_file`], written by [`write_results_file`] in
//! [`analyze::formats::bench_results`]' format), the `RUN_METADATA` a trace of a configuration
//! carries ([`run_metadata()`]), and the device line printed before a sweep. Pure, but for the one
//! file write.

use std::path::Path;

use analyze::formats::bench_results::{
    self, AllocatorCounters, Memory, ResultsFile, RunResult, Settings, StepTimes,
};
use analyze::formats::run_metadata::{self, RunDescription, RunMetadata};
use analyze::render::cells::format_bytes;
use analyze::render::{Cell, Document, Section, Table};

use super::{BenchOptions, Measured, Outcome, Row};
use crate::error::{Error, Result};
use crate::gpu::device::DeviceInfo;
use crate::gpu::device_memory::AllocatorKind;
use crate::transformer::config::RunConfig;
use crate::transformer::plan;
use analyze::formats::step_times::StepTimes as Stats;

/// Run-metadata keys `bench` adds to [`run_metadata::keys`].
pub mod keys {
    pub const ALLOCATOR: &str = "allocator";
    /// Whether activation checkpointing was on (`true` or `false`).
    pub const CHECKPOINT: &str = "checkpoint";
    /// The caching allocator's `max_memory_allocated` over the last timed step (bytes).
    pub const PEAK_ALLOCATED_BYTES: &str = "peak_allocated_bytes";
    /// Its `max_memory_reserved` over the same step.
    pub const PEAK_RESERVED_BYTES: &str = "peak_reserved_bytes";
    /// The peak of the bytes requested over the whole configuration (the pool allocator's runs).
    pub const PEAK_REQUESTED_BYTES: &str = "peak_requested_bytes";
}

/// What ran, as a trace's `RUN_METADATA` describes a configuration.
pub fn run_description(run: &RunConfig) -> RunDescription {
    let c = &run.model;
    RunDescription {
        model: c.label(),
        d_model: c.d_model as u32,
        d_ff: c.d_ff as u32,
        layers: c.layers as u32,
        heads: c.heads as u32,
        vocab: c.vocab as u32,
        ctx: run.ctx as u32,
        batch: run.batch as u32,
        mode: run.mode.as_str().to_owned(),
        precision: run.precision.as_str().to_owned(),
    }
}

/// The `RUN_METADATA` of a measured configuration: what ran, on what, and its step times.
pub fn run_metadata(
    run: &RunConfig,
    warmup: usize,
    m: &Measured,
    device: &DeviceInfo,
    allocator: AllocatorKind,
) -> RunMetadata {
    let mut meta = RunMetadata::describe(&run_description(run));
    let flops = plan::plan(run).flops;
    meta.set(run_metadata::keys::TF32, run.tf32)
        .set(run_metadata::keys::MODEL_FLOPS_PER_STEP, flops.per_step)
        .set(
            run_metadata::keys::HARDWARE_FLOPS_PER_STEP,
            flops.per_step + flops.recompute,
        )
        .set(run_metadata::keys::WARMUP, warmup)
        .set_step_times_ms(&m.host_ms)
        .set(run_metadata::keys::DEVICE, &device.name)
        .set(run_metadata::keys::DRIVER, &device.driver)
        .set(run_metadata::keys::ATTENTION, run.attention)
        .set(keys::CHECKPOINT, run.checkpoint)
        .set(keys::ALLOCATOR, allocator);
    match &m.allocator {
        Some(a) => {
            meta.set(keys::PEAK_ALLOCATED_BYTES, a.max_allocated)
                .set(keys::PEAK_RESERVED_BYTES, a.max_reserved);
        }
        None => {
            meta.set(keys::PEAK_REQUESTED_BYTES, m.memory.peak);
        }
    }
    meta
}

/// The model FLOP utilisation of a step of `run` taking `mean_ms` on `device`, against the peak
/// of its matrix products' type there; `None` for a GPU the table of peaks lacks.
pub fn mfu(run: &RunConfig, mean_ms: f64, device: &DeviceInfo) -> Option<f64> {
    let peaks = analyze::roofline::peaks::for_gpu(&device.name)?.peaks;
    let dtype = analyze::roofline::Dtype::of_precision(run.precision.as_str())?;
    let (_, peak) = analyze::roofline::mfu::roof(&peaks, dtype, run.tf32);
    let flops = plan::plan(run).flops.per_step as f64;
    analyze::roofline::mfu::utilisation(flops, mean_ms * 1e6, peak)
}

/// Tokens per second from a mean step time.
pub fn tokens_per_second(run: &RunConfig, mean_ms: f64) -> f64 {
    run.tokens() as f64 / (mean_ms / 1e3)
}

/// The results table: one row per configuration, times from the host clock (as the PyTorch
/// reference reports them), the CUDA-event mean beside them.
pub fn document(rows: &[Row], device: &DeviceInfo) -> Document {
    let mut t = Table::new([
        "size",
        "ctx",
        "mode",
        "precision",
        "attention",
        "checkpoint",
        "mean (ms)",
        "std (ms)",
        "median (ms)",
        "min (ms)",
        "max (ms)",
        "CV (%)",
        "first (ms)",
        "tokens/s",
        "MFU (%)",
        "events mean (ms)",
        "peak memory",
    ]);
    let mut notes = Vec::new();
    for r in rows {
        let mut row = vec![
            Cell::text(r.run.model.label()),
            Cell::Int(r.run.ctx as i64),
            Cell::text(r.run.mode.as_str()),
            Cell::text(r.run.precision.as_str()),
            Cell::text(r.run.attention.as_str()),
            Cell::text(if r.run.checkpoint { "on" } else { "off" }),
        ];
        match &r.outcome {
            Outcome::Ran(m) => {
                let h = &m.host;
                row.extend([
                    Cell::Float(h.mean, 2),
                    Cell::Float(h.std, 2),
                    Cell::Float(h.median, 2),
                    Cell::Float(h.min, 2),
                    Cell::Float(h.max, 2),
                    Cell::Float(h.cv * 100.0, 1),
                    Cell::Float(h.first, 2),
                    Cell::Int(tokens_per_second(&r.run, h.mean).round() as i64),
                    mfu(&r.run, h.mean, device)
                        .map_or(Cell::Missing, |u| Cell::Float(u * 100.0, 1)),
                    Cell::Float(m.event.mean, 2),
                    Cell::text(format_bytes(m.memory.peak)),
                ]);
            }
            Outcome::OutOfMemory { .. } | Outcome::Refused { .. } => {
                let status = match r.outcome {
                    Outcome::OutOfMemory { .. } => "OOM",
                    _ => "refused",
                };
                row.push(Cell::text(status));
                row.extend(std::iter::repeat_n(Cell::Missing, 10));
                if let Some(reason) = r.outcome.reason() {
                    notes.push(format!(
                        "{} ctx {} {} {} {} attention{}: {reason}",
                        r.run.model.label(),
                        r.run.ctx,
                        r.run.mode,
                        r.run.precision,
                        r.run.attention,
                        if r.run.checkpoint {
                            ", checkpointed"
                        } else {
                            ""
                        }
                    ));
                }
            }
        }
        t.push(row);
    }
    Document {
        sections: vec![Section {
            title: Some(format!(
                "collect bench on {} (driver {})",
                device.name, device.driver
            )),
            table: t,
            notes,
        }],
        json: None,
    }
}

/// The results file (`--out`): the device, the settings and every configuration with all its
/// step times ([`analyze::formats::bench_results`] writes it).
pub fn results_file(rows: &[Row], device: &DeviceInfo, opts: &BenchOptions) -> ResultsFile {
    let results = rows
        .iter()
        .map(|r| {
            let c = &r.run.model;
            let plan = plan::plan(&r.run);
            let mut v = RunResult {
                size: Some(c.label()),
                d_model: Some(c.d_model as u64),
                d_ff: Some(c.d_ff as u64),
                layers: Some(c.layers as u64),
                heads: Some(c.heads as u64),
                ctx: Some(r.run.ctx as u32),
                batch: Some(r.run.batch as u32),
                mode: Some(r.run.mode.as_str().to_owned()),
                precision: Some(r.run.precision.as_str().to_owned()),
                tf32: Some(r.run.tf32),
                checkpoint: Some(r.run.checkpoint),
                parameters: Some(c.parameters()),
                flops_per_step: Some(plan.flops.per_step),
                planned_peak_bytes: Some(plan.memory.peak),
                ..RunResult::default()
            };
            match &r.outcome {
                Outcome::Ran(m) => {
                    v.status = Some("ok".into());
                    v.host = Some(step_times(&m.host));
                    v.events = Some(step_times(&m.event));
                    v.host_step_ms = Some(m.host_ms.clone());
                    v.event_step_ms = Some(m.event_ms.clone());
                    v.tokens_per_s = Some(tokens_per_second(&r.run, m.host.mean));
                    v.mfu = mfu(&r.run, m.host.mean, device);
                    v.loss = Some(m.loss.map(f64::from));
                    v.memory = Some(Memory {
                        after_build_bytes: Some(m.memory.after_build),
                        in_use_bytes: Some(m.memory.in_use),
                        peak_bytes: Some(m.memory.peak),
                        device_used_bytes: Some(m.memory.device_used),
                        allocator: m.allocator.as_ref().map(|a| AllocatorCounters {
                            kind: Some(AllocatorKind::Caching.as_str().into()),
                            peak_window: Some("last timed step".into()),
                            max_allocated_bytes: Some(a.max_allocated),
                            max_reserved_bytes: Some(a.max_reserved),
                            allocated_bytes: Some(a.allocated),
                            reserved_bytes: Some(a.reserved),
                            device_allocs: Some(a.device_allocs),
                            history_entries: Some(a.history_entries as u64),
                        }),
                    });
                    if !m.written.is_empty() {
                        v.files = Some(m.written.iter().map(|p| p.display().to_string()).collect());
                    }
                }
                Outcome::OutOfMemory { what, .. } => {
                    v.status = Some(r.outcome.status().into());
                    v.oom = Some(what.clone());
                }
                Outcome::Refused { .. } => v.status = Some(r.outcome.status().into()),
            }
            v
        })
        .collect();
    ResultsFile {
        device: Some(bench_results::Device {
            name: Some(device.name.clone()),
            driver: Some(device.driver.clone()),
            compute_capability: Some(format!(
                "{}.{}",
                device.compute_capability.0, device.compute_capability.1
            )),
            total_memory_bytes: Some(device.total_memory),
            multiprocessors: Some(i64::from(device.multiprocessors)),
        }),
        settings: Some(Settings {
            batch: Some(opts.batch as u64),
            warmup: Some(opts.warmup as u64),
            steps: Some(opts.steps as u64),
            tf32: Some(opts.tf32),
            seed: Some(opts.seed),
            allocator: Some(opts.allocator.as_str().to_owned()),
            checkpoint: Some(opts.checkpoint.as_str().to_owned()),
            timing: Some(
                "host clock from the step's launch to the end of a stream synchronize; CUDA \
                 events around the step"
                    .to_owned(),
            ),
        }),
        results,
    }
}

/// The results file written to `path`, atomically.
pub fn write_results_file(
    path: &Path,
    rows: &[Row],
    device: &DeviceInfo,
    opts: &BenchOptions,
) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let text = bench_results::to_json(&results_file(rows, device, opts))
        .map_err(|e| io(std::io::Error::other(e)))?;
    analyze::atomic_file::write(path, text.as_bytes()).map_err(io)
}

/// The line `collect bench` prints about the device before a sweep.
pub fn device_line(device: &DeviceInfo) -> String {
    format!(
        "collect: {} (sm_{}{}, driver {}, {} of memory)",
        device.name,
        device.compute_capability.0,
        device.compute_capability.1,
        device.driver,
        format_bytes(device.total_memory)
    )
}

/// A summary as the results file gives it.
fn step_times(s: &Stats) -> StepTimes {
    StepTimes {
        mean_ms: Some(s.mean),
        std_ms: Some(s.std),
        min_ms: Some(s.min),
        max_ms: Some(s.max),
        median_ms: Some(s.median),
        cv: Some(s.cv),
        first_ms: Some(s.first),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transformer::config::{Mode, ModelConfig};

    #[test]
    fn tokens_per_second_uses_batch_times_ctx() {
        let run = RunConfig::new(ModelConfig::preset("small").unwrap(), 256, 4, Mode::Train);
        assert_eq!(tokens_per_second(&run, 512.0), 2000.0);
    }
}
