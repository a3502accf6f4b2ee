//! Fuzzing the snapshot reader and the memory analyses with snapshots built field by field, where
//! the pickle fuzzer ([`crate::fuzz_pickle`]) changes the bytes of real ones: every pickle here is
//! well formed, so the cases reach the snapshot's structure and the analyses rather than the
//! pickle reader's refusals. A case writes `segments` (blocks inside them, frames shared through
//! the memo as PyTorch's pickles share them), `device_traces` (allocations that pair with their
//! frees, segments that come and go, odd actions), `allocator_settings` and
//! `external_annotations`, and at each field, now and then: leaves it out, writes a value of
//! another type (a string, a list, a dict, None, a float, a bool), a number that breaks
//! arithmetic (negative, zero, the extremes of 64 bits), an unknown spelling of a state or an
//! action, the same key twice, a frame dict where a block belongs; lists empty, duplicated, long,
//! or nested far deeper than any snapshot. Every case must load and analyse, or be refused with
//! one error line. Cases and seeds: [`crate::fuzz_engine`].

use std::path::Path;

use analyze::formats::pickle::write::{MemoId, PickleWriter};
use analyze::formats::torch_snapshot::{self, key, MODULE_FRAME_FILE, PHASE_FRAME_FILE};
use analyze::memory::categories::Rules;
use analyze::memory::summary::{analyze, MemoryOptions};
use analyze::memory::tables::report_document;
use analyze::model::snapshot::{Action, BlockState};
use analyze::render::{render_to_string, Format};

use crate::fuzz_engine::{outcome, Campaign, Outcome, Rng};

/// Every action and block state a snapshot spells, with spellings no reader knows.
const ACTIONS: &[Action] = &[
    Action::Alloc,
    Action::FreeRequested,
    Action::FreeCompleted,
    Action::SegmentAlloc,
    Action::SegmentFree,
    Action::SegmentMap,
    Action::SegmentUnmap,
    Action::Snapshot,
    Action::Oom,
];
const STATES: &[BlockState] = &[
    BlockState::ActiveAllocated,
    BlockState::ActivePendingFree,
    BlockState::Inactive,
];
const ODD_TEXTS: &[&str] = &[
    "",
    "other",
    "ALLOC",
    "active_awaiting_free",
    "\u{0}\u{7f}",
    "é",
];

/// What one case writes: its random stream, its writer, the frame dicts already memoized.
struct Gen<'a> {
    rng: &'a mut Rng,
    w: PickleWriter,
    frames: Vec<MemoId>,
    /// How odd the case is: a field goes wrong once in this many.
    odd: u64,
}

