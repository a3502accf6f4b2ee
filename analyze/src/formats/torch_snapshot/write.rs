//! The allocator's state and history as a PyTorch memory snapshot: the dict that
//! `torch.cuda.memory._snapshot()` returns (PyTorch 2.11), pickled, so that
//! `torch.cuda._memory_viz` (`stats`, `trace`, `trace_plot`), the memory_viz web page and
//! `analyze memory` read it like a snapshot PyTorch wrote.
//!
//! Keys, their order and their Python types follow a real 2.11 snapshot: `segments` (each with
//! `device`, `address`, `total_size`, `allocated_size`, `active_size`, `requested_size`,
//! `stream`, `segment_type`, `segment_pool_id`, `is_expandable`, `frames`, `blocks`),
//! `device_traces` (one list per device up to ours, entries with `action`, `addr` (or
//! `device_free` for `oom`), `size`, `stream`, `time_us`, `compile_context`, `user_metadata`,
//! `frames`), `allocator_settings` and `external_annotations`. Frame dicts are written once and
//! shared through the pickle memo, as PyTorch's pickles share them. The per-segment sums are
//! computed here from the blocks, so they cannot disagree with them. This module does not
//! allocate or record anything: [`crate::caching_allocator`] builds the [`Snapshot`].

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::memory_history::{Annotation, Frame, FrameId, StackId, TraceEntry};
use crate::pickle_writer::{MemoId, PickleWriter};

/// What can go wrong writing a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The state of a block, as the snapshot spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    ActiveAllocated,
    /// Freed by the caller but still in use by a stream (PyTorch's `record_stream`).
    ActivePendingFree,
    Inactive,
}

impl BlockState {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }
}

/// One block of a segment, in address order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    /// Context of the allocation that made the block active; `None` for free blocks or blocks
    /// allocated before recording started.
    pub stack: Option<StackId>,
}

/// `segment_type`: which pool a segment belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentType {
    Small,
    Large,
}

impl SegmentType {
    pub fn as_str(self) -> &'static str {
        match self {
            SegmentType::Small => "small",
            SegmentType::Large => "large",
        }
    }
}

/// One device allocation (`cudaMalloc`) of the allocator, with its blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    pub device: u32,
    pub address: u64,
    pub total_size: u64,
    pub stream: u64,
    pub segment_type: SegmentType,
    /// Context of the allocation that made the segment.
    pub stack: Option<StackId>,
    pub blocks: Vec<BlockInfo>,
}

impl SegmentInfo {
    /// Sum of the active-allocated blocks (`allocated_size`).
    pub fn allocated_size(&self) -> u64 {
        self.sum(|b| b.state == BlockState::ActiveAllocated, |b| b.size)
    }

    /// Sum of the active blocks, pending frees included (`active_size`).
    pub fn active_size(&self) -> u64 {
        self.sum(|b| b.state != BlockState::Inactive, |b| b.size)
    }

    /// Sum of the requested sizes of active-allocated blocks (`requested_size`).
    pub fn requested_size(&self) -> u64 {
        self.sum(
            |b| b.state == BlockState::ActiveAllocated,
            |b| b.requested_size,
        )
    }

    fn sum(&self, keep: impl Fn(&BlockInfo) -> bool, size: impl Fn(&BlockInfo) -> u64) -> u64 {
        self.blocks.iter().filter(|b| keep(b)).map(size).sum()
    }
}

/// The allocator's settings as `allocator_settings` reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocatorSettings {
    /// `None`: unlimited (PyTorch writes -1).
    pub max_split_size: Option<u64>,
    pub expandable_segments: bool,
    /// What to print as `PYTORCH_CUDA_ALLOC_CONF`: the equivalent settings, or empty.
    pub alloc_conf: String,
}

/// Everything a snapshot holds, with frames interned.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Sorted by address.
    pub segments: Vec<SegmentInfo>,
    /// Device index of the trace.
    pub device: u32,
    /// Oldest first.
    pub trace: Vec<TraceEntry>,
    /// `frames[id]`.
    pub frames: Vec<Frame>,
    /// `stacks[id]`, innermost frame first.
    pub stacks: Vec<Vec<FrameId>>,
    pub settings: AllocatorSettings,
    pub annotations: Vec<Annotation>,
}

