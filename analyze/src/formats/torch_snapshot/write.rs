//! A [`Snapshot`] written as the dict that `torch.cuda.memory._snapshot()` returns (PyTorch
//! 2.11), pickled, so that `torch.cuda._memory_viz` (`stats`, `trace`, `trace_plot`), the
//! memory_viz web page and [`super::read`] read it like a snapshot PyTorch wrote.
//!
//! Keys, their order and their Python types follow a real 2.11 snapshot: `segments` (each with
//! `device`, `address`, `total_size`, `allocated_size`, `active_size`, `requested_size`,
//! `stream`, `segment_type`, `segment_pool_id`, `is_expandable`, `frames`, `blocks`),
//! `device_traces` (one list per device, entries with `action`, `addr` (or `device_free` for
//! `oom`), `size`, `stream`, `time_us`, `compile_context`, `user_metadata`, `frames`),
//! `allocator_settings` and `external_annotations`. Frame dicts are written once and shared
//! through the pickle memo, as PyTorch's pickles share them. The per-segment sums are computed
//! from the blocks, so they cannot disagree with them. What the model does not hold is written
//! as PyTorch writes its defaults: `N/A` and an empty string for an entry's compile context and
//! user metadata, pool id `(0, 0)`, and the allocator settings PyTorch 2.11 reports beside the
//! ones the model keeps. `collect` turns its allocator's state into a [`Snapshot`]; nothing here
//! allocates or records anything.

use std::io::Write;
use std::path::Path;

use super::{key, ROUNDUP_INTERVALS};
use crate::error::{Error, Result};
use crate::formats::pickle::write::{MemoId, PickleWriter};
use crate::model::snapshot::{
    Action, AllocatorSettings, Annotation, Segment, Snapshot, StackId, TraceEntry,
};

/// Serialise a snapshot to pickle bytes (protocol 4).
pub fn to_pickle(s: &Snapshot) -> Vec<u8> {
    let mut w = PickleWriter::new();
    let mut memo = FrameMemo {
        frames: vec![None; s.frames.frames.len()],
    };
    w.begin_dict();

    w.key(key::SEGMENTS);
    w.begin_list();
    for seg in &s.segments {
        write_segment(&mut w, s, &mut memo, seg);
    }
    w.end_list();

    w.key(key::DEVICE_TRACES);
    w.begin_list();
    for trace in &s.traces {
        w.begin_list();
        for e in trace {
            write_entry(&mut w, s, &mut memo, &e);
        }
        w.end_list();
    }
    w.end_list();

    w.key(key::ALLOCATOR_SETTINGS);
    write_settings(&mut w, &s.settings);

    w.key(key::EXTERNAL_ANNOTATIONS);
    w.begin_list();
    for a in &s.annotations {
        write_annotation(&mut w, a);
    }
    w.end_list();

    w.end_dict();
    w.finish()
}

/// Memo ids of frame dicts already written.
struct FrameMemo {
    frames: Vec<Option<MemoId>>,
}

/// A non-negative value as PyTorch's unsigned fields are written; a negative one as it is.
fn int(w: &mut PickleWriter, v: i64) {
    match u64::try_from(v) {
        Ok(u) => w.uint(u),
        Err(_) => w.int(v),
    }
}

fn write_frames(w: &mut PickleWriter, s: &Snapshot, memo: &mut FrameMemo, stack: StackId) {
    w.begin_list();
    for &f in s.frames.stack(stack) {
        let slot = memo.frames.get(f as usize).copied().flatten();
        match slot {
            Some(id) => w.get(id),
            None => {
                let Some(frame) = s.frames.frames.get(f as usize) else {
                    continue;
                };
                w.begin_dict();
                w.key(key::NAME);
                w.string(&frame.name);
                w.key(key::FILENAME);
                w.string(&frame.filename);
                w.key(key::LINE);
                int(w, frame.line);
                let id = w.end_dict_memo();
                if let Some(m) = memo.frames.get_mut(f as usize) {
                    *m = Some(id);
                }
            }
        }
    }
    w.end_list();
}

fn write_segment(w: &mut PickleWriter, s: &Snapshot, memo: &mut FrameMemo, seg: &Segment) {
    w.begin_dict();
    w.key(key::DEVICE);
    int(w, seg.device);
    w.key(key::ADDRESS);
    w.uint(seg.address);
    w.key(key::TOTAL_SIZE);
    w.uint(seg.total_size);
    w.key(key::ALLOCATED_SIZE);
    w.uint(seg.allocated_size());
    w.key(key::ACTIVE_SIZE);
    w.uint(seg.active_size());
    w.key(key::REQUESTED_SIZE);
    w.uint(seg.requested_size());
    w.key(key::STREAM);
    w.uint(seg.stream);
    w.key(key::SEGMENT_TYPE);
    w.string(seg.kind.as_str());
    w.key(key::SEGMENT_POOL_ID);
    w.int_tuple(&[0, 0]);
    w.key(key::IS_EXPANDABLE);
    w.bool(seg.is_expandable);
    w.key(key::FRAMES);
    write_frames(w, s, memo, seg.stack);
    w.key(key::BLOCKS);
    w.begin_list();
    for b in &seg.blocks {
        w.begin_dict();
        w.key(key::ADDRESS);
        w.uint(b.address);
        w.key(key::SIZE);
        w.uint(b.size);
        w.key(key::REQUESTED_SIZE);
        w.uint(b.requested_size);
        w.key(key::STATE);
        w.string(b.state.as_str());
        w.key(key::FRAMES);
        write_frames(w, s, memo, b.stack);
        w.end_dict();
    }
    w.end_list();
    w.end_dict();
}

