//! One snapshot's results: [`MemoryReport`] (serializable, the unit a report over many runs is
//! built from), made by [`analyze`] from a loaded snapshot, with the run's name read from its
//! label by [`crate::run_name`] (`memsnap_medium_ctx256_train_fp32`) and a `memory_viz`-like
//! summary of the allocator's segments. The tables built from reports are in [`super::tables`].
//!
//! Everything here is pure: the caller reads files and chooses labels.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::categories::{breakdown, CategoryShare, Rules};
use super::inference::{categorize, Categories};
use super::modules::{by_module, ModuleShare};
use super::peak::{top_allocations, TopAllocation};
use super::phases::{spans, stack_phases, Phase, PhaseSpan};
use super::timeline::{replay, replay_watching, Timeline};
use crate::model::snapshot::{BlockState, SegmentKind, Snapshot, SnapshotFormat};
pub use crate::run_name::{mode_word, parse_run_name, precision_word, run_stem, RunName};

/// What to compute.
#[derive(Clone, Debug)]
pub struct MemoryOptions {
    /// How many allocations to list at the peak.
    pub top: usize,
    /// Device to analyse; by default the one with the highest peak.
    pub device: Option<i64>,
    /// Name of the run in tables; by default the caller passes the file name.
    pub label: String,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            top: 10,
            device: None,
            label: String::new(),
        }
    }
}

/// A snapshot's name in tables and plot file names when no label is given: its file name without
/// `.gz`, `.pickle` or `.pkl`.
pub fn snapshot_label(path: &Path) -> String {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    name.trim_end_matches(".gz")
        .trim_end_matches(".pickle")
        .trim_end_matches(".pkl")
        .to_owned()
}

/// A phase span with times relative to the window's start.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseTimes {
    pub phase: Phase,
    pub first_entry: usize,
    pub last_entry: usize,
    pub start_us: Option<f64>,
    pub end_us: Option<f64>,
}

/// The allocator's segments at the end of the window, as `memory_viz`'s `stats`/`segsum`
/// summarise them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SegmentStats {
    pub segments: usize,
    pub large_segments: usize,
    pub small_segments: usize,
    pub reserved_bytes: u64,
    /// Blocks held by tensors, as the allocator counts them.
    pub allocated_bytes: u64,
    /// What those tensors asked for.
    pub requested_bytes: u64,
    /// Reserved but not allocated.
    pub free_bytes: u64,
    /// Allocated minus requested: rounding and unsplit blocks.
    pub internal_free_bytes: u64,
    /// Largest free (inactive) block: the largest request served without a new `cudaMalloc`.
    pub largest_free_block_bytes: u64,
    /// Free (reserved but unallocated) bytes as a fraction of reserved: what PyTorch's
    /// out-of-memory message calls fragmentation.
    pub fragmentation: f64,
}

/// Segment statistics of one device's end state.
pub fn segment_stats(snap: &Snapshot, device: i64) -> SegmentStats {
    let mut s = SegmentStats::default();
    for seg in snap.segments.iter().filter(|g| g.device == device) {
        s.segments += 1;
        match seg.kind {
            SegmentKind::Large => s.large_segments += 1,
            SegmentKind::Small => s.small_segments += 1,
            SegmentKind::Unknown => {}
        }
        s.reserved_bytes = s.reserved_bytes.saturating_add(seg.total_size);
        for b in &seg.blocks {
            match b.state {
                BlockState::ActiveAllocated => {
                    s.allocated_bytes = s.allocated_bytes.saturating_add(b.size);
                    s.requested_bytes = s.requested_bytes.saturating_add(b.requested_size);
                }
                BlockState::Inactive => {
                    s.largest_free_block_bytes = s.largest_free_block_bytes.max(b.size);
                }
                BlockState::ActivePendingFree => {}
            }
        }
    }
    s.free_bytes = s.reserved_bytes.saturating_sub(s.allocated_bytes);
    s.internal_free_bytes = s.allocated_bytes.saturating_sub(s.requested_bytes);
    s.fragmentation = if s.reserved_bytes > 0 {
        s.free_bytes as f64 / s.reserved_bytes as f64
    } else {
        0.0
    };
    s
}

/// Bytes live at the peak on one CUDA stream.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StreamShare {
    /// The stream as PyTorch records it (a `cudaStream_t` value; 0 is the default stream).
    pub stream: u64,
    pub bytes: u64,
    pub count: usize,
}

/// Consistency counters of the replay (all zero on a healthy snapshot).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplayChecks {
    pub size_fallbacks: usize,
    pub unmatched_frees: usize,
    /// End-state allocated bytes minus the replay's final value.
    pub end_mismatch_bytes: i64,
}

