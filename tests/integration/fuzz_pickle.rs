//! Fuzzing the pickle reader, the snapshot reader on top of it and the memory analyses, with
//! mutated real snapshots (the decompressed pickles of two fixtures): flips of integer payloads
//! (sizes, addresses, times), byte flips anywhere, truncations, insertions of random bytes and of
//! pickle opcodes, length fields made huge, deep nesting, chunks of the pickle copied elsewhere.
//! Every input must load and analyse, or be refused with one error line. Cases and seeds:
//! [`crate::fuzz_engine`].

use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

use analyze::formats::torch_snapshot;
use analyze::memory::categories::Rules;
use analyze::memory::summary::{analyze, MemoryOptions};
use analyze::memory::tables::report_document;
use analyze::render::{render_to_string, Format};

use crate::common;
use crate::fuzz_engine::{outcome, Campaign, Outcome, Rng};

/// A base pickle and the offsets of its integer payloads.
struct Base {
    data: Vec<u8>,
    payloads: Vec<usize>,
}

fn base(fixture: &str) -> Base {
    let mut data = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(common::fixture(fixture)).unwrap())
        .read_to_end(&mut data)
        .unwrap();
    let payloads = int_payloads(&data);
    assert!(payloads.len() > 10_000, "the opcode walk covers {fixture}");
    Base { data, payloads }
}

fn bases() -> &'static [Base] {
    static BASES: OnceLock<Vec<Base>> = OnceLock::new();
    BASES.get_or_init(|| {
        vec![
            base("memsnap/memsnap_small_ctx128_forward_fp32.pickle.gz"),
            base("collect/collect_small_ctx128_train_fp32.pickle.gz"),
        ]
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

/// Opcodes worth inserting: containers, memo operations, marks and the code opcodes.
const OPCODES: &[u8] =
    b"()]}tdlesuaqhrjg0121NKJM.\x94\x85\x86\x87\x88\x89\x8a\x8c\x95cR\x93b\x81io";

fn mutate(rng: &mut Rng, base: &Base, data: &mut Vec<u8>) {
    let at = |rng: &mut Rng, len: usize| rng.index(len + 1).min(len);
    match rng.below(14) {
        // An integer payload: the values the analyses compute with.
        0..=5 => {
            if let Some(&i) = base.payloads.get(rng.index(base.payloads.len())) {
                if i < data.len() {
                    data[i] = rng.byte();
                }
            }
        }
        6..=8 => {
            if !data.is_empty() {
                let i = rng.index(data.len());
                data[i] = rng.byte();
            }
        }
        9 => {
            let n = at(rng, data.len());
            data.truncate(n);
        }
        10 => {
            let i = at(rng, data.len());
            let bytes = rng.bytes(1, 15);
            data.splice(i..i, bytes);
        }
        11 => {
            let i = at(rng, data.len());
            let ops: Vec<u8> = (0..1 + rng.index(5)).map(|_| *rng.pick(OPCODES)).collect();
            data.splice(i..i, ops);
        }
        // A length prefix that claims far more than the file holds.
        12 => {
            let i = at(rng, data.len());
            let (op, width) = *rng.pick(&[(b'X', 4), (0x8d, 8), (b'B', 4), (0x8e, 8), (0x8a, 1)]);
            let mut ins = vec![op];
            ins.extend_from_slice(&rng.next_u64().to_le_bytes()[..width]);
            data.splice(i..i, ins);
        }
        // Deep nesting: lists inside lists (or marks piled up), far deeper than any stack.
        _ => {
            let i = at(rng, data.len());
            let depth = *rng.pick(&[1_000, 100_000, 1_000_000]);
            let nest: Vec<u8> = match rng.below(3) {
                0 => b"]"
                    .repeat(depth)
                    .into_iter()
                    .chain(b"a".repeat(depth - 1))
                    .collect(),
                1 => b"(".repeat(depth),
                _ => {
                    // A chunk of the pickle copied elsewhere.
                    let from = rng.index(data.len());
                    let len = rng.index(4096).min(data.len() - from);
                    data[from..from + len].to_vec()
                }
            };
            data.splice(i..i, nest);
        }
    }
}

fn case(rng: &mut Rng, scratch: &Path, rules: &Rules) -> Outcome {
    let base = rng.pick(bases());
    let mut data = base.data.clone();
    for _ in 0..1 + rng.below(3) {
        mutate(rng, base, &mut data);
    }
    let path = scratch.join("fuzz.pickle");
    std::fs::write(&path, &data).unwrap();
    let result = torch_snapshot::read::from_bytes(&path, &data).map(|snap| {
        let opts = MemoryOptions {
            label: "fuzz".into(),
            top: 5,
            ..MemoryOptions::default()
        };
        let a = analyze(&snap, rules, &opts);
        let _ = render_to_string(Format::Json, &report_document(&a.report));
    });
    outcome(&path, result)
}

#[test]
fn mutated_snapshots_load_or_are_refused_in_one_line() {
    let rules = Rules::builtin();
    // Built before the clock starts: the first cases would be timed building them.
    bases();
    Campaign::from_env("pickle", 200).run(|rng, scratch| case(rng, scratch, &rules));
}