fn write_entry(w: &mut PickleWriter, s: &Snapshot, memo: &mut FrameMemo, e: &TraceEntry) {
    w.begin_dict();
    w.key(key::ACTION);
    w.string(e.action.as_str());
    // The model keeps an `oom` entry's free device bytes in `addr`.
    w.key(if e.action == Action::Oom {
        key::DEVICE_FREE
    } else {
        key::ADDR
    });
    w.uint(e.addr);
    w.key(key::SIZE);
    w.uint(e.size);
    w.key(key::STREAM);
    w.uint(e.stream);
    if let Some(t) = e.time_us {
        w.key(key::TIME_US);
        w.int(t);
    }
    w.key(key::COMPILE_CONTEXT);
    w.string(e.compile_context.as_deref().unwrap_or("N/A"));
    w.key(key::USER_METADATA);
    w.string(e.user_metadata.as_deref().unwrap_or(""));
    w.key(key::FRAMES);
    write_frames(w, s, memo, e.stack);
    w.end_dict();
}

fn write_annotation(w: &mut PickleWriter, a: &Annotation) {
    w.begin_dict();
    w.key(key::STAGE);
    w.string(&a.stage);
    w.key(key::NAME);
    w.string(&a.name);
    if let Some(d) = a.device {
        w.key(key::DEVICE);
        int(w, d);
    }
    if let Some(t) = a.time_us {
        w.key(key::TIME_US);
        w.int(t);
    }
    w.end_dict();
}

fn write_settings(w: &mut PickleWriter, settings: &AllocatorSettings) {
    w.begin_dict();
    w.key(key::ALLOC_CONF);
    w.string(settings.alloc_conf.as_deref().unwrap_or(""));
    w.key(key::MAX_SPLIT_SIZE);
    match settings.max_split_size {
        Some(v) => w.uint(v),
        // PyTorch writes "no limit" (SIZE_MAX) through an int64 cast.
        None => w.int(-1),
    }
    w.key(key::GARBAGE_COLLECTION_THRESHOLD);
    w.float(0.0);
    w.key(key::EXPANDABLE_SEGMENTS);
    w.bool(settings.expandable_segments);
    w.key(key::PINNED_NUM_REGISTER_THREADS);
    w.int(1);
    w.key(key::RELEASE_LOCK_ON_CUDAMALLOC);
    w.bool(false);
    w.key(key::PINNED_USE_CUDA_HOST_REGISTER);
    w.bool(false);
    w.key(key::GRAPH_CAPTURE_RECORD_STREAM_REUSE);
    w.bool(false);
    w.key(key::ROUNDUP_POWER2_DIVISIONS);
    w.begin_dict();
    // Keys 1, 2, 4, ... (MiB): interval n is the n-th power of two.
    let divisions = &settings.roundup_power2_divisions;
    for i in 0..divisions.len().max(ROUNDUP_INTERVALS) {
        w.key(&(1u64 << i.min(63)).to_string());
        w.uint(divisions.get(i).copied().unwrap_or(0));
    }
    w.end_dict();
    w.end_dict();
}

/// Write the snapshot to `path` atomically (a temporary file in the same folder, then a rename).
/// A path ending in `.gz` is gzip-compressed; memory_viz wants the plain pickle, `analyze`
/// reads both.
pub fn to_file(s: &Snapshot, path: &Path) -> Result<()> {
    let bytes = to_pickle(s);
    let gz = path.extension().is_some_and(|e| e == "gz");
    crate::atomic_file::write_with(path, |f| {
        if gz {
            let mut enc = flate2::write::GzEncoder::new(f, flate2::Compression::default());
            enc.write_all(&bytes)?;
            enc.finish()?.flush()
        } else {
            f.write_all(&bytes)?;
            f.flush()
        }
    })
    .map_err(Error::io(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    // The snapshot of every shape `collect` writes, as the round-trip tests use it.
    use crate::formats::torch_snapshot::tests::snapshot;

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
        to_file(&snapshot(), &plain).unwrap();
        assert_eq!(std::fs::read(&plain).unwrap(), to_pickle(&snapshot()));
        let gz = dir.path().join("snap.pickle.gz");
        to_file(&snapshot(), &gz).unwrap();
        assert_eq!(&std::fs::read(&gz).unwrap()[..2], &[0x1f, 0x8b]);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2, "no temporary file left behind");
    }

    #[test]
    fn a_failed_write_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir/snap.pickle");
        assert!(to_file(&snapshot(), &missing).is_err());
    }
}
