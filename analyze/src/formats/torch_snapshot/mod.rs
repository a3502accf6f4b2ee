//! PyTorch CUDA memory snapshots (the dict `torch.cuda.memory._snapshot()` returns, pickled by
//! `_dump_snapshot`), defined once for both sides: [`read`] loads what PyTorch 2.0 to 2.11
//! wrote into the snapshot model ([`crate::model::snapshot::Snapshot`]), and
//! [`write`](mod@write) writes that model as PyTorch 2.11 does, which is how `collect` saves its
//! allocator's history. Both go through the plain-data [`super::pickle`] codec.
//!
//! This module holds what both name: the dictionary keys ([`key`]) and the frame files that mark
//! `collect`'s phase and module frames. The words of the vocabulary (actions, block states,
//! segment kinds, annotation stages) are the model's enums, each with its spelling in the file
//! (`as_str`).

mod ahead;
pub mod read;
pub mod write;

/// Dictionary keys, as PyTorch spells them.
pub mod key {
    // The snapshot.
    pub const SEGMENTS: &str = "segments";
    pub const DEVICE_TRACES: &str = "device_traces";
    pub const ALLOCATOR_SETTINGS: &str = "allocator_settings";
    pub const EXTERNAL_ANNOTATIONS: &str = "external_annotations";
    // A segment (and the parts a block or an entry shares with it).
    pub const DEVICE: &str = "device";
    pub const ADDRESS: &str = "address";
    pub const TOTAL_SIZE: &str = "total_size";
    pub const ALLOCATED_SIZE: &str = "allocated_size";
    pub const ACTIVE_SIZE: &str = "active_size";
    pub const REQUESTED_SIZE: &str = "requested_size";
    pub const STREAM: &str = "stream";
    pub const SEGMENT_TYPE: &str = "segment_type";
    pub const SEGMENT_POOL_ID: &str = "segment_pool_id";
    pub const IS_EXPANDABLE: &str = "is_expandable";
    pub const FRAMES: &str = "frames";
    pub const BLOCKS: &str = "blocks";
    // A block.
    pub const SIZE: &str = "size";
    pub const STATE: &str = "state";
    /// PyTorch 2.0 kept a block's stack and requested size in `history[0]`.
    pub const HISTORY: &str = "history";
    /// The requested size in a PyTorch 2.0 `history` entry.
    pub const REAL_SIZE: &str = "real_size";
    // A trace entry.
    pub const ACTION: &str = "action";
    pub const ADDR: &str = "addr";
    /// What an `oom` entry has in place of `addr`: the device's free bytes.
    pub const DEVICE_FREE: &str = "device_free";
    pub const TIME_US: &str = "time_us";
    pub const COMPILE_CONTEXT: &str = "compile_context";
    pub const USER_METADATA: &str = "user_metadata";
    // A frame.
    pub const NAME: &str = "name";
    pub const FILENAME: &str = "filename";
    pub const LINE: &str = "line";
    // The allocator settings.
    pub const ALLOC_CONF: &str = "PYTORCH_CUDA_ALLOC_CONF";
    pub const MAX_SPLIT_SIZE: &str = "max_split_size";
    pub const GARBAGE_COLLECTION_THRESHOLD: &str = "garbage_collection_threshold";
    pub const EXPANDABLE_SEGMENTS: &str = "expandable_segments";
    pub const PINNED_NUM_REGISTER_THREADS: &str = "pinned_num_register_threads";
    pub const RELEASE_LOCK_ON_CUDAMALLOC: &str = "release_lock_on_cudamalloc";
    pub const PINNED_USE_CUDA_HOST_REGISTER: &str = "pinned_use_cuda_host_register";
    pub const GRAPH_CAPTURE_RECORD_STREAM_REUSE: &str = "graph_capture_record_stream_reuse";
    pub const ROUNDUP_POWER2_DIVISIONS: &str = "roundup_power2_divisions";
    // An annotation.
    pub const STAGE: &str = "stage";
}

/// The `filename` of `collect`'s phase frames (`forward`, `backward`, `optimizer`, `step_3`).
/// memory_viz prints a frame as `filename:line:name` keeping the part after the last `/`, so
/// these read `phase:0:forward` there; the memory analyses find the phases by this file.
pub const PHASE_FRAME_FILE: &str = "collect/phase";

