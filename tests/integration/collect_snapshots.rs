//! `collect`'s memory snapshots read back by the readers that matter: a recorded allocation
//! sequence written as a memory snapshot through Python's `pickle` with the checks
//! `torch.cuda._memory_viz` and memory_viz rely on, and through `analyze memory`. Real snapshots
//! from `../shared/fixtures/ours` give the shapes to match; tests that need them or `python3` say
//! so and skip when they are absent.

use crate::common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;

use collect::memory::caching_allocator::{
    AllocatorConfig, Backend, CachingAllocator, Oom, StreamId,
};
use collect::memory::history::Clock;
use collect::memory::snapshot as memory_snapshot;

const MIB: u64 = 1 << 20;

/// `python3`, or `None` (with a message) when it cannot be run.
fn python3() -> Option<Command> {
    match Command::new("python3").arg("--version").output() {
        Ok(o) if o.status.success() => Some(Command::new("python3")),
        _ => {
            eprintln!("skipped: python3 is not available to load the pickle");
            None
        }
    }
}

/// A device that never runs out, with gaps between segments.
struct Device {
    next: u64,
}

impl Backend for Device {
    fn malloc(&mut self, bytes: u64) -> Result<u64, Oom> {
        let p = self.next;
        self.next += bytes.div_ceil(2 * MIB) * 2 * MIB + 2 * MIB;
        Ok(p)
    }
    fn free(&mut self, _ptr: u64) {}
    fn device_free(&self) -> Option<u64> {
        Some(80 << 30)
    }
}

/// A training step's worth of allocations with phases and module frames: weights, activations
/// kept for backward, temporaries, gradients, optimizer state, one failed allocation and an
/// `empty_cache`.
fn recorded_allocator() -> CachingAllocator<Device> {
    let t = Arc::new(std::sync::atomic::AtomicI64::new(1_700_000_000_000_000));
    let tc = t.clone();
    let mut a = CachingAllocator::new(
        Device {
            next: 0x7f00_0000_0000,
        },
        AllocatorConfig {
            memory_limit: Some(8 << 30),
            clock: Clock::from_fn(move || tc.fetch_add(3, std::sync::atomic::Ordering::Relaxed)),
            ..AllocatorConfig::default()
        },
    );
    a.start_recording(1_000_000);
    let ctx = a.context().clone();
    let s = StreamId(0);
    let d = 768u64;
    let tokens = 4 * 128u64;
    let weights: Vec<u64> = {
        let _g = ctx.phase("init");
        (0..4)
            .flat_map(|l| {
                let _m = ctx.module(&format!("layers.{l}"));
                vec![
                    a.malloc(d * d * 4 * 3, s).unwrap(),
                    a.malloc(d * 3072 * 4, s).unwrap(),
                    a.malloc(d * 4, s).unwrap(),
                ]
            })
            .collect()
    };
    let _step = ctx.phase("step_0");
    let mut saved = Vec::new();
    {
        let _f = ctx.phase("forward");
        for l in 0..4 {
            let _m = ctx.module(&format!("layers.{l}"));
            let x = a.malloc(tokens * d * 4, s).unwrap();
            let _attn = ctx.module("attn");
            let scores = {
                let _sc = ctx.module("scores");
                a.malloc(4 * 12 * 128 * 128 * 4, s).unwrap()
            };
            let tmp = a.malloc(tokens * 3 * d * 4 + 100, s).unwrap();
            a.free(tmp).unwrap();
            saved.push(x);
            saved.push(scores);
        }
    }
    let grads: Vec<u64> = {
        let _b = ctx.phase("backward");
        let mut grads = Vec::new();
        for (i, l) in (0..4).rev().enumerate() {
            let _m = ctx.module(&format!("layers.{l}"));
            let g = a.malloc(tokens * d * 4, s).unwrap();
            grads.push(a.malloc(d * d * 4 * 3, s).unwrap());
            a.free(g).unwrap();
            a.free(saved.pop().unwrap()).unwrap();
            a.free(saved.pop().unwrap()).unwrap();
            if i == 1 {
                // Asks for more than the limit: an `oom` entry, then the step goes on.
                assert!(a.malloc(9 << 30, s).is_err());
            }
        }
        grads
    };
    {
        let _o = ctx.phase("optimizer");
        let state: Vec<u64> = weights
            .iter()
            .map(|_| a.malloc(d * d * 4, s).unwrap())
            .collect();
        for g in grads {
            a.free(g).unwrap();
        }
        for p in state.into_iter().step_by(2) {
            a.free(p).unwrap();
        }
        // A workspace larger than any cached block: a segment of its own, released below.
        let workspace = a.malloc(100 * MIB, s).unwrap();
        a.free(workspace).unwrap();
    }
    a.empty_cache();
    a
}

