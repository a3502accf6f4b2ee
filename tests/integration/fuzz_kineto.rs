//! Fuzzing the Kineto (PyTorch profiler) trace reader, and the stats and profile behind it, with
//! a real trace changed at the JSON level (fields removed or of the wrong type, huge and tiny
//! numbers, numbers as strings, deep nesting, duplicate keys, events duplicated or dropped) and
//! at the byte level (truncation, flipped bytes, stray tokens, a BOM, invalid UTF-8).
//!
//! The base is the fixture trace cut to a few hundred events: every metadata event and
//! annotation, and a slice of the kernels with the calls that launched them. Every case must load
//! and analyse, or be refused with one error line. Cases and seeds: [`crate::fuzz_engine`].

use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

use analyze::formats::kineto;
use analyze::kernels::class::Classifier;
use serde_json::{json, Map, Value};

use crate::common;
use crate::fuzz_engine::{outcome, Campaign, Outcome, Rng};
use crate::fuzz_nsys::analyse;

fn cut(fixture: &str) -> Value {
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(common::fixture(fixture)).unwrap())
        .read_to_end(&mut text)
        .unwrap();
    let mut doc: Value = serde_json::from_slice(&text).unwrap();
    let events = doc["traceEvents"].as_array().unwrap().clone();
    let correlation = |e: &Value| e["args"]["correlation"].as_u64();
    let kernels: Vec<u64> = events
        .iter()
        .filter(|e| e["cat"] == "kernel")
        .filter_map(correlation)
        .skip(300)
        .take(120)
        .collect();
    let (mut ops, mut flows) = (0, 0);
    let kept: Vec<Value> = events
        .into_iter()
        .filter(|e| {
            let cat = e["cat"].as_str().unwrap_or("");
            match cat {
                "kernel" | "cuda_runtime" => correlation(e).is_some_and(|c| kernels.contains(&c)),
                "cpu_op" => {
                    ops += 1;
                    ops % 100 == 0
                }
                "ac2g" | "fwdbwd" => {
                    flows += 1;
                    flows % 100 == 0
                }
                _ => true,
            }
        })
        .collect();
    doc["traceEvents"] = Value::Array(kept);
    doc
}

fn bases() -> &'static [Value] {
    static BASES: OnceLock<Vec<Value>> = OnceLock::new();
    BASES.get_or_init(|| {
        vec![
            cut("kineto/kineto_small_ctx128_train_fp32.pt.trace.json.gz"),
            cut("kineto/kineto_schedule_small_l4_ctx128_train_fp32.pt.trace.json.gz"),
        ]
    })
}

/// Raw JSON texts that a `Value` cannot hold, or that stress a parser: numbers beyond every
/// type, deep nesting, odd strings.
fn raw_text(rng: &mut Rng) -> String {
    match rng.below(14) {
        0 => rng
            .pick(&[
                "1e400",
                "-1e400",
                "18446744073709551616",
                "-9223372036854775809",
                "9223372036854775807",
                "-9223372036854775808",
                "1.7976931348623157e308",
                "4.9e-324",
                "0.0000000000000000000000001",
                "123456789012345678901234567890.5",
                "-0",
                "1E+2",
                "-0.0",
                "99999999999999999999999999999999999999999999999999",
            ])
            .to_string(),
        1 => {
            let depth = *rng.pick(&[127, 128, 129, 200, 10_000, 200_000]);
            format!("{}{}", "[".repeat(depth), "]".repeat(depth))
        }
        2 => {
            let depth = *rng.pick(&[129, 5_000, 100_000]);
            format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
        }
        3 => rng
            .pick(&[
                "\"\\ud800\"",
                "\"\\u0000\"",
                "\"\\udfff\\ud800\"",
                "\"é\\n\\t\"",
                "\"\"",
                "\" 12 \"",
                "\"stream 7\"",
                "\"-3\"",
                "\"1.5e3\"",
                "\"nan\"",
            ])
            .to_string(),
        4 => format!("\"{}\"", "x".repeat(rng.index(100_000))),
        5 => "[1, 2, 3, 4]".into(),
        6 => "[-1, 1e300, \"x\"]".into(),
        7 => "{}".into(),
        8 => "[]".into(),
        9 => "null".into(),
        10 => "true".into(),
        11 => rng.edgy_i64().to_string(),
        12 => format!("{}.{}", rng.edgy_i64(), rng.below(1_000_000)),
        _ => format!("\"{}\"", rng.edgy_i64()),
    }
}