impl Gen<'_> {
    /// A field: mostly `good`, now and then left out, written twice or of another kind.
    fn field(&mut self, k: &str, good: impl Fn(&mut Gen)) {
        if self.rng.one_in(self.odd) {
            match self.rng.below(4) {
                0 => {}
                1 => {
                    self.w.key(k);
                    self.wrong();
                }
                2 => {
                    self.w.key(k);
                    good(self);
                    self.w.key(k);
                    good(self);
                }
                _ => {
                    self.w.key(k);
                    let v = self.rng.edgy_i64();
                    self.w.int(v);
                }
            }
            return;
        }
        self.w.key(k);
        good(self);
    }

    /// A value of whatever kind: what a field of another type holds.
    fn wrong(&mut self) {
        match self.rng.below(8) {
            0 => self.w.none(),
            1 => {
                let b = self.rng.one_in(2);
                self.w.bool(b);
            }
            2 => {
                let f = *self.rng.pick(&[f64::NAN, f64::INFINITY, -0.0, 1e300, 0.5]);
                self.w.float(f);
            }
            3 => {
                let s = *self.rng.pick(ODD_TEXTS);
                self.w.string(s);
            }
            4 => {
                self.w.begin_list();
                self.w.end_list();
            }
            5 => {
                self.w.begin_dict();
                self.w.end_dict();
            }
            6 => match self.frames.last() {
                Some(&id) => self.w.get(id),
                None => self.w.none(),
            },
            _ => {
                let v = self.rng.next_u64();
                self.w.uint(v);
            }
        }
    }

    /// A plausible number, or one of the edges.
    fn num(&mut self, plausible: u64) {
        if self.rng.one_in(self.odd) {
            let v = self.rng.edgy_i64();
            self.w.int(v);
        } else {
            self.w.uint(plausible);
        }
    }

    fn text(&mut self, good: &str) {
        if self.rng.one_in(self.odd) {
            let s = *self.rng.pick(ODD_TEXTS);
            self.w.string(s);
        } else {
            self.w.string(good);
        }
    }

    /// A stack of frames: new frame dicts (phase and module frames among them, which the
    /// analyses read) or ones memoized earlier.
    fn frames(&mut self) {
        self.w.begin_list();
        for _ in 0..self.rng.below(5) {
            if !self.frames.is_empty() && self.rng.one_in(2) {
                let id = *self.rng.pick(&self.frames);
                self.w.get(id);
                continue;
            }
            self.w.begin_dict();
            let file = match self.rng.below(4) {
                0 => PHASE_FRAME_FILE,
                1 => MODULE_FRAME_FILE,
                _ => "model.py",
            };
            let name = *self.rng.pick(&[
                "forward",
                "backward",
                "optimizer",
                "layers.0.attn",
                "step_1",
                "",
            ]);
            self.field(key::NAME, |g| g.text(name));
            self.field(key::FILENAME, |g| g.text(file));
            let line = self.rng.below(500);
            self.field(key::LINE, |g| g.num(line));
            let id = self.w.end_dict_memo();
            self.frames.push(id);
        }
        self.w.end_list();
    }

    /// A segment at `address` of `size` bytes, cut into blocks.
    fn segment(&mut self, address: u64, size: u64) {
        self.w.begin_dict();
        self.field(key::DEVICE, |g| g.num(0));
        self.field(key::ADDRESS, |g| g.num(address));
        self.field(key::TOTAL_SIZE, |g| g.num(size));
        self.field(key::ALLOCATED_SIZE, |g| g.num(size / 2));
        self.field(key::ACTIVE_SIZE, |g| g.num(size / 2));
        self.field(key::REQUESTED_SIZE, |g| g.num(size / 3));
        self.field(key::STREAM, |g| g.num(0));
        self.field(key::SEGMENT_TYPE, |g| {
            let t = if size > 1 << 20 { "large" } else { "small" };
            g.text(t)
        });
        self.field(key::SEGMENT_POOL_ID, |g| g.w.int_tuple(&[0, 0]));
        self.field(key::IS_EXPANDABLE, |g| g.w.bool(false));
        self.field(key::FRAMES, |g| g.frames());
        self.field(key::BLOCKS, |g| {
            g.w.begin_list();
            let blocks = 1 + g.rng.below(4);
            let mut at = address;
            for b in 0..blocks {
                let len = if b + 1 == blocks {
                    address.wrapping_add(size).wrapping_sub(at)
                } else {
                    size / blocks
                };
                g.block(at, len);
                at = at.wrapping_add(len);
            }
            g.w.end_list();
        });
        self.w.end_dict();
    }

    fn block(&mut self, address: u64, size: u64) {
        if self.rng.one_in(self.odd * 4) {
            // A frame dict, or anything, where a block belongs.
            return self.wrong();
        }
        self.w.begin_dict();
        self.field(key::ADDRESS, |g| g.num(address));
        self.field(key::SIZE, |g| g.num(size));
        self.field(key::REQUESTED_SIZE, |g| g.num(size.saturating_sub(8)));
        let state = self.rng.pick(STATES).as_str();
        self.field(key::STATE, |g| g.text(state));
        self.field(key::FRAMES, |g| g.frames());
        self.w.end_dict();
    }

    /// One trace entry.
    fn entry(&mut self, action: &str, addr: u64, size: u64, time_us: u64) {
        self.w.begin_dict();
        self.field(key::ACTION, |g| g.text(action));
        self.field(key::ADDR, |g| g.num(addr));
        self.field(key::SIZE, |g| g.num(size));
        self.field(key::STREAM, |g| g.num(0));
        self.field(key::TIME_US, |g| g.num(time_us));
        self.field(key::FRAMES, |g| g.frames());
        if self.rng.one_in(8) {
            self.field(key::COMPILE_CONTEXT, |g| g.text("N/A"));
            self.field(key::USER_METADATA, |g| g.text(""));
        }
        self.w.end_dict();
    }

    /// A device's trace: segments mapped, allocations in them freed in turn (requested, then
    /// completed), now and then an action out of place.
    fn trace(&mut self, base: u64) {
        self.w.begin_list();
        let mut time = self.rng.below(1 << 40);
        let mut live: Vec<(u64, u64)> = Vec::new();
        let entries = match self.rng.below(10) {
            0 => 0,
            1 => 2_000 + self.rng.below(20_000),
            _ => self.rng.below(200),
        };
        let segment = 2u64 << 20;
        self.entry(Action::SegmentAlloc.as_str(), base, segment * 8, time);
        for i in 0..entries {
            time = if self.rng.one_in(self.odd) {
                self.rng.edgy_i64() as u64
            } else {
                time.wrapping_add(self.rng.below(100))
            };
            if self.rng.one_in(self.odd) {
                let action = self.rng.pick(ACTIONS).as_str();
                let addr = base + self.rng.below(segment * 8);
                let size = self.rng.below(segment);
                self.entry(action, addr, size, time);
            } else if live.len() < 64 && (live.is_empty() || self.rng.one_in(2)) {
                let addr = base + (i % 4096) * 512;
                let size = 512 * (1 + self.rng.below(64));
                live.push((addr, size));
                self.entry(Action::Alloc.as_str(), addr, size, time);
            } else {
                let (addr, size) = live.swap_remove(self.rng.index(live.len()));
                self.entry(Action::FreeRequested.as_str(), addr, size, time);
                self.entry(Action::FreeCompleted.as_str(), addr, size, time);
            }
        }
        if self.rng.one_in(4) {
            self.entry(Action::Oom.as_str(), 0, 1 << 30, time);
        }
        self.w.end_list();
    }

    fn snapshot(&mut self) {
        self.w.begin_dict();
        let devices = self.rng.below(3);
        self.field(key::SEGMENTS, |g| {
            g.w.begin_list();
            for d in 0..devices {
                for s in 0..g.rng.below(4) {
                    let size = 2u64 << (10 + g.rng.below(15));
                    g.segment((d << 40) + (s << 30), size);
                }
            }
            g.w.end_list();
        });
        self.field(key::DEVICE_TRACES, |g| {
            g.w.begin_list();
            for d in 0..devices {
                g.trace(d << 40);
            }
            g.w.end_list();
        });
        self.field(key::ALLOCATOR_SETTINGS, |g| {
            g.w.begin_dict();
            g.field(key::EXPANDABLE_SEGMENTS, |g| g.w.bool(false));
            g.field(key::MAX_SPLIT_SIZE, |g| g.num(u64::MAX));
            g.field(key::ROUNDUP_POWER2_DIVISIONS, |g| {
                g.w.begin_list();
                g.w.end_list()
            });
            g.w.end_dict();
        });
        self.field(key::EXTERNAL_ANNOTATIONS, |g| {
            g.w.begin_list();
            for i in 0..g.rng.below(4) {
                g.w.begin_dict();
                g.field(key::STAGE, |g| {
                    g.text(if i % 2 == 0 { "START" } else { "END" })
                });
                g.field(key::DEVICE, |g| g.num(0));
                g.field(key::NAME, |g| g.text("Optimizer.step"));
                g.field(key::TIME_US, |g| g.num(i * 10));
                g.w.end_dict();
            }
            g.w.end_list();
        });
        if self.rng.one_in(self.odd) {
            // Nesting far deeper than any snapshot, under a key no reader knows.
            self.w.key("nested");
            let depth = *self.rng.pick(&[1_000, 100_000]);
            for _ in 0..depth {
                self.w.begin_list();
            }
            for _ in 0..depth {
                self.w.end_list();
            }
        }
        self.w.end_dict();
    }
}

fn case(rng: &mut Rng, scratch: &Path, rules: &Rules) -> Outcome {
    let odd = *rng.pick(&[4, 20, 200, 5_000]);
    let mut g = Gen {
        rng,
        w: PickleWriter::new(),
        frames: Vec::new(),
        odd,
    };
    g.snapshot();
    let data = g.w.finish();
    let path = scratch.join("fuzz.pickle");
    std::fs::write(&path, &data).unwrap();
    let result = torch_snapshot::read::load(&path).map(|snap| {
        let opts = MemoryOptions {
            label: "fuzz".into(),
            top: 5,
            ..MemoryOptions::default()
        };
        let a = analyze(&snap, rules, &opts);
        let _ = render_to_string(Format::Table, &report_document(&a.report));
        let _ = render_to_string(Format::Json, &report_document(&a.report));
    });
    outcome(&path, result)
}

#[test]
fn snapshots_built_field_by_field_load_or_are_refused_in_one_line() {
    let rules = Rules::builtin();
    Campaign::from_env("snapshot", 200).run(|rng, scratch| case(rng, scratch, &rules));
}