/// Loads a snapshot, compares its shape with a real one and runs the checks memory_viz's code
/// relies on (written anew, after torch/cuda/_memory_viz.py `segsum`/`trace` and MemoryViz.js
/// `annotate_snapshot`/`process_alloc_data`/`MemoryView`). Prints one JSON document.
const CHECK_SNAPSHOT: &str = r#"
import gzip, json, pickle, sys

def load(path):
    with open(path, 'rb') as f:
        gz = f.read(2) == b'\x1f\x8b'
    with (gzip.open if gz else open)(path, 'rb') as f:
        return pickle.load(f)

def tname(v):
    return type(v).__name__

def shape(s):
    out = {'top': [[k, tname(v)] for k, v in s.items()]}
    segs = s['segments']
    out['segment'] = sorted({(k, tname(v)) for seg in segs for k, v in seg.items()})
    out['segment_order'] = sorted({tuple(seg.keys()) for seg in segs})
    out['segment_pool_id'] = sorted({tuple(tname(x) for x in seg['segment_pool_id']) for seg in segs})
    blocks = [b for seg in segs for b in seg['blocks']]
    out['block'] = sorted({(k, tname(v)) for b in blocks for k, v in b.items()})
    out['block_order'] = sorted({tuple(b.keys()) for b in blocks})
    entries = [e for t in s['device_traces'] for e in t]
    out['entry'] = {}
    for e in entries:
        out['entry'].setdefault(e['action'], set()).update((k, tname(v)) for k, v in e.items())
    out['entry'] = {a: sorted(v) for a, v in out['entry'].items()}
    out['entry_order'] = {e['action']: list(e.keys()) for e in entries}
    frames = [f for e in entries for f in e['frames']] + [f for b in blocks for f in b['frames']]
    out['frame'] = sorted({(k, tname(v)) for f in frames for k, v in f.items()})
    out['settings'] = sorted((k, tname(v)) for k, v in s['allocator_settings'].items())
    out['annotation'] = sorted({(k, tname(v)) for a in s['external_annotations'] for k, v in a.items()})
    return out

def checks(s, complete):
    """`complete`: the trace was recorded from the allocator's start, so it must replay to the
    segments state exactly."""
    bad = []
    for seg in s['segments']:
        off = seg['address']
        for b in seg['blocks']:
            if b['address'] != off: bad.append('block not contiguous at %x' % off)
            off += b['size']
            if b['state'] not in ('active_allocated', 'active_pending_free', 'inactive'):
                bad.append('state ' + b['state'])
            if b['state'] == 'active_allocated' and b['requested_size'] > b['size']:
                bad.append('requested over size')
        if off - seg['address'] != seg['total_size']: bad.append('blocks do not fill segment')
        act = [b for b in seg['blocks'] if b['state'] == 'active_allocated']
        if sum(b['size'] for b in act) != seg['allocated_size']: bad.append('allocated_size')
        if sum(b['requested_size'] for b in act) != seg['requested_size']: bad.append('requested_size')
        if seg['segment_type'] not in ('small', 'large'): bad.append('segment_type')
        # segsum: internal + external free + allocated == total
        internal = sum(b['size'] - b['requested_size'] for b in act)
        external = sum(b['size'] for b in seg['blocks'] if b['state'] != 'active_allocated')
        if internal + external + seg['requested_size'] != seg['total_size']: bad.append('segsum')
    known = {'alloc', 'free_requested', 'free_completed', 'segment_alloc', 'segment_free', 'oom'}
    for d, trace in enumerate(s['device_traces']):
        live, segs, prev = {}, {}, None
        for e in trace:
            a = e['action']
            if a not in known: bad.append('action ' + a)
            for f in e['frames']:
                # _frame_fmt and MemoryViz's frameFilter
                '%s:%d:%s' % (f['filename'].split('/')[-1], f['line'], f['name'])
                f['name'].find('x'); f['filename'].find('x')
            if a == 'oom':
                e['device_free'] + e['size']
                continue
            addr, size = e['addr'], e['size']
            if a == 'segment_alloc':
                segs[addr] = size
            elif a == 'segment_free':
                if segs.pop(addr, None) != size: bad.append('segment_free of unknown segment')
            elif a == 'alloc':
                if addr in live: bad.append('alloc of live address')
                if complete and not any(s0 <= addr < s0 + n for s0, n in segs.items()):
                    bad.append('alloc outside segments')
                live[addr] = size
            elif a == 'free_requested':
                if complete and live.get(addr) != size: bad.append('free_requested mismatch')
            elif a == 'free_completed':
                if prev is None or prev['action'] != 'free_requested' or prev['addr'] != addr:
                    bad.append('free_completed not after its free_requested')
                if live.pop(addr, size) != size: bad.append('free_completed mismatch')
            prev = e
        if complete:
            final = {b['address']: b['size'] for seg in s['segments'] if seg['device'] == d
                     for b in seg['blocks'] if b['state'] == 'active_allocated'}
            if live != final: bad.append('trace does not end in the segments state')
            if segs != {seg['address']: seg['total_size'] for seg in s['segments']}:
                bad.append('segment events do not end in the segments')
    open_ = {}
    for a in s['external_annotations']:
        open_[a['name']] = open_.get(a['name'], 0) + (1 if a['stage'] == 'START' else -1)
    if any(open_.values()): bad.append('unbalanced annotations')
    return bad

