//! Fuzzing the gzip layer under every format with real compressed inputs (an export, a Kineto
//! trace, a snapshot) damaged the ways gzip files break: cut anywhere, bytes changed in the
//! header (flags, extra-field lengths), the deflate stream and the trailer (CRC, size), members
//! concatenated, garbage or empty members after the data, and now and then a bomb. Each case is
//! loaded through [`formats::load_with`] with its own temporary folder, which must be empty
//! again afterwards: no inflated copy is ever left behind. Cases and seeds:
//! [`crate::fuzz_engine`].

use std::io::{Read, Write};
use std::path::Path;
use std::sync::OnceLock;

use analyze::formats::limits::{Limits, MemoryLimit};
use analyze::formats::{self, Input};
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::common;
use crate::fuzz_engine::{outcome, Campaign, Outcome, Rng};

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Small compressed inputs of each kind, made from the fixtures: the raw bytes, gzipped.
fn bases() -> &'static [Vec<u8>] {
    static BASES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    BASES.get_or_init(|| {
        let raw = |f: &str| {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(std::fs::File::open(common::fixture(f)).unwrap())
                .read_to_end(&mut out)
                .unwrap();
            out
        };
        let kineto = raw("kineto/kineto_small_ctx128_train_fp32.pt.trace.json.gz");
        vec![
            std::fs::read(common::fixture(
                "collect/collect_small_ctx128_train_fp32.sqlite.gz",
            ))
            .unwrap(),
            std::fs::read(common::fixture(
                "collect/collect_small_ctx128_train_fp32.pickle.gz",
            ))
            .unwrap(),
            std::fs::read(common::fixture(
                "collect/collect_small_ctx128_train_fp32.json.gz",
            ))
            .unwrap(),
            // A small Kineto trace: the first events, closed again.
            gz(&[&kineto[..kineto.len().min(200_000)], b"]}"].concat()),
        ]
    })
}

/// The most a case may inflate to: far above every base, far below the bomb.
const MAX_INFLATED: u64 = 32 << 20;

/// 40 MiB of zeros, gzipped.
fn bomb() -> &'static [u8] {
    static BOMB: OnceLock<Vec<u8>> = OnceLock::new();
    BOMB.get_or_init(|| {
        let mut e = GzEncoder::new(Vec::new(), Compression::best());
        e.write_all(&vec![0u8; 40 << 20]).unwrap();
        e.finish().unwrap()
    })
}

fn mutate(rng: &mut Rng, data: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    let len = data.len();
    match rng.below(11) {
        0 | 1 => data.truncate(rng.index(len)),
        // The header: flags (FTEXT, FHCRC, FEXTRA, FNAME, FCOMMENT), method, the extra length.
        2 => {
            let i = rng.index(12.min(len));
            data[i] = rng.byte();
        }
        3 => {
            if len > 3 {
                data[3] |= 1 << rng.below(8);
            }
        }
        // The trailer: CRC and the inflated size modulo 4 GiB.
        4 => {
            let i = len - 1 - rng.index(8.min(len));
            data[i] = rng.byte();
        }
        5 | 6 => {
            let i = rng.index(len);
            data[i] ^= 1 << rng.below(8);
        }
        7 => {
            let again = data.clone();
            data.extend_from_slice(&again);
        }
        8 => {
            let tail = match rng.below(4) {
                0 => vec![0; rng.index(64)],
                1 => rng.bytes(0, 63),
                2 => gz(b""),
                _ => gz(&rng.bytes(0, 99)),
            };
            data.extend_from_slice(&tail);
        }
        9 => {
            let i = rng.index(len);
            let junk = rng.bytes(1, 32);
            data.splice(i..i, junk);
        }
        _ => {
            // A bomb: a few tens of kilobytes inflating past the gzip limit.
            if rng.one_in(10) {
                *data = [&data[..], bomb()].concat();
            } else {
                data.truncate(len / 2);
            }
        }
    }
}

fn case(rng: &mut Rng, scratch: &Path) -> Outcome {
    let mut data = rng.pick(bases()).clone();
    for _ in 0..1 + rng.below(3) {
        mutate(rng, &mut data);
    }
    let path = scratch.join("fuzz.gz");
    std::fs::write(&path, &data).unwrap();
    let temp_dir = scratch.join("tmp");
    std::fs::create_dir_all(&temp_dir).unwrap();
    let limits = Limits {
        memory: MemoryLimit::Off,
        temp_dir: temp_dir.clone(),
        max_inflated: Some(MAX_INFLATED),
    };
    let result = formats::load_with(&path, &limits).map(|input| match input {
        Input::Trace(t) => t.kernels.len(),
        Input::Snapshot(s) => s.segments.len(),
    });
    let left: Vec<_> = std::fs::read_dir(&temp_dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "temporary files left behind: {left:?}");
    outcome(&path, result)
}

#[test]
fn damaged_gzip_inputs_load_or_are_refused_in_one_line_and_leave_nothing() {
    // Built before the clock starts: the first cases would be timed building them.
    bases();
    bomb();
    Campaign::from_env("gzip", 300).run(case);
}
