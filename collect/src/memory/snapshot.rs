//! The caching allocator's state and history as a PyTorch memory snapshot: [`to_snapshot`] turns
//! an [`AllocatorState`] into the snapshot model ([`Snapshot`]), which
//! [`analyze::formats::torch_snapshot::write`] writes as PyTorch 2.11 does, so that memory_viz
//! and `analyze memory` read it like a snapshot PyTorch wrote.
//!
//! The conversion is where the two conventions meet: the allocator numbers its stacks from 0 and
//! says `None` for no frames, the snapshot keeps the empty stack at 0; the allocator keeps an
//! `oom` entry's free device bytes apart, the snapshot keeps them in `addr`; the trace is that of
//! one device, the snapshot has one list per device up to it. Nothing here allocates or records.

use std::path::Path;

use analyze::formats::torch_snapshot::write;
use analyze::model::snapshot::{
    Action, Annotation, Block, DeviceTrace, Frames, Segment, Snapshot, StackId, TraceEntry,
};

use crate::error::{Error, Result};
use crate::memory::caching_allocator::AllocatorState;

/// A stack of the allocator's tables as a stack of the snapshot's, whose stack 0 is the empty one.
fn stack(id: Option<StackId>) -> StackId {
    id.map_or(StackId::EMPTY, |s| StackId(s.0 + 1))
}

/// The snapshot model of an allocator's state and history.
pub fn to_snapshot(state: &AllocatorState) -> Snapshot {
    let segments = state
        .segments
        .iter()
        .map(|seg| Segment {
            device: i64::from(seg.device),
            address: seg.address,
            total_size: seg.total_size,
            stream: seg.stream,
            kind: seg.segment_type,
            is_expandable: false,
            stack: stack(seg.stack),
            blocks: seg
                .blocks
                .iter()
                .map(|b| Block {
                    address: b.address,
                    size: b.size,
                    requested_size: b.requested_size,
                    state: b.state,
                    stack: stack(b.stack),
                })
                .collect(),
        })
        .collect();
    let trace = state
        .trace
        .iter()
        .map(|e| TraceEntry {
            action: e.action,
            addr: if e.action == Action::Oom {
                e.device_free
            } else {
                e.addr
            },
            size: e.size,
            stream: e.stream,
            time_us: Some(e.time_us),
            stack: stack(e.stack),
            compile_context: None,
            user_metadata: None,
        })
        .collect();
    let mut traces = vec![DeviceTrace::default(); state.device as usize];
    traces.push(trace);
    let mut stacks = Vec::with_capacity(state.stacks.len() + 1);
    stacks.push(Vec::new());
    stacks.extend(state.stacks.iter().map(|s| s.iter().map(|f| f.0).collect()));
    Snapshot {
        segments,
        traces,
        annotations: state
            .annotations
            .iter()
            .map(|a| Annotation {
                device: Some(i64::from(a.device)),
                stage: a.stage.as_str().to_owned(),
                name: a.name.clone(),
                time_us: Some(a.time_us),
            })
            .collect(),
        settings: state.settings.clone(),
        frames: Frames {
            frames: state.frames.clone(),
            stacks,
        },
        ..Snapshot::default()
    }
}

/// Write the allocator's state as a snapshot to `path` (`.gz`: gzip-compressed), atomically.
pub fn write(state: &AllocatorState, path: &Path) -> Result<()> {
    write::to_file(&to_snapshot(state), path).map_err(Error::Snapshot)
}
