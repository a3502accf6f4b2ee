//! The caching allocator against PyTorch's rules, on a fake device: rounding, pools, splitting,
//! best fit, coalescing, per-stream pools, peaks, the OOM path and `max_split_size`. The sizes
//! expected here are those PyTorch's `CUDACachingAllocator` gives (and that the real snapshots in
//! `../shared/fixtures/ours/memsnap` show: a 30,720,000-byte request in a 31,457,280-byte
//! segment, 9 MiB blocks in 20 MiB segments).

use crate::common;

use std::collections::HashMap;

use analyze::model::snapshot::Action;
use collect::memory::caching_allocator::{
    round_size, segment_size, AllocatorConfig, Backend, CachingAllocator, Oom, StreamId,
};
use collect::memory::history::Clock;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// A device with a fixed capacity, handing out addresses with gaps between segments (as real
/// virtual addresses have), and logging what it was asked.
struct FakeDevice {
    capacity: u64,
    used: u64,
    next: u64,
    live: HashMap<u64, u64>,
    mallocs: usize,
    frees: usize,
}

impl FakeDevice {
    fn new(capacity: u64) -> FakeDevice {
        FakeDevice {
            capacity,
            used: 0,
            next: 0x7f00_0000_0000,
            live: HashMap::new(),
            mallocs: 0,
            frees: 0,
        }
    }
}

impl Backend for FakeDevice {
    fn malloc(&mut self, bytes: u64) -> Result<u64, Oom> {
        if self.used + bytes > self.capacity {
            return Err(Oom {
                bytes,
                message: "fake device full".into(),
            });
        }
        let ptr = self.next;
        self.next += bytes.div_ceil(2 * MIB) * 2 * MIB + 2 * MIB;
        self.used += bytes;
        self.live.insert(ptr, bytes);
        self.mallocs += 1;
        Ok(ptr)
    }

    fn free(&mut self, ptr: u64) {
        let bytes = self.live.remove(&ptr).expect("free of a live segment");
        self.used -= bytes;
        self.frees += 1;
    }

    fn device_free(&self) -> Option<u64> {
        Some(self.capacity - self.used)
    }
}

fn allocator(capacity: u64) -> CachingAllocator<FakeDevice> {
    CachingAllocator::new(
        FakeDevice::new(capacity),
        AllocatorConfig {
            clock: Clock::from_fn(|| 0),
            ..AllocatorConfig::default()
        },
    )
}

const S0: StreamId = StreamId(0);

#[test]
fn requests_round_to_512_bytes() {
    assert_eq!(round_size(0), 512);
    assert_eq!(round_size(1), 512);
    assert_eq!(round_size(512), 512);
    assert_eq!(round_size(513), 1024);
    assert_eq!(round_size(30_720_000), 30_720_000);
    assert_eq!(round_size(1_572_865), 1_573_376);
}

#[test]
fn segment_sizes_follow_the_pools() {
    // Small pool: 2 MiB segments.
    assert_eq!(segment_size(512), 2 * MIB);
    assert_eq!(segment_size(MIB), 2 * MIB);
    // 1-10 MiB: 20 MiB segments.
    assert_eq!(segment_size(MIB + 512), 20 * MIB);
    assert_eq!(segment_size(9 * MIB), 20 * MIB);
    // From 10 MiB: the request rounded up to 2 MiB.
    assert_eq!(segment_size(10 * MIB), 10 * MIB);
    assert_eq!(segment_size(12 * MIB + 512), 14 * MIB);
    // The real snapshot's 30,720,000-byte block sits in a 31,457,280-byte segment.
    assert_eq!(segment_size(30_720_000), 31_457_280);
}

#[test]
fn small_requests_share_a_segment_and_split() {
    let mut a = allocator(1 << 40);
    let p = a.malloc(1000, S0).unwrap();
    let q = a.malloc(3000, S0).unwrap();
    assert_eq!(q, p + 1024, "second block right after the first");
    assert_eq!(a.memory_allocated(), 1024 + 3072);
    assert_eq!(a.memory_reserved(), 2 * MIB);
    assert_eq!(a.backend().mallocs, 1);
    let snap = a.snapshot();
    let sizes: Vec<u64> = snap.segments[0].blocks.iter().map(|b| b.size).collect();
    assert_eq!(sizes, [1024, 3072, 2 * MIB - 4096]);
}