/// The `filename` of `collect`'s module frames (`layers.3.attn.scores`).
pub const MODULE_FRAME_FILE: &str = "collect/module";

/// `PYTORCH_CUDA_ALLOC_CONF`'s `roundup_power2_divisions` intervals PyTorch writes: one per power
/// of two from 1 MiB to 32 GiB (keys `1` to `32768`).
pub const ROUNDUP_INTERVALS: usize = 16;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::model::snapshot::{
        Action, AllocatorSettings, Annotation, Block, BlockState, DeviceTrace, Frame, Frames,
        Segment, SegmentKind, Snapshot, SnapshotFormat, StackId, Stage, TraceEntry,
    };

    /// A snapshot of every shape `collect` writes: a segment with an allocated and a free block,
    /// an allocation, a failed allocation, a phase annotation and the default settings. Ids are
    /// numbered in the order a reader meets them.
    pub(super) fn snapshot() -> Snapshot {
        let base = 1u64 << 40;
        Snapshot {
            segments: vec![Segment {
                device: 0,
                address: base,
                total_size: 2 << 20,
                stream: 0,
                kind: SegmentKind::Small,
                is_expandable: false,
                stack: StackId(1),
                blocks: vec![
                    Block {
                        address: base,
                        size: 1024,
                        requested_size: 1000,
                        state: BlockState::ActiveAllocated,
                        stack: StackId(1),
                    },
                    Block {
                        address: base + 1024,
                        size: (2 << 20) - 1024,
                        requested_size: 0,
                        state: BlockState::Inactive,
                        stack: StackId::EMPTY,
                    },
                ],
            }],
            traces: vec![DeviceTrace::from(vec![
                TraceEntry {
                    action: Action::Alloc,
                    addr: base,
                    size: 1024,
                    stream: 0,
                    time_us: Some(5),
                    stack: StackId(1),
                    compile_context: None,
                    user_metadata: None,
                },
                TraceEntry {
                    action: Action::Oom,
                    addr: 80 << 30,
                    size: 1 << 30,
                    stream: 0,
                    time_us: Some(6),
                    stack: StackId::EMPTY,
                    compile_context: None,
                    user_metadata: None,
                },
            ])],
            annotations: vec![Annotation {
                device: Some(0),
                stage: Stage::Start.as_str().to_owned(),
                name: "forward".into(),
                time_us: Some(1),
            }],
            settings: AllocatorSettings {
                alloc_conf: None,
                max_split_size: None,
                expandable_segments: false,
                roundup_power2_divisions: vec![0; ROUNDUP_INTERVALS],
            },
            frames: Frames {
                frames: vec![
                    Frame {
                        name: "layers.0.attn".into(),
                        filename: MODULE_FRAME_FILE.into(),
                        line: 0,
                    },
                    Frame {
                        name: "forward".into(),
                        filename: PHASE_FRAME_FILE.into(),
                        line: 0,
                    },
                ],
                stacks: vec![vec![], vec![0, 1]],
            },
            format: SnapshotFormat {
                layout: "dict".into(),
                has_trace: true,
                has_time: true,
                has_allocator_settings: true,
                has_annotations: true,
                other_keys: Vec::new(),
            },
        }
    }

    #[test]
    fn what_the_writer_writes_the_reader_reads() {
        let s = snapshot();
        let bytes = write::to_pickle(&s);
        let back = read::from_bytes(Path::new("t.pickle"), &bytes).unwrap();
        assert_eq!(back, s);
        assert_eq!(write::to_pickle(&back), bytes);
    }

    /// The settings a snapshot of PyTorch 2.11 carries, and a snapshot's own limit and
    /// configuration, survive the trip.
    #[test]
    fn settings_round_trip() {
        let mut s = snapshot();
        s.settings = AllocatorSettings {
            alloc_conf: Some("max_split_size_mb:40".into()),
            max_split_size: Some(40 << 20),
            expandable_segments: false,
            roundup_power2_divisions: (0..ROUNDUP_INTERVALS as u64).collect(),
        };
        let back = read::from_bytes(Path::new("t.pickle"), &write::to_pickle(&s)).unwrap();
        assert_eq!(back.settings, s.settings);
    }
}