/// A value put in place of a field: through a placeholder string that becomes raw text once the
/// document is written out.
fn junk(rng: &mut Rng, raws: &mut Vec<String>) -> Value {
    let i = raws.len();
    raws.push(raw_text(rng));
    Value::String(format!("@@RAW{i}@@"))
}

const FIELDS: &[&str] = &["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id"];
const ARGS: &[&str] = &[
    "correlation",
    "device",
    "stream",
    "bytes",
    "grid",
    "block",
    "registers per thread",
    "shared memory",
    "External id",
    "name",
];

/// Set one of `keys`, picked at random, to junk.
fn junk_field(rng: &mut Rng, map: &mut Map<String, Value>, keys: &[&str], raws: &mut Vec<String>) {
    let k = *rng.pick(keys);
    let v = junk(rng, raws);
    map.insert(k.into(), v);
}

fn mutate_event(rng: &mut Rng, e: &mut Map<String, Value>, raws: &mut Vec<String>) {
    match rng.below(7) {
        0 => {
            e.remove(*rng.pick(FIELDS));
        }
        1 | 2 => junk_field(rng, e, FIELDS, raws),
        3 | 4 => {
            let a = *rng.pick(ARGS);
            let v = junk(rng, raws);
            match e.get_mut("args").and_then(Value::as_object_mut) {
                Some(args) => {
                    args.insert(a.into(), v);
                }
                None => {
                    e.insert("args".into(), json!({ a: v }));
                }
            }
        }
        5 => {
            let cat = *rng.pick(&[
                "kernel",
                "Kernel",
                "gpu_memcpy",
                "Memset",
                "cuda_runtime",
                "cuda_driver",
                "user_annotation",
                "gpu_user_annotation",
                "KERNEL",
                "",
            ]);
            e.insert("cat".into(), cat.into());
        }
        _ => {
            let ph = *rng.pick(&["X", "M", "B", "E", "i", "", "x", "XX"]);
            e.insert("ph".into(), ph.into());
        }
    }
}

fn mutate(rng: &mut Rng, doc: &mut Value, raws: &mut Vec<String>) {
    let Some(top) = doc.as_object_mut() else {
        return;
    };
    match rng.below(12) {
        0..=5 => {
            if let Some(events) = top.get_mut("traceEvents").and_then(Value::as_array_mut) {
                if events.is_empty() {
                    return;
                }
                let i = rng.index(events.len());
                if let Some(e) = events[i].as_object_mut() {
                    mutate_event(rng, e, raws);
                }
            }
        }
        6 => {
            if let Some(events) = top.get_mut("traceEvents").and_then(Value::as_array_mut) {
                if !events.is_empty() {
                    let i = rng.index(events.len());
                    let most = if rng.one_in(50) { 20_000 } else { 20 };
                    let n = 1 + rng.index(most);
                    let e = events[i].clone();
                    events.extend(std::iter::repeat_n(e, n));
                }
            }
        }
        7 => {
            if let Some(events) = top.get_mut("traceEvents").and_then(Value::as_array_mut) {
                let keep = rng.index(events.len() + 1);
                events.truncate(keep);
            }
        }
        8 => junk_field(
            rng,
            top,
            &[
                "traceEvents",
                "deviceProperties",
                "schemaVersion",
                "baseTimeNanoseconds",
            ],
            raws,
        ),
        9 => {
            if let Some(Value::Array(props)) = top.get_mut("deviceProperties") {
                if let Some(Value::Object(p)) = props.first_mut() {
                    junk_field(
                        rng,
                        p,
                        &[
                            "id",
                            "name",
                            "totalGlobalMem",
                            "numSms",
                            "computeMajor",
                            "computeMinor",
                        ],
                        raws,
                    );
                }
            }
        }
        10 => {
            top.remove(*rng.pick(&["traceEvents", "deviceProperties", "schemaVersion"]));
        }
        _ => {
            // A bare array of events instead of the object.
            if let Some(events) = top.get("traceEvents").cloned() {
                *doc = events;
            }
        }
    }
}