/// Everything `analyze memory` reports about one snapshot.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryReport {
    pub label: String,
    pub run: RunName,
    pub format: SnapshotFormat,
    pub device: i64,
    pub devices: Vec<i64>,
    pub trace_entries: usize,
    /// Length of the recorded window in µs (`None` without times).
    pub window_us: Option<f64>,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// µs after the window's first entry (`None` without times or without a trace).
    pub peak_time_us: Option<f64>,
    /// Trace entry at which the peak is reached (`None`: no trace, the end state is the peak).
    pub peak_entry: Option<usize>,
    pub peak_phase: Option<Phase>,
    pub reserved_at_peak_bytes: u64,
    /// Highest allocated bytes during forward phases (`None` when frames reveal no forward).
    pub forward_peak_bytes: Option<u64>,
    /// Allocated at the start of the window: made before recording began.
    pub start_allocated_bytes: u64,
    pub end_allocated_bytes: u64,
    pub end_reserved_bytes: u64,
    pub top_allocations: Vec<TopAllocation>,
    pub categories_at_peak: Vec<CategoryShare>,
    /// Memory by module ([`super::modules`]): bytes at the peak, which add up to
    /// `peak_allocated_bytes`, and allocations over the window; largest at the peak first.
    pub modules: Vec<ModuleShare>,
    /// Live bytes per stream at the peak, largest first.
    pub streams_at_peak: Vec<StreamShare>,
    pub phases: Vec<PhaseTimes>,
    pub stats: SegmentStats,
    pub oom_events: usize,
    pub checks: ReplayChecks,
}

/// The categories at the peak of all `reports`, in display order: the order of one breakdown of
/// them all, largest first. Tables and charts put their columns and legends in this order.
pub fn category_order<'a>(reports: impl IntoIterator<Item = &'a MemoryReport>) -> Vec<String> {
    breakdown(reports.into_iter().flat_map(|r| {
        r.categories_at_peak
            .iter()
            .map(|c| (c.bytes, c.category.as_str()))
    }))
    .into_iter()
    .map(|c| c.category)
    .collect()
}

/// A report with the timeline and phase spans it was made from (for plots).
#[derive(Clone, Debug)]
pub struct Analysis {
    pub report: MemoryReport,
    pub timeline: Timeline,
    pub spans: Vec<PhaseSpan>,
    /// Category of every allocation of the timeline.
    pub categories: Categories,
    /// Phases placed by the snapshot's annotations (see [`super::phases::annotated_phases`]).
    pub annotated_phases: Vec<super::phases::AnnotatedPhase>,
}

/// Check that `device` is one the snapshot read from `path` has (segments or trace entries on
/// it): a device it lacks would give a report of zeros.
pub fn check_device(snap: &Snapshot, device: i64, path: &Path) -> crate::Result<()> {
    let present = snap.devices();
    if present.contains(&device) {
        Ok(())
    } else {
        Err(crate::Error::NoSuchDevice {
            path: path.to_owned(),
            device,
            present,
        })
    }
}