/// Serialise a snapshot to pickle bytes (protocol 4).
pub fn to_pickle(s: &Snapshot) -> Vec<u8> {
    let mut w = PickleWriter::new();
    let mut memo = FrameMemo {
        frames: vec![None; s.frames.len()],
    };
    w.begin_dict();

    w.key("segments");
    w.begin_list();
    for seg in &s.segments {
        write_segment(&mut w, s, &mut memo, seg);
    }
    w.end_list();

    w.key("device_traces");
    w.begin_list();
    for d in 0..=s.device {
        w.begin_list();
        if d == s.device {
            for e in &s.trace {
                write_entry(&mut w, s, &mut memo, e);
            }
        }
        w.end_list();
    }
    w.end_list();

    w.key("allocator_settings");
    write_settings(&mut w, &s.settings);

    w.key("external_annotations");
    w.begin_list();
    for a in &s.annotations {
        w.begin_dict();
        w.key("stage");
        w.string(a.stage.as_str());
        w.key("name");
        w.string(&a.name);
        w.key("device");
        w.uint(a.device as u64);
        w.key("time_us");
        w.int(a.time_us);
        w.end_dict();
    }
    w.end_list();

    w.end_dict();
    w.finish()
}

/// Memo ids of frame dicts already written.
struct FrameMemo {
    frames: Vec<Option<MemoId>>,
}

fn write_frames(w: &mut PickleWriter, s: &Snapshot, memo: &mut FrameMemo, stack: Option<StackId>) {
    w.begin_list();
    if let Some(frames) = stack.and_then(|id| s.stacks.get(id.0 as usize)) {
        for &f in frames {
            let slot = memo.frames.get(f.0 as usize).copied().flatten();
            match slot {
                Some(id) => w.get(id),
                None => {
                    let Some(frame) = s.frames.get(f.0 as usize) else {
                        continue;
                    };
                    w.begin_dict();
                    w.key("name");
                    w.string(&frame.name);
                    w.key("filename");
                    w.string(&frame.filename);
                    w.key("line");
                    w.uint(frame.line as u64);
                    let id = w.end_dict_memo();
                    if let Some(m) = memo.frames.get_mut(f.0 as usize) {
                        *m = Some(id);
                    }
                }
            }
        }
    }
    w.end_list();
}

fn write_segment(w: &mut PickleWriter, s: &Snapshot, memo: &mut FrameMemo, seg: &SegmentInfo) {
    w.begin_dict();
    w.key("device");
    w.uint(seg.device as u64);
    w.key("address");
    w.uint(seg.address);
    w.key("total_size");
    w.uint(seg.total_size);
    w.key("allocated_size");
    w.uint(seg.allocated_size());
    w.key("active_size");
    w.uint(seg.active_size());
    w.key("requested_size");
    w.uint(seg.requested_size());
    w.key("stream");
    w.uint(seg.stream);
    w.key("segment_type");
    w.string(seg.segment_type.as_str());
    w.key("segment_pool_id");
    w.int_tuple(&[0, 0]);
    w.key("is_expandable");
    w.bool(false);
    w.key("frames");
    write_frames(w, s, memo, seg.stack);
    w.key("blocks");
    w.begin_list();
    for b in &seg.blocks {
        w.begin_dict();
        w.key("address");
        w.uint(b.address);
        w.key("size");
        w.uint(b.size);
        w.key("requested_size");
        w.uint(b.requested_size);
        w.key("state");
        w.string(b.state.as_str());
        w.key("frames");
        write_frames(w, s, memo, b.stack);
        w.end_dict();
    }
    w.end_list();
    w.end_dict();
}

fn write_entry(w: &mut PickleWriter, s: &Snapshot, memo: &mut FrameMemo, e: &TraceEntry) {
    use crate::memory_history::Action;
    w.begin_dict();
    w.key("action");
    w.string(e.action.as_str());
    if e.action == Action::Oom {
        w.key("device_free");
        w.uint(e.device_free);
    } else {
        w.key("addr");
        w.uint(e.addr);
    }
    w.key("size");
    w.uint(e.size);
    w.key("stream");
    w.uint(e.stream);
    w.key("time_us");
    w.int(e.time_us);
    w.key("compile_context");
    w.string("N/A");
    w.key("user_metadata");
    w.string("");
    w.key("frames");
    write_frames(w, s, memo, e.stack);
    w.end_dict();
}

