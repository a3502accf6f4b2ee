//! The results file of `collect bench --out FILE` (JSON, plain or gzip): the device, the
//! settings, and per configuration its dimensions, plan, step times and memory, or
//! `"status": "oom"` when it ran out of memory. `collect` fills a [`ResultsFile`] and writes it
//! with [`to_json`]; the report reads it with [`from_json`].
//!
//! Every field is optional when read, so older files and hand-written ones still load; a field
//! that is absent is left out when written. Keys are written in alphabetical order at every
//! level (the document goes through [`serde_json::Value`], whose objects keep their keys
//! sorted), as every results file so far has them. No I/O here.

use serde::{Deserialize, Deserializer, Serialize};

/// A whole results file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultsFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<Device>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Settings>,
    /// One per configuration, in the order they ran.
    pub results: Vec<RunResult>,
}

/// The GPU the grid ran on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Device {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// `major.minor`, e.g. `9.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_memory_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiprocessors: Option<i64>,
}

/// What the whole grid was run with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf32: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// `pool` or `caching`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<String>,
    /// Activation checkpointing as asked: `auto`, `on` or `off` (each result says whether it
    /// was on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// How the step times were taken, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
}

/// One configuration of the grid.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The size's name (`small`, `2.7B`) or `custom(...)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_model: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_ff: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctx: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    /// `forward`, `forward-backward` or `train`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `fp32` or `bf16`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf32: Option<bool>,
    /// Whether activation checkpointing was on: the blocks kept only their input and ran their
    /// forward again in the backward. Absent in files written before it existed (off then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops_per_step: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_peak_bytes: Option<u64>,
    /// `ok`, or `oom` for a configuration that ran out of device memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// What ran out of memory (`oom` rows only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom: Option<String>,
    /// Host-clock step times, summarised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<StepTimes>,
    /// CUDA-event step times, summarised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<StepTimes>,
    /// Every timed step, host clock (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_step_ms: Option<Vec<f64>>,
    /// Every timed step, CUDA events (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_step_ms: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
    /// Model FLOP utilisation at the mean host step time (0..1), against the GPU's peak for
    /// the run's matrix products ([`crate::roofline::mfu`]); absent for a GPU the table lacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mfu: Option<f64>,
    /// The loss after the last step: absent for an `oom` row, `null` for a mode without one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub loss: Option<Option<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// Files written for the configuration (trace, snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
}

/// A list of step times, summarised (milliseconds).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTimes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_ms: Option<f64>,
    /// Sample standard deviation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub std_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ms: Option<f64>,
    /// Coefficient of variation, std / mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
    /// The first timed step on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_ms: Option<f64>,
}

/// Device memory of a configuration (bytes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// After the model was built (weights, gradients, optimizer state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_build_bytes: Option<u64>,
    /// After the last step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_use_bytes: Option<u64>,
    /// The most at once (with the caching allocator: its `max_memory_allocated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// The whole device in use after the last step, cached pool included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<AllocatorCounters>,
}

/// The caching allocator's counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AllocatorCounters {
    /// `caching`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Over what the peaks were taken, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_window: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_allocated_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_reserved_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_allocs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_entries: Option<u64>,
}

/// A field that is there, `null` or not: `Some(None)` for `null`, so that it is written back.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The file's text: pretty-printed, keys in alphabetical order, with a final newline.
pub fn to_json(file: &ResultsFile) -> serde_json::Result<String> {
    let value = serde_json::to_value(file)?;
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}

/// Read a results file's text.
pub fn from_json(bytes: &[u8]) -> serde_json::Result<ResultsFile> {
    serde_json::from_slice(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results() -> ResultsFile {
        let ran = RunResult {
            size: Some("small".into()),
            d_model: Some(768),
            ctx: Some(128),
            batch: Some(4),
            mode: Some("forward".into()),
            precision: Some("fp32".into()),
            checkpoint: Some(true),
            status: Some("ok".into()),
            host: Some(StepTimes {
                mean_ms: Some(4.39),
                first_ms: Some(4.38),
                ..StepTimes::default()
            }),
            host_step_ms: Some(vec![4.38, 4.4]),
            loss: Some(None),
            memory: Some(Memory {
                peak_bytes: Some(584_274_948),
                allocator: Some(AllocatorCounters {
                    kind: Some("caching".into()),
                    history_entries: Some(957),
                    ..AllocatorCounters::default()
                }),
                ..Memory::default()
            }),
            ..RunResult::default()
        };
        let oom = RunResult {
            size: Some("2.7B".into()),
            status: Some("oom".into()),
            oom: Some("cuMemAlloc of 2.0 GiB".into()),
            ..RunResult::default()
        };
        ResultsFile {
            device: Some(Device {
                name: Some("NVIDIA H200".into()),
                ..Device::default()
            }),
            settings: None,
            results: vec![ran, oom],
        }
    }

    #[test]
    fn what_the_writer_writes_the_reader_reads() {
        let r = results();
        let text = to_json(&r).unwrap();
        assert_eq!(from_json(text.as_bytes()).unwrap(), r);
        // A mode without a loss says so; a row that ran out of memory has no loss at all.
        assert!(text.contains("\"loss\": null"));
        assert_eq!(text.matches("\"loss\"").count(), 1);
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn files_from_before_checkpointing_still_read() {
        let old = r#"{"settings": {"batch": 4}, "results": [{"size": "small", "status": "ok"}]}"#;
        let f = from_json(old.as_bytes()).unwrap();
        assert_eq!(f.results[0].checkpoint, None);
        assert_eq!(f.settings.unwrap().checkpoint, None);
        let text = to_json(&results()).unwrap();
        assert!(text.contains("\"checkpoint\": true"));
    }

    #[test]
    fn keys_are_written_in_alphabetical_order() {
        let text = to_json(&results()).unwrap();
        let first_row: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.contains("\"results\""))
            .skip(2)
            .take_while(|l| !l.starts_with("    }"))
            .filter(|l| l.starts_with("      \""))
            .map(|l| l.trim().split('"').nth(1).unwrap_or_default())
            .collect();
        let mut sorted = first_row.clone();
        sorted.sort_unstable();
        assert_eq!(first_row, sorted);
        assert!(first_row.len() > 5, "{first_row:?}");
    }
}