/// Analyse one snapshot.
pub fn analyze(snap: &Snapshot, rules: &Rules, opts: &MemoryOptions) -> Analysis {
    let devices = snap.devices();
    let device = match (opts.device, devices.as_slice()) {
        (Some(d), _) => d,
        (None, []) => 0,
        (None, [d]) => *d,
        // The device with the highest peak, so a stray allocation on another GPU does not win.
        (None, many) => many
            .iter()
            .copied()
            .max_by_key(|&d| {
                let tl = replay(snap, d);
                tl.peak_allocated()
                    .map_or(tl.end_allocated, |p| p.allocated)
            })
            .unwrap_or(0),
    };
    let trace = snap.trace(device);
    let phase_of = stack_phases(&snap.frames);
    let spans = spans(trace, &phase_of);
    // The forward peak is folded as the replay passes.
    let forward: Vec<(usize, usize)> = spans
        .iter()
        .filter(|s| s.phase == Phase::Forward)
        .map(|s| (s.first_entry, s.last_entry))
        .collect();
    let timeline = replay_watching(snap, device, &forward);
    let categories = categorize(snap, &timeline, rules);

    let t0 = timeline.first_time_us();
    let rel = |entry: usize| -> Option<f64> {
        let t = timeline.time_us(entry)?;
        // In floating point: hostile timestamps must not overflow.
        Some(t as f64 - t0? as f64)
    };
    let peak = timeline.peak_allocated();
    let peak_entry = peak.map(|p| p.entry);
    let (peak_allocated, reserved_at_peak) = match peak {
        Some(p) => (p.allocated, p.reserved),
        None => (timeline.end_allocated, timeline.end_reserved),
    };
    let peak_reserved = timeline
        .peak_reserved()
        .map_or(timeline.end_reserved, |p| p.reserved)
        .max(timeline.start_reserved);
    let forward_peak = timeline.highest_in_ranges;
    let peak_phase = peak_entry.and_then(|e| {
        spans
            .iter()
            .find(|s| s.first_entry <= e && e <= s.last_entry)
            .map(|s| s.phase)
    });
    let at_peak: Vec<(u64, &str)> = timeline
        .allocations
        .iter()
        .zip(categories.iter())
        .filter(|(a, _)| a.live_after(peak_entry))
        .map(|(a, c)| (a.size, c))
        .collect();
    let mut streams: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
    for a in timeline
        .allocations
        .iter()
        .filter(|a| a.live_after(peak_entry))
    {
        let e = streams.entry(a.stream).or_default();
        e.0 = e.0.saturating_add(a.size);
        e.1 += 1;
    }
    let mut streams_at_peak: Vec<StreamShare> = streams
        .into_iter()
        .map(|(stream, (bytes, count))| StreamShare {
            stream,
            bytes,
            count,
        })
        .collect();
    streams_at_peak.sort_by_key(|s| std::cmp::Reverse(s.bytes));
    let final_allocated = timeline
        .last_point()
        .map_or(timeline.start_allocated, |p| p.allocated);
    let report = MemoryReport {
        label: opts.label.clone(),
        run: parse_run_name(&opts.label),
        format: snap.format.clone(),
        device,
        devices,
        trace_entries: trace.len(),
        window_us: trace.len().checked_sub(1).and_then(rel),
        peak_allocated_bytes: peak_allocated,
        peak_reserved_bytes: peak_reserved,
        peak_time_us: peak_entry.and_then(rel),
        peak_entry,
        peak_phase,
        reserved_at_peak_bytes: reserved_at_peak,
        forward_peak_bytes: forward_peak,
        start_allocated_bytes: timeline.start_allocated,
        end_allocated_bytes: timeline.end_allocated,
        end_reserved_bytes: timeline.end_reserved,
        top_allocations: top_allocations(
            &snap.frames,
            &timeline,
            &categories,
            peak_entry,
            opts.top,
        ),
        categories_at_peak: breakdown(at_peak),
        modules: by_module(&snap.frames, &timeline, peak_entry),
        streams_at_peak,
        phases: spans
            .iter()
            .map(|s| PhaseTimes {
                phase: s.phase,
                first_entry: s.first_entry,
                last_entry: s.last_entry,
                start_us: rel(s.first_entry),
                end_us: rel(s.last_entry),
            })
            .collect(),
        stats: segment_stats(snap, device),
        oom_events: timeline.oom_entries.len(),
        checks: ReplayChecks {
            size_fallbacks: timeline.size_fallbacks,
            unmatched_frees: timeline.unmatched_frees,
            end_mismatch_bytes: (i128::from(timeline.end_allocated) - i128::from(final_allocated))
                .clamp(i128::from(i64::MIN), i128::from(i64::MAX))
                as i64,
        },
    };
    Analysis {
        report,
        timeline,
        spans,
        categories,
        annotated_phases: super::phases::annotated_phases(snap, device),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::{Action, DeviceTrace, Segment, StackId, TraceEntry};

    fn alloc_free(addr: u64, size: u64) -> DeviceTrace {
        [Action::Alloc, Action::FreeRequested, Action::FreeCompleted]
            .into_iter()
            .enumerate()
            .map(|(i, action)| TraceEntry {
                action,
                addr,
                size,
                stream: 0,
                time_us: Some(1000 + i as i64),
                stack: StackId::EMPTY,
                compile_context: None,
                user_metadata: None,
            })
            .collect()
    }

    #[test]
    fn the_device_with_the_highest_peak_is_reported() {
        let mib = 1u64 << 20;
        let snap = Snapshot {
            segments: vec![
                Segment::one_live_block(0, 1 << 32, 20 * mib, 2 * mib),
                Segment::one_live_block(1, 1 << 40, 40 * mib, 2 * mib),
            ],
            traces: vec![
                alloc_free((1 << 32) + 2 * mib, mib),
                alloc_free((1 << 40) + 2 * mib, 30 * mib),
            ],
            ..Snapshot::default()
        };
        let r = analyze(&snap, &Rules::builtin(), &MemoryOptions::default()).report;
        assert_eq!(r.devices, vec![0, 1]);
        assert_eq!(r.device, 1);
        assert_eq!(r.peak_allocated_bytes, 32 * mib);
        assert_eq!(r.peak_time_us, Some(0.0));
        let opts = MemoryOptions {
            device: Some(0),
            ..MemoryOptions::default()
        };
        let r = analyze(&snap, &Rules::builtin(), &opts).report;
        assert_eq!(r.peak_allocated_bytes, 3 * mib);
        assert_eq!(r.stats.reserved_bytes, 20 * mib);
    }
}