fn write_settings(w: &mut PickleWriter, settings: &AllocatorSettings) {
    w.begin_dict();
    w.key("PYTORCH_CUDA_ALLOC_CONF");
    w.string(&settings.alloc_conf);
    w.key("max_split_size");
    match settings.max_split_size {
        Some(v) => w.uint(v),
        None => w.int(-1),
    }
    w.key("garbage_collection_threshold");
    w.float(0.0);
    w.key("expandable_segments");
    w.bool(settings.expandable_segments);
    w.key("pinned_num_register_threads");
    w.int(1);
    w.key("release_lock_on_cudamalloc");
    w.bool(false);
    w.key("pinned_use_cuda_host_register");
    w.bool(false);
    w.key("graph_capture_record_stream_reuse");
    w.bool(false);
    w.key("roundup_power2_divisions");
    w.begin_dict();
    let mut interval = 1u64;
    while interval <= 32768 {
        w.key(&interval.to_string());
        w.int(0);
        interval *= 2;
    }
    w.end_dict();
    w.end_dict();
}

/// Write the snapshot to `path` atomically (a temporary file in the same folder, then a rename).
/// A path ending in `.gz` is gzip-compressed; memory_viz wants the plain pickle, `analyze`
/// reads both.
pub fn write(s: &Snapshot, path: &Path) -> Result<(), SnapshotError> {
    let bytes = to_pickle(s);
    let gz = path.extension().is_some_and(|e| e == "gz");
    write_atomically(path, |f| {
        if gz {
            let mut enc = flate2::write::GzEncoder::new(f, flate2::Compression::default());
            enc.write_all(&bytes)?;
            enc.finish()?.flush()
        } else {
            f.write_all(&bytes)?;
            f.flush()
        }
    })
}

/// Create `path` atomically ([`analyze::atomic_file`]) with what `fill` writes.
pub(crate) fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), SnapshotError> {
    analyze::atomic_file::write_with(path, fill).map_err(|source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_history::{Action, Stage};

    fn snapshot() -> Snapshot {
        Snapshot {
            segments: vec![SegmentInfo {
                device: 0,
                address: 1 << 40,
                total_size: 2 << 20,
                stream: 0,
                segment_type: SegmentType::Small,
                stack: Some(StackId(0)),
                blocks: vec![
                    BlockInfo {
                        address: 1 << 40,
                        size: 1024,
                        requested_size: 1000,
                        state: BlockState::ActiveAllocated,
                        stack: Some(StackId(0)),
                    },
                    BlockInfo {
                        address: (1 << 40) + 1024,
                        size: (2 << 20) - 1024,
                        requested_size: 0,
                        state: BlockState::Inactive,
                        stack: None,
                    },
                ],
            }],
            device: 0,
            trace: vec![TraceEntry {
                action: Action::Alloc,
                addr: 1 << 40,
                size: 1024,
                stream: 0,
                time_us: 5,
                stack: Some(StackId(0)),
                device_free: 0,
            }],
            frames: vec![
                Frame {
                    name: "layers.0.attn".into(),
                    filename: "collect/module".into(),
                    line: 0,
                },
                Frame {
                    name: "forward".into(),
                    filename: "collect/phase".into(),
                    line: 0,
                },
            ],
            stacks: vec![vec![FrameId(0), FrameId(1)]],
            settings: AllocatorSettings {
                max_split_size: None,
                expandable_segments: false,
                alloc_conf: String::new(),
            },
            annotations: vec![Annotation {
                stage: Stage::Start,
                name: "forward".into(),
                device: 0,
                time_us: 1,
            }],
        }
    }

    #[test]
    fn segment_sums_come_from_blocks() {
        let s = snapshot();
        assert_eq!(s.segments[0].allocated_size(), 1024);
        assert_eq!(s.segments[0].active_size(), 1024);
        assert_eq!(s.segments[0].requested_size(), 1000);
    }

    #[test]
    fn frame_dicts_are_written_once() {
        let bytes = to_pickle(&snapshot());
        // Three stacks reference the frames (segment, block, trace entry); the frame name is
        // in the file once.
        let n = bytes.windows(13).filter(|w| w == b"layers.0.attn").count();
        assert_eq!(n, 1);
        assert_eq!(&bytes[..2], &[0x80, 4]);
    }

    #[test]
    fn write_replaces_atomically_and_gzips() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("snap.pickle");
        write(&snapshot(), &plain).unwrap();
        assert_eq!(std::fs::read(&plain).unwrap(), to_pickle(&snapshot()));
        let gz = dir.path().join("snap.pickle.gz");
        write(&snapshot(), &gz).unwrap();
        assert_eq!(&std::fs::read(&gz).unwrap()[..2], &[0x1f, 0x8b]);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2, "no temporary file left behind");
    }

    #[test]
    fn a_failed_write_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir/snap.pickle");
        assert!(write(&snapshot(), &missing).is_err());
    }
}
