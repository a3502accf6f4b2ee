//! A real snapshot whose frames carry a field out of the expected range, as PyTorch 2.6 writes
//! some frames of `torch.compile`'s code (`line` 2^64 − 1, its `-1` cast to unsigned): the file
//! is read like the original, alone, in a batch and in a report; and `--device` for a device
//! the snapshot lacks is one error line naming the devices it has.
//!
//! The test file is made from `fixtures/memsnap/memsnap_small_ctx128_train_fp32.pickle.gz`:
//! read, written back by the project's snapshot writer with one frame's line set to a marker,
//! and the marker's bytes replaced by the pickle of 2^64 − 1 (the `LONG1` Python writes).

use crate::common;

use std::path::{Path, PathBuf};

use analyze::formats::torch_snapshot::{read, write};

use crate::common::{analyze, text};

const FIXTURE: &str = "memsnap/memsnap_small_ctx128_train_fp32.pickle.gz";

/// A marker line no real frame has, written as `BININT` (`J` and 4 bytes).
const MARKER: i64 = 0x3d0c_0de5;
/// `pickle.dumps(2**64 - 1)`'s integer: `LONG1`, 9 bytes.
const U64_MAX_PICKLED: [u8; 11] = [
    0x8a, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
];

/// Replace the one `BININT` of [`MARKER`] in a protocol-4 pickle written by the project's
/// writer (`PROTO 4`, then `FRAME`s back to back) by 2^64 − 1, growing its frame to match.
fn patch_marker(pickle: &[u8]) -> Vec<u8> {
    let mut needle = vec![b'J'];
    needle.extend_from_slice(&(MARKER as i32).to_le_bytes());
    let hits: Vec<usize> = pickle
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle.as_slice())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "the marker is written once (frame dicts are memoized)"
    );
    let at = hits[0];
    assert_eq!(&pickle[..2], &[0x80, 4]);
    let mut out = pickle[..2].to_vec();
    let mut pos = 2;
    while pos < pickle.len() {
        assert_eq!(pickle[pos], 0x95, "a FRAME opcode at {pos}");
        let len = u64::from_le_bytes(pickle[pos + 1..pos + 9].try_into().unwrap()) as usize;
        let body = &pickle[pos + 9..pos + 9 + len];
        let start = pos + 9;
        if (start..start + len).contains(&at) {
            let mut patched = body[..at - start].to_vec();
            patched.extend_from_slice(&U64_MAX_PICKLED);
            patched.extend_from_slice(&body[at - start + needle.len()..]);
            out.push(0x95);
            out.extend_from_slice(&(patched.len() as u64).to_le_bytes());
            out.extend_from_slice(&patched);
        } else {
            out.extend_from_slice(&pickle[pos..start + len]);
        }
        pos = start + len;
    }
    out
}

/// The fixture with the line of its `nn.Module.__call__` frame (on most stacks, and in no
/// table) set to 2^64 − 1, written into `dir` under the fixture's own name (so its label is the
/// same).
fn snapshot_with_line_u64_max(dir: &Path) -> PathBuf {
    let mut snap = read::load(&common::fixture(FIXTURE)).unwrap();
    let call = snap
        .frames
        .frames
        .iter()
        .position(|f| f.name == "_call_impl")
        .expect("the fixture's stacks pass through nn.Module.__call__");
    assert!(snap.frames.frames.iter().all(|f| f.line != MARKER));
    snap.frames.frames[call].line = MARKER;
    let bytes = patch_marker(&write::to_pickle(&snap));
    let path = dir.join("memsnap_small_ctx128_train_fp32.pickle");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_frame_line_of_2_pow_64_minus_1_gives_the_same_peak_and_tables() {
    let dir = tempfile::tempdir().unwrap();
    let patched = snapshot_with_line_u64_max(dir.path());
    // The file holds 2^64 − 1; the reader keeps its bits, the `-1` PyTorch meant.
    let back = read::load(&patched).unwrap();
    assert!(back.frames.frames.iter().any(|f| f.line == -1));
    let original = common::fixture(FIXTURE).display().to_string();
    let patched = patched.display().to_string();
    for format in ["json", "table"] {
        let a = analyze(&["memory", &original, "-f", format]);
        let b = analyze(&["memory", &patched, "-f", format]);
        assert_eq!(b.status.code(), Some(0), "{}", text(&b.stderr));
        assert_eq!(text(&a.stdout), text(&b.stdout), "-f {format}");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&analyze(&["memory", &patched, "-f", "json"]).stdout).unwrap();
    // The allocator's own peak of that step (fixtures/memsnap/peaks.jsonl).
    assert_eq!(json["peak_allocated_bytes"], 2_678_320_640u64);

    // In a batch of snapshots, beside the original: both read, one row each.
    let both = analyze(&["memory", &original, &patched, "-f", "json"]);
    assert_eq!(both.status.code(), Some(0), "{}", text(&both.stderr));
    let v: serde_json::Value = serde_json::from_slice(&both.stdout).unwrap();
    assert_eq!(v["snapshots"].as_array().map(Vec::len), Some(2));

    // A report over the folder keeps it.
    let out = dir.path().join("report");
    let r = analyze(&[
        "report",
        &dir.path().display().to_string(),
        "-o",
        &out.display().to_string(),
        "--no-plots",
        "--quiet",
    ]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert!(
        !report.to_string().contains("does not fit"),
        "the snapshot is not skipped"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("small ctx128 train fp32"), "{md}");
    assert!(!md.contains("Skipped files"), "{md}");
}

#[test]
fn a_device_the_snapshot_lacks_is_one_error_naming_those_it_has() {
    let dir = tempfile::tempdir().unwrap();
    let patched = snapshot_with_line_u64_max(dir.path()).display().to_string();
    let out = analyze(&["memory", &patched, "--device", "7"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.contains("no device 7") && err.contains("it has device 0"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    let ok = analyze(&["memory", &patched, "--device", "0", "-f", "json"]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
}
