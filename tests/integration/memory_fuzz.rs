//! Fuzzing the snapshot reader and the analyses with mutated real snapshots: flips of integer
//! payloads (sizes, addresses, times), byte flips anywhere, truncations and insertions (of random
//! bytes and of pickle opcodes) applied to the decompressed pickle of
//! `fixtures/memsnap/memsnap_small_ctx128_forward_fp32.pickle.gz`.
//! Every input must either load and analyse without a panic, or be refused with one error line.
//!
//! The normal suite runs a few dozen cases. For many more, set `MEMSNAP_FUZZ_CASES`
//! (`scripts/fuzz_pickle.sh` runs 20,000 in release mode) and read the count it prints.

use crate::common;

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use analyze::formats::torch_snapshot;
use analyze::memory::categories::Rules;
use analyze::memory::summary::{analyze, MemoryOptions};
use analyze::memory::tables::report_document;
use analyze::render::{render_to_string, Format};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn base() -> &'static [u8] {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| {
        let path = common::fixture("memsnap/memsnap_small_ctx128_forward_fp32.pickle.gz");
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
            .read_to_end(&mut out)
            .unwrap();
        out
    })
}

/// Offsets of the payload bytes of the integer opcodes in `data` (sizes, addresses, times,
/// streams, line numbers), found by walking the opcodes the snapshot pickles use. Mutating these
/// keeps the pickle well-formed and feeds the analyses odd values rather than parse errors.
fn int_payloads(data: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let op = data[i];
        let arg = |n: usize| data.get(i + 1..i + 1 + n);
        let len = match op {
            0x80 | b'K' | b'h' | b'q' => 1,
            b'M' => 2,
            b'J' | b'j' | b'r' => 4,
            0x95 | b'G' => 8,
            0x8c | 0x8a => 1 + arg(1).map_or(0, |b| usize::from(b[0])),
            b'X' => 4 + arg(4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize),
            b'}' | b']' | b')' | b'(' | 0x94 | 0x85 | 0x86 | 0x87 | 0x88 | 0x89 | b'N' | b'a'
            | b'e' | b's' | b'u' | b't' | b'l' | b'd' => 0,
            _ => break,
        };
        if matches!(op, b'K' | b'M' | b'J' | 0x8a) {
            let start = if op == 0x8a { i + 2 } else { i + 1 };
            out.extend(start..(i + 1 + len).min(data.len()));
        }
        i += 1 + len;
    }
    out
}

fn payloads() -> &'static [usize] {
    static P: OnceLock<Vec<usize>> = OnceLock::new();
    P.get_or_init(|| int_payloads(base()))
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Overwrite a payload byte of an integer opcode (relative index into [`payloads`]).
    IntFlip(f64, u8),
    /// Overwrite the byte at a relative position.
    Flip(f64, u8),
    /// Keep only the first fraction of the input.
    Truncate(f64),
    /// Insert bytes at a relative position.
    Insert(f64, Vec<u8>),
}

/// Opcodes worth inserting: containers, memo operations, marks and the code opcodes.
const OPCODES: &[u8] =
    b"()]}tdlesuaqhrjg0121NKJM.\x94\x85\x86\x87\x88\x89\x8a\x8c\x95cR\x93b\x81io";

fn mutation() -> impl Strategy<Value = Mutation> {
    let pos = 0.0f64..1.0;
    prop_oneof![
        6 => (pos.clone(), any::<u8>()).prop_map(|(p, b)| Mutation::IntFlip(p, b)),
        3 => (pos.clone(), any::<u8>()).prop_map(|(p, b)| Mutation::Flip(p, b)),
        1 => (0.0f64..1.0).prop_map(Mutation::Truncate),
        1 => (pos.clone(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(p, b)| Mutation::Insert(p, b)),
        1 => (pos, prop::collection::vec(prop::sample::select(OPCODES), 1..6))
            .prop_map(|(p, b)| Mutation::Insert(p, b)),
    ]
}

fn apply(base: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut data = base.to_vec();
    for m in muts {
        let at = |p: f64, len: usize| ((p * len as f64) as usize).min(len);
        match m {
            Mutation::IntFlip(p, b) => {
                let offsets = payloads();
                if let Some(&i) = offsets.get(at(*p, offsets.len().saturating_sub(1))) {
                    if i < data.len() {
                        data[i] = *b;
                    }
                }
            }
            Mutation::Flip(p, b) => {
                if !data.is_empty() {
                    let i = at(*p, data.len() - 1);
                    data[i] = *b;
                }
            }
            Mutation::Truncate(p) => data.truncate(at(*p, data.len())),
            Mutation::Insert(p, bytes) => {
                let i = at(*p, data.len());
                data.splice(i..i, bytes.iter().copied());
            }
        }
    }
    data
}

#[test]
fn mutated_snapshots_never_panic() {
    let cases: u32 = std::env::var("MEMSNAP_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let loaded = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    let rules = Rules::builtin();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    assert!(
        payloads().len() > 10_000,
        "the opcode walk covers the base snapshot"
    );
    let strategy = prop::collection::vec(mutation(), 1..4);
    let result = runner.run(&strategy, |muts| {
        let data = apply(base(), &muts);
        match torch_snapshot::read::from_bytes(Path::new("fuzz.pickle"), &data) {
            Ok(snap) => {
                let opts = MemoryOptions {
                    label: "fuzz".into(),
                    top: 5,
                    ..MemoryOptions::default()
                };
                let a = analyze(&snap, &rules, &opts);
                let _ = render_to_string(Format::Json, &report_document(&a.report));
                loaded.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(!msg.contains('\n'), "a multi-line error: {msg}");
                prop_assert!(msg.starts_with("fuzz.pickle: "), "{msg}");
                refused.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    });
    let (l, r) = (loaded.into_inner(), refused.into_inner());
    eprintln!(
        "memory snapshot fuzz: survived {} inputs ({l} loaded and analysed, {r} refused with an error)",
        l + r
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