/// Byte-level damage to the written document.
fn damage(rng: &mut Rng, text: &mut Vec<u8>) {
    if text.is_empty() {
        return;
    }
    match rng.below(7) {
        0 => text.truncate(rng.index(text.len())),
        1 => {
            let i = rng.index(text.len());
            text[i] = rng.byte();
        }
        2 => {
            let tok = *rng.pick(&[
                "{", "}", "[", "]", "\"", ",", ":", "\\", "\u{0}", "1e99999", "-", "\u{feff}",
            ]);
            let i = rng.index(text.len());
            text.splice(i..i, tok.bytes());
        }
        3 => {
            // A key said twice in an object.
            let dup = *rng.pick(&[
                "\"ph\":\"X\",",
                "\"ts\":\"1\",",
                "\"dur\":-5,",
                "\"cat\":\"kernel\",",
                "\"args\":{},",
                "\"traceEvents\":[],",
                "\"name\":null,",
            ]);
            let opens: Vec<usize> = text
                .windows(2)
                .enumerate()
                .filter(|(_, w)| w == b"{\"")
                .map(|(i, _)| i + 1)
                .collect();
            if !opens.is_empty() {
                let i = *rng.pick(&opens);
                text.splice(i..i, dup.bytes());
            }
        }
        4 => {
            text.splice(0..0, "\u{feff}".bytes());
        }
        5 => {
            let i = rng.index(text.len());
            text.splice(i..i, [0xff, 0xfe, 0xc3]);
        }
        _ => {
            let ws = rng
                .pick(&[" ", "\n\n", "\t"])
                .as_bytes()
                .repeat(rng.index(1000));
            text.splice(0..0, ws);
        }
    }
}

/// The text of one case: a base trace changed at the JSON level, and sometimes damaged.
pub fn mutated_text(rng: &mut Rng) -> Vec<u8> {
    let mut doc = rng.pick(bases()).clone();
    let mut raws = Vec::new();
    for _ in 0..1 + rng.below(4) {
        mutate(rng, &mut doc, &mut raws);
    }
    let mut text = serde_json::to_string(&doc).unwrap();
    for (i, raw) in raws.iter().enumerate() {
        text = text.replace(&format!("\"@@RAW{i}@@\""), raw);
    }
    let mut bytes = text.into_bytes();
    if rng.one_in(3) {
        damage(rng, &mut bytes);
    }
    bytes
}

fn case(rng: &mut Rng, scratch: &Path, classifier: &Classifier) -> Outcome {
    let bytes = mutated_text(rng);
    let path = scratch.join("fuzz.json");
    std::fs::write(&path, &bytes).unwrap();
    let result = kineto::parse(&path, &bytes).map(|trace| analyse(&trace, classifier));
    outcome(&path, result)
}

#[test]
fn mutated_kineto_traces_load_or_are_refused_in_one_line() {
    let classifier = Classifier::builtin();
    // Built before the clock starts: the first cases would be timed building them.
    bases();
    Campaign::from_env("kineto", 300).run(|rng, scratch| case(rng, scratch, &classifier));
}

/// Nesting far deeper than any stack: the reader walks it without recursion where it skips a
/// value, and serde_json's recursion limit refuses it where a value is read.
#[test]
fn deep_nesting_is_refused_or_skipped_not_a_stack_overflow() {
    let deep = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
    let docs = [
        deep.clone(),
        format!("{{\"traceEvents\": {deep}}}"),
        format!("{{\"traceEvents\": [], \"meta\": {deep}}}"),
        format!("{{\"traceEvents\": [{{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1, \"dur\": 1, \"args\": {deep}}}]}}"),
        format!("[{{\"ph\": \"M\", \"name\": \"thread_name\", \"args\": {{\"name\": {deep}}}}}]"),
    ];
    for doc in docs {
        let path = Path::new("deep.json");
        if let Err(e) = kineto::parse(path, doc.as_bytes()) {
            let msg = e.to_string();
            assert!(
                !msg.contains('\n') && msg.starts_with("deep.json: "),
                "{msg}"
            );
        }
    }
}