#[test]
fn large_blocks_split_only_past_1_mib_of_remainder() {
    let mut a = allocator(1 << 40);
    let x = a.malloc(5 * MIB, S0).unwrap();
    assert_eq!(a.memory_reserved(), 20 * MIB);
    // 15 MiB remain; a 14.5 MiB request would leave 0.5 MiB, not worth a split: the whole
    // 15 MiB block is handed out and counted, as PyTorch counts it.
    let y = a.malloc(14 * MIB + 512 * KIB, S0).unwrap();
    assert_eq!(y, x + 5 * MIB);
    assert_eq!(a.memory_allocated(), 20 * MIB);
    assert_eq!(a.stats().requested_bytes.current, 19 * MIB + 512 * KIB);
    assert_eq!(a.backend().mallocs, 1);
}

#[test]
fn best_fit_reuses_the_smallest_block_that_fits() {
    let mut a = allocator(1 << 40);
    // Three blocks with allocated spacers so that frees do not merge.
    let big = a.malloc(6 * KIB, S0).unwrap();
    let _s1 = a.malloc(512, S0).unwrap();
    let small = a.malloc(2 * KIB, S0).unwrap();
    let _s2 = a.malloc(512, S0).unwrap();
    let mid = a.malloc(4 * KIB, S0).unwrap();
    let _s3 = a.malloc(512, S0).unwrap();
    a.free(big).unwrap();
    a.free(small).unwrap();
    a.free(mid).unwrap();
    assert_eq!(a.malloc(3 * KIB, S0).unwrap(), mid);
    assert_eq!(a.malloc(2 * KIB, S0).unwrap(), small);
    assert_eq!(a.malloc(5 * KIB, S0).unwrap(), big);
}

#[test]
fn freed_neighbours_coalesce_and_empty_cache_releases() {
    let mut a = allocator(1 << 40);
    let p = a.malloc(100 * KIB, S0).unwrap();
    let q = a.malloc(100 * KIB, S0).unwrap();
    let r = a.malloc(100 * KIB, S0).unwrap();
    a.free(p).unwrap();
    a.free(r).unwrap();
    // Still split: q sits between two free blocks (r merged with the tail).
    assert_eq!(a.snapshot().segments[0].blocks.len(), 3);
    a.free(q).unwrap();
    let snap = a.snapshot();
    assert_eq!(snap.segments[0].blocks.len(), 1, "one free block again");
    assert_eq!(snap.segments[0].blocks[0].size, 2 * MIB);
    // The merged block serves a request as large as the whole segment.
    let whole = a.malloc(MIB, S0).unwrap();
    assert_eq!(whole, p);
    a.free(whole).unwrap();
    a.empty_cache();
    assert_eq!(a.memory_reserved(), 0);
    assert_eq!(a.backend().frees, 1);
    assert!(a.backend().live.is_empty());
}

#[test]
fn peaks_track_the_highest_point_and_reset() {
    let mut a = allocator(1 << 40);
    let p = a.malloc(3 * MIB, S0).unwrap();
    let q = a.malloc(4 * MIB, S0).unwrap();
    a.free(p).unwrap();
    let r = a.malloc(MIB, S0).unwrap();
    assert_eq!(a.max_memory_allocated(), 7 * MIB);
    assert_eq!(a.memory_allocated(), 5 * MIB);
    assert_eq!(a.max_memory_reserved(), 22 * MIB);
    a.reset_peak_stats();
    assert_eq!(a.max_memory_allocated(), 5 * MIB);
    a.free(q).unwrap();
    a.free(r).unwrap();
    assert_eq!(a.memory_allocated(), 0);
    assert_eq!(a.max_memory_allocated(), 5 * MIB);
}