ours = load(sys.argv[1])
real = load(sys.argv[2]) if len(sys.argv) > 2 else None
entries = ours['device_traces'][-1]
shared = 0
for e1, e2 in zip(entries, entries[1:]):
    if e1['frames'] and e1['frames'] == e2['frames'] and e1['frames'][0] is e2['frames'][0]:
        shared += 1
print(json.dumps({
    'shape': shape(ours),
    'real_shape': shape(real) if real else None,
    'failures': checks(ours, True),
    'real_failures': checks(real, False) if real else [],
    'trace': [[e['action'], e.get('addr', 0), e['size']] for e in entries],
    'frames_of_first_alloc': [[f['name'], f['filename'], f['line']] for e in entries
                              if e['action'] == 'alloc' for f in e['frames']][:3],
    'shared_frame_dicts': shared,
    'annotations': [[a['stage'], a['name']] for a in ours['external_annotations']],
    'devices': len(ours['device_traces']),
}, default=list))
"#;

#[test]
fn snapshot_loads_in_python_and_replays_to_the_peak() {
    let Some(mut py) = python3() else { return };
    let a = recorded_allocator();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.pickle");
    memory_snapshot::write(&a.snapshot(), &path).unwrap();
    let real = common::shared("ours/memsnap/memsnap_small_ctx128_train_fp32.pickle.gz");
    py.arg("-c").arg(CHECK_SNAPSHOT).arg(&path);
    if let Some(r) = &real {
        py.arg(r);
    }
    let out = py.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["failures"], serde_json::json!([]), "memory_viz checks");

    // The trace replays, by summing alloc minus free_completed, to the allocator's own peak and
    // final value; segment events replay to the reserved peak.
    let (mut cur, mut peak, mut seg, mut seg_peak) = (0i64, 0i64, 0i64, 0i64);
    let mut actions: HashMap<String, usize> = HashMap::new();
    for e in v["trace"].as_array().unwrap() {
        let action = e[0].as_str().unwrap();
        let size = e[2].as_i64().unwrap();
        *actions.entry(action.to_owned()).or_default() += 1;
        match action {
            "alloc" => {
                cur += size;
                peak = peak.max(cur);
            }
            "free_completed" => cur -= size,
            "segment_alloc" => {
                seg += size;
                seg_peak = seg_peak.max(seg);
            }
            "segment_free" => seg -= size,
            _ => {}
        }
    }
    assert_eq!(peak as u64, a.max_memory_allocated());
    assert_eq!(cur as u64, a.memory_allocated());
    assert_eq!(seg_peak as u64, a.max_memory_reserved());
    assert_eq!(seg as u64, a.memory_reserved());
    assert!(a.max_memory_allocated() > a.memory_allocated());
    for action in [
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
    ] {
        assert!(
            actions.get(action).copied().unwrap_or(0) > 0,
            "{action}: {actions:?}"
        );
    }
    assert_eq!(actions["oom"], 1);
    assert_eq!(actions["free_requested"], actions["free_completed"]);

    // Our frames, innermost first; repeated stacks share their frame dicts.
    assert_eq!(
        v["frames_of_first_alloc"],
        serde_json::json!([
            ["layers.0", "collect/module", 0],
            ["init", "collect/phase", 0],
            ["layers.0", "collect/module", 0]
        ])
    );
    assert!(v["shared_frame_dicts"].as_u64().unwrap() > 10);
    let phases: Vec<String> = v["annotations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{} {}", a[0].as_str().unwrap(), a[1].as_str().unwrap()))
        .collect();
    assert_eq!(
        phases,
        [
            "START init",
            "END init",
            "START step_0",
            "START forward",
            "END forward",
            "START backward",
            "END backward",
            "START optimizer",
            "END optimizer",
            "END step_0"
        ]
    );
    assert_eq!(v["devices"], 1);

    // Same keys, key order and Python types as the snapshot PyTorch 2.11 wrote.
    if real.is_some() {
        assert_eq!(v["real_failures"], serde_json::json!([]));
        let (ours, real) = (&v["shape"], &v["real_shape"]);
        for k in [
            "top",
            "segment",
            "segment_order",
            "segment_pool_id",
            "block",
            "block_order",
            "frame",
            "settings",
        ] {
            assert_eq!(ours[k], real[k], "{k}");
        }
        for action in ["alloc", "free_requested", "free_completed"] {
            assert_eq!(ours["entry"][action], real["entry"][action], "{action}");
            assert_eq!(
                ours["entry_order"][action], real["entry_order"][action],
                "{action}"
            );
        }
        // Segment events have the keys of block events; `oom` has `device_free` for `addr`, as
        // PyTorch's memory_snapshot.cpp writes it.
        assert_eq!(ours["entry"]["segment_alloc"], real["entry"]["alloc"]);
        let oom_keys: Vec<&str> = ours["entry_order"]["oom"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        assert_eq!(
            oom_keys,
            [
                "action",
                "device_free",
                "size",
                "stream",
                "time_us",
                "compile_context",
                "user_metadata",
                "frames"
            ]
        );
        assert_eq!(ours["annotation"], real["annotation"]);
    }
}

