//! Fuzzing the snapshot reader and the analyses with mutated real snapshots: byte flips,
//! truncations and insertions (of random bytes and of pickle opcodes) applied to the
//! decompressed pickle of `fixtures/memsnap/memsnap_small_ctx128_forward_fp32.pickle.gz`.
//! Every input must either load and analyse without a panic, or be refused with one error line.
//!
//! The normal suite runs a few dozen cases. For many more, set `MEMSNAP_FUZZ_CASES`
//! (`scripts/fuzz_pickle.sh` runs 20,000 in release mode) and read the count it prints.

mod common;

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use analyze::ingest::torch_snapshot;
use analyze::memory::categories::Rules;
use analyze::memory::summary::{analyze, report_document, MemoryOptions};
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

#[derive(Clone, Debug)]
enum Mutation {
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
        6 => (pos.clone(), any::<u8>()).prop_map(|(p, b)| Mutation::Flip(p, b)),
        2 => (0.0f64..1.0).prop_map(Mutation::Truncate),
        2 => (pos.clone(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(p, b)| Mutation::Insert(p, b)),
        2 => (pos, prop::collection::vec(prop::sample::select(OPCODES), 1..6))
            .prop_map(|(p, b)| Mutation::Insert(p, b)),
    ]
}

fn apply(base: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut data = base.to_vec();
    for m in muts {
        let at = |p: f64, len: usize| ((p * len as f64) as usize).min(len);
        match m {
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
    let strategy = prop::collection::vec(mutation(), 1..6);
    let result = runner.run(&strategy, |muts| {
        let data = apply(base(), &muts);
        match torch_snapshot::from_bytes(Path::new("fuzz.pickle"), &data) {
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