#[test]
fn out_of_memory_frees_the_cache_then_gives_up() {
    let mut a = allocator(21 * MIB);
    a.start_recording(1000);
    let s = a.malloc(1000, S0).unwrap();
    a.free(s).unwrap();
    // 2 MiB cached + a 20 MiB segment exceed 21 MiB: the cached small segment is released and
    // the allocation retried.
    let x = a.malloc(5 * MIB, S0).unwrap();
    assert_eq!(a.stats().alloc_retries, 1);
    assert_eq!(a.memory_reserved(), 20 * MIB);
    // Nothing left to release for 20 MiB more.
    let err = a.malloc(19 * MIB, S0).unwrap_err();
    assert_eq!(err.rounded, 19 * MIB);
    assert_eq!(err.allocated, 5 * MIB);
    assert_eq!(err.reserved, 20 * MIB);
    assert_eq!(err.device_free, Some(MIB));
    assert_eq!(a.stats().ooms, 1);
    assert!(err.to_string().contains("out of memory"), "{err}");
    let actions: Vec<Action> = a.history().unwrap().entries().map(|e| e.action).collect();
    assert_eq!(
        actions,
        [
            Action::SegmentAlloc,
            Action::Alloc,
            Action::FreeRequested,
            Action::FreeCompleted,
            Action::SegmentFree,
            Action::SegmentAlloc,
            Action::Alloc,
            Action::Oom,
        ]
    );
    let oom = a.history().unwrap().entries().last().unwrap().clone();
    assert_eq!((oom.size, oom.device_free), (19 * MIB, MIB));
    // The allocator still works.
    a.free(x).unwrap();
    assert_eq!(a.malloc(19 * MIB, S0).map(|_| ()), Ok(()));
}

#[test]
fn a_memory_limit_caps_reserved_bytes() {
    let mut a = CachingAllocator::new(
        FakeDevice::new(1 << 40),
        AllocatorConfig {
            memory_limit: Some(40 * MIB),
            ..AllocatorConfig::default()
        },
    );
    // Requests from 10 MiB get segments of their own size: three fit under 40 MiB, not four.
    for _ in 0..3 {
        a.malloc(12 * MIB, S0).unwrap();
    }
    let err = a.malloc(12 * MIB, S0).unwrap_err();
    assert_eq!(err.reserved, 36 * MIB);
    assert!(err.reason.contains("limit"), "{}", err.reason);
}

#[test]
fn streams_have_their_own_pools() {
    let mut a = allocator(1 << 40);
    let s1 = StreamId(0x5555_0001);
    let s2 = StreamId(0x5555_0002);
    let p = a.malloc(MIB, s1).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(MIB, s2).unwrap();
    assert_ne!(
        q, p,
        "a block cached for one stream is not given to another"
    );
    assert_eq!(a.memory_reserved(), 4 * MIB);
    assert_eq!(a.malloc(MIB, s1).unwrap(), p);
    let streams: Vec<u64> = a.snapshot().segments.iter().map(|s| s.stream).collect();
    assert_eq!(streams, [s1.0, s2.0]);
}

#[test]
fn oversize_blocks_are_kept_whole_with_max_split_size() {
    let mut a = CachingAllocator::new(
        FakeDevice::new(1 << 40),
        AllocatorConfig {
            max_split_size: Some(40 * MIB),
            ..AllocatorConfig::default()
        },
    );
    let big = a.malloc(50 * MIB, S0).unwrap();
    a.free(big).unwrap();
    // A request under max_split_size does not get the oversize block...
    let small = a.malloc(5 * MIB, S0).unwrap();
    assert_ne!(small, big);
    assert_eq!(a.memory_reserved(), 70 * MIB);
    // ...an oversize one does, unsplit, if it wastes less than 20 MiB of it.
    let over = a.malloc(42 * MIB, S0).unwrap();
    assert_eq!(over, big);
    assert_eq!(a.memory_allocated(), 5 * MIB + 50 * MIB);
    a.free(over).unwrap();
    let other = a.malloc(30 * MIB, S0).unwrap();
    assert_ne!(other, big);
    assert_eq!(a.snapshot().settings.max_split_size, Some(40 * MIB));

    // An oversize request does not get a block 20 MiB or more larger than itself.
    let mut b = CachingAllocator::new(
        FakeDevice::new(1 << 40),
        AllocatorConfig {
            max_split_size: Some(40 * MIB),
            ..AllocatorConfig::default()
        },
    );
    let huge = b.malloc(70 * MIB, S0).unwrap();
    b.free(huge).unwrap();
    assert_ne!(b.malloc(45 * MIB, S0).unwrap(), huge);
    assert_eq!(b.memory_reserved(), 70 * MIB + 46 * MIB);
}