/// The snapshot written by the library, read back by `analyze`'s reader and memory analyses:
/// the same peak, end state, entries, phases and module-path categories as the allocator that
/// recorded it (acceptance 4 of the tracing issue, the memory half).
#[test]
fn snapshot_reads_back_through_analyze_memory() {
    use analyze::memory::categories::{Rules, ATTENTION};
    use analyze::memory::phases::Phase;
    use analyze::memory::summary::{analyze as analyze_memory, MemoryOptions};

    let a = recorded_allocator();
    let snap = a.snapshot();
    let dir = tempfile::tempdir().unwrap();
    for name in ["snapshot.pickle", "snapshot.pickle.gz"] {
        let path = dir.path().join(name);
        memory_snapshot::write(&snap, &path).unwrap();
        let loaded = analyze::formats::load_snapshot(&path).unwrap();
        assert_eq!(loaded.segments.len(), snap.segments.len(), "{name}");
        assert_eq!(loaded.trace(0).len(), snap.trace.len(), "{name}");
        let an = analyze_memory(&loaded, &Rules::builtin(), &MemoryOptions::default());
        let r = &an.report;
        assert_eq!(r.peak_allocated_bytes, a.max_memory_allocated(), "{name}");
        assert_eq!(r.peak_reserved_bytes, a.max_memory_reserved(), "{name}");
        assert_eq!(r.end_allocated_bytes, a.memory_allocated(), "{name}");
        assert_eq!(r.end_reserved_bytes, a.memory_reserved(), "{name}");
        // Recorded from the allocator's first event: nothing was live before.
        assert_eq!(r.start_allocated_bytes, 0, "{name}");
        assert_eq!(r.trace_entries, snap.trace.len(), "{name}");
        assert_eq!(r.oom_events, 1, "{name}");
        assert_eq!(r.checks.unmatched_frees, 0, "{name}");
        assert_eq!(r.checks.end_mismatch_bytes, 0, "{name}");
        // The phase frames give the phases, in order.
        let phases: Vec<Phase> = r.phases.iter().map(|p| p.phase).collect();
        assert_eq!(
            phases,
            [Phase::Forward, Phase::Backward, Phase::Optimizer],
            "{name}"
        );
        let annotated: Vec<Phase> = an.annotated_phases.iter().map(|p| p.phase).collect();
        assert_eq!(
            annotated,
            [Phase::Forward, Phase::Backward, Phase::Optimizer],
            "{name}"
        );
        // The four `layers.N.attn.scores` allocations, and only they, are attention.
        let attention = an.categories.iter().filter(|c| *c == ATTENTION).count();
        assert_eq!(attention, 4, "{name}: {:?}", an.categories);
    }
}