#[test]
fn with_max_split_size_oversize_blocks_are_released_first_on_oom() {
    let config = AllocatorConfig {
        max_split_size: Some(40 * MIB),
        ..AllocatorConfig::default()
    };
    // One cached oversize block large enough for the request: it alone is released.
    let mut a = CachingAllocator::new(FakeDevice::new(90 * MIB), config.clone());
    let small = a.malloc(MIB, S0).unwrap();
    a.free(small).unwrap();
    let huge = a.malloc(70 * MIB, S0).unwrap();
    a.free(huge).unwrap();
    // 70 MiB is too much to hand out for 45 MiB, and 46 MiB more does not fit beside it.
    a.malloc(45 * MIB, S0).unwrap();
    assert_eq!(
        a.memory_reserved(),
        2 * MIB + 46 * MIB,
        "small segment kept"
    );
    assert_eq!(a.stats().alloc_retries, 0);

    // None large enough: oversize blocks are released largest first until the request's size
    // is reached.
    let mut b = CachingAllocator::new(FakeDevice::new(110 * MIB), config);
    let small = b.malloc(MIB, S0).unwrap();
    b.free(small).unwrap();
    let p = b.malloc(42 * MIB, S0).unwrap();
    let q = b.malloc(44 * MIB, S0).unwrap();
    b.free(p).unwrap();
    b.free(q).unwrap();
    b.malloc(60 * MIB, S0).unwrap();
    assert_eq!(b.memory_reserved(), 2 * MIB + 60 * MIB);
    assert_eq!(b.stats().alloc_retries, 0);
    assert_eq!(b.backend().frees, 2);
}

#[test]
fn freeing_an_unknown_pointer_is_an_error() {
    let mut a = allocator(1 << 40);
    let p = a.malloc(4096, S0).unwrap();
    assert!(a.free(p + 512).is_err());
    a.free(p).unwrap();
    assert!(a.free(p).is_err(), "double free");
}

#[test]
fn recording_logs_block_sizes_times_and_context() {
    let clock = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(100));
    let c = clock.clone();
    let mut a = CachingAllocator::new(
        FakeDevice::new(1 << 40),
        AllocatorConfig {
            clock: Clock::from_fn(move || c.fetch_add(1, std::sync::atomic::Ordering::SeqCst)),
            ..AllocatorConfig::default()
        },
    );
    let before = a.malloc(4096, S0).unwrap();
    a.start_recording(100);
    let ctx = a.context().clone();
    let p = {
        let _phase = ctx.phase("forward");
        let _m = ctx.module("layers.0.attn");
        a.malloc(1000, S0).unwrap()
    };
    a.free(p).unwrap();
    a.free(before).unwrap();
    let entries: Vec<_> = a.history().unwrap().entries().cloned().collect();
    assert_eq!(entries.len(), 5);
    assert_eq!((entries[0].action, entries[0].size), (Action::Alloc, 1024));
    assert_eq!(entries[0].addr, p);
    assert!(entries.windows(2).all(|w| w[0].time_us < w[1].time_us));
    let snap = a.snapshot();
    let stack = &snap.stacks[entries[0].stack.unwrap().0 as usize];
    let names: Vec<&str> = stack
        .iter()
        .map(|f| snap.frames[f.0 as usize].name.as_str())
        .collect();
    assert_eq!(names, ["layers.0.attn", "forward"]);
    // Frees happen outside any frame.
    assert_eq!(entries[1].stack, None);
    assert_eq!(snap.annotations.len(), 2);
}

// ---------------------------------------------------------------------------------------------
// PyTorch's own allocation sequences.

/// For each snapshot: its segments (address, size, blocks as [size, state]) and the trace's
/// `alloc`/`free_completed` entries as [action, address, requested size].
const EXTRACT: &str = r#"
import gzip, json, pickle, sys
out = {}
for path in sys.argv[1:]:
    s = pickle.load(gzip.open(path))
    out[path.split('/')[-1]] = {
        'segments': [[seg['total_size'], [[b['size'], b['state']] for b in seg['blocks']]]
                     for seg in sorted(s['segments'], key=lambda x: x['address'])],
        'events': [[e['action'], e['addr'], e['size']] for e in s['device_traces'][0]
                   if e['action'] in ('alloc', 'free_completed')],
    }
print(json.dumps(out))
"#;

/// Rebuild a snapshot's cache in a fresh allocator: each segment created at its size, its
/// blocks allocated in address order (free ones as placeholders, in pieces of at most 1 MiB in
/// small segments so they stay in the small pool), then the placeholders freed.
fn rebuild(a: &mut CachingAllocator<FakeDevice>, segments: &serde_json::Value) {
    let mut placeholders = Vec::new();
    for seg in segments.as_array().unwrap() {
        let total = seg[0].as_u64().unwrap();
        let small = total == 2 * MIB;
        let creator = a.malloc(if small { MIB } else { total }, S0).unwrap();
        a.free(creator).unwrap();
        let mut expect = creator;
        for b in seg[1].as_array().unwrap() {
            let size = b[0].as_u64().unwrap();
            let free = b[1] != "active_allocated";
            let mut left = size;
            let mut first = None;
            while left > 0 {
                let piece = if small && left > MIB {
                    // Keep the last piece at least 512 bytes.
                    if left - MIB < 512 {
                        left - 512
                    } else {
                        MIB
                    }
                } else {
                    left
                };
                let p = a.malloc(piece, S0).unwrap();
                first.get_or_insert(p);
                if free {
                    placeholders.push(p);
                }
                left -= piece;
            }
            assert_eq!(first, Some(expect), "block laid out as in the snapshot");
            expect += size;
        }
    }
    for p in placeholders {
        a.free(p).unwrap();
    }
}

/// Blocks of every segment as (offset in segment, size, allocated), for comparing layouts.
fn layout(a: &CachingAllocator<FakeDevice>) -> Vec<Vec<(u64, u64, bool)>> {
    a.snapshot()
        .segments
        .iter()
        .map(|s| {
            s.blocks
                .iter()
                .map(|b| {
                    (
                        b.address - s.address,
                        b.size,
                        b.state == analyze::model::snapshot::BlockState::ActiveAllocated,
                    )
                })
                .collect()
        })
        .collect()
}

/// PyTorch's recorded step, replayed from PyTorch's cache state, reaches exactly the
/// `torch.cuda.max_memory_allocated()` measured after it (peaks.jsonl), and leaves the cache as
/// PyTorch left it.
#[test]
#[cfg_attr(
    no_shared_ours,
    ignore = "needs ../shared/fixtures/ours beside the checkout"
)]
fn pytorch_steps_replay_to_pytorchs_measured_peak() {
    let Some(dir) = common::shared("ours/memsnap") else {
        return;
    };
    let Ok(check) = std::process::Command::new("python3")
        .arg("--version")
        .output()
    else {
        eprintln!("skipped: python3 is not available to read the snapshots");
        return;
    };
    assert!(check.status.success());
    let files = [
        "memsnap_small_ctx128_train_fp32.pickle.gz",
        "memsnap_small_ctx128_train_bf16.pickle.gz",
        "memsnap_medium_ctx128_forward_fp32.pickle.gz",
    ];
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(EXTRACT)
        .args(files.iter().map(|f| dir.join(f)))
        .output()
        .unwrap();
    common::assert_success(&out);
    let snaps: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let peaks: HashMap<String, u64> = common::measured_peaks(&dir.join("peaks.jsonl"))
        .into_iter()
        .collect();
    for f in files {
        let snap = &snaps[f];
        let mut a = allocator(1 << 50);
        rebuild(&mut a, &snap["segments"]);
        let before = layout(&a);
        a.reset_peak_stats();
        let mut ours = HashMap::new();
        for e in snap["events"].as_array().unwrap() {
            let addr = e[1].as_u64().unwrap();
            if e[0] == "alloc" {
                ours.insert(addr, a.malloc(e[2].as_u64().unwrap(), S0).unwrap());
            } else {
                a.free(ours.remove(&addr).unwrap()).unwrap();
            }
        }
        assert_eq!(a.max_memory_allocated(), peaks[f], "{f}");
        assert_eq!(
            layout(&a),
            before,
            "{f}: the step leaves the cache as it found it"
        );
    }
}
