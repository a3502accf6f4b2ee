//! `collect attention`: the attention core alone ([`crate::transformer::attention`]), naive or
//! FlashAttention-2, over a grid of head widths, sequence lengths and precisions, timed as the
//! CS336 assignment's `pytorch_attention` benchmark times PyTorch's: random `Q`, `K`, `V`
//! (`[batch, heads, seq, d]`), warm-up passes, then forward passes, the memory in use before the
//! backward, then backward passes, each pass timed by the host clock from its launch to the end
//! of a stream synchronize.
//!
//! - Memory is counted by the device-memory layer, from what was in use before the row's `Q`,
//!   `K`, `V` were made: "before the backward" is `Q`, `K`, `V` and everything a forward leaves
//!   (its output and what it keeps: `P` naive, `L` flash); the output gradient `dO`, made before
//!   them, is counted in neither that nor the peak.
//! - A backward pass needs a forward's saved tensors: each is preceded by a forward that is not
//!   timed and opens no pass range. `Q`, `K`, `V` and `dO` are lent to it, so they stay alive as
//!   they do under PyTorch's `retain_graph`.
//! - Huge rows are cut short: a phase stops once its passes have taken
//!   [`AttentionBenchOptions::max_seconds`], after at least [`MIN_PASSES`]; the row says how many
//!   ran.
//! - Ranges: one per configuration (`attention d64 seq4096 bf16 causal naive`), `warmup` around
//!   the warm-up passes, and `forward` / `backward` around each timed pass, with the attention's
//!   own ranges inside, so an Nsight Systems capture feeds `analyze`.
//!
//! A configuration that cannot run is a row with its reason ([`AttentionOutcome`]). Rows, the
//! table and the JSON are [`report`]'s; nothing here prints.

pub mod report;

use std::str::FromStr;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::gpu::device_memory::{Buffer, DType};
use crate::gpu::ops::{AttnShape, Runtime};
use crate::nvtx::{self, range};
use crate::transformer::attention::{self, AttentionCore, Input};
use crate::transformer::config::{attention_refusal, Attention, Precision};

/// The fewest passes a phase runs however long they take.
pub const MIN_PASSES: usize = 5;

/// A named grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// The assignment's `pytorch_attention` grid (the default): batch 8, no head dimension
    /// (heads 1), d 16..128, seq 256..16384, fp32, causal as the PyTorch reference measured it.
    PytorchAttention,
    /// The assignment's `flash_benchmarking` grid: batch 1, causal, seq 128..65536 by powers of
    /// two, d 16..128, fp32 and bf16.
    FlashBenchmarking,
    /// The class leaderboard's shape: batch 1, 16 heads, seq 16384, d 64, bf16, causal, forward
    /// and backward.
    Leaderboard,
}

impl Preset {
    pub const NAMES: [&'static str; 3] = ["pytorch-attention", "flash-benchmarking", "leaderboard"];

    /// The preset's grid, with `passes` and `warmup` at their defaults.
    pub fn options(self) -> AttentionBenchOptions {
        let base = AttentionBenchOptions {
            impls: vec![Attention::Naive, Attention::Flash],
            batch: 8,
            heads: 1,
            ds: vec![16, 32, 64, 128],
            seqs: vec![256, 1024, 4096, 8192, 16384],
            precisions: vec![Precision::Fp32],
            causal: true,
            passes: 100,
            warmup: 5,
            max_seconds: 3.0,
            seed: 0,
        };
        match self {
            Preset::PytorchAttention => base,
            Preset::FlashBenchmarking => AttentionBenchOptions {
                batch: 1,
                seqs: (7..=16).map(|p| 1 << p).collect(),
                precisions: vec![Precision::Fp32, Precision::Bf16],
                ..base
            },
            Preset::Leaderboard => AttentionBenchOptions {
                batch: 1,
                heads: 16,
                ds: vec![64],
                seqs: vec![16384],
                precisions: vec![Precision::Bf16],
                ..base
            },
        }
    }
}

impl FromStr for Preset {
    type Err = Error;
    fn from_str(s: &str) -> Result<Preset> {
        match s {
            "pytorch-attention" => Ok(Preset::PytorchAttention),
            "flash-benchmarking" => Ok(Preset::FlashBenchmarking),
            "leaderboard" => Ok(Preset::Leaderboard),
            other => Err(Error::InvalidConfig(format!(
                "unknown preset `{other}` (expected {})",
                Preset::NAMES.join(", ")
            ))),
        }
    }
}

/// What `collect attention` was asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionBenchOptions {
    pub impls: Vec<Attention>,
    pub batch: usize,
    pub heads: usize,
    pub ds: Vec<usize>,
    pub seqs: Vec<usize>,
    pub precisions: Vec<Precision>,
    pub causal: bool,
    /// Timed passes per phase (forward, backward), before the time cap.
    pub passes: usize,
    /// Forward and backward passes before the timed ones.
    pub warmup: usize,
    /// A phase stops after this many seconds of passes, once [`MIN_PASSES`] have run.
    pub max_seconds: f64,
    pub seed: u64,
}

impl Default for AttentionBenchOptions {
    fn default() -> AttentionBenchOptions {
        Preset::PytorchAttention.options()
    }
}

impl AttentionBenchOptions {
    /// Every configuration, in the order they run: precision, d, seq, then the implementations
    /// side by side.
    pub fn grid(&self) -> Vec<AttentionConfig> {
        let mut out = Vec::new();
        for &precision in &self.precisions {
            for &d in &self.ds {
                for &seq in &self.seqs {
                    for &attention in &self.impls {
                        out.push(AttentionConfig {
                            attention,
                            batch: self.batch,
                            heads: self.heads,
                            d,
                            seq,
                            precision,
                            causal: self.causal,
                        });
                    }
                }
            }
        }
        out
    }

    /// Values that make no grid at all: an error, not a row.
    pub fn validate(&self) -> Result<()> {
        let empty = [
            ("--impl", self.impls.is_empty()),
            ("--d", self.ds.is_empty()),
            ("--seq", self.seqs.is_empty()),
            ("--precision", self.precisions.is_empty()),
        ];
        if let Some((flag, _)) = empty.iter().find(|(_, e)| *e) {
            return Err(Error::InvalidConfig(format!(
                "{flag} needs at least one value"
            )));
        }
        if self.batch == 0 || self.heads == 0 || self.passes == 0 {
            return Err(Error::InvalidConfig(
                "--batch, --heads and --passes must be at least 1".to_owned(),
            ));
        }
        if let Some(d) = self.ds.iter().find(|&&d| d == 0 || !d.is_multiple_of(2)) {
            return Err(Error::InvalidConfig(format!(
                "head width {d}: --d takes even widths"
            )));
        }
        if self.seqs.contains(&0) {
            return Err(Error::InvalidConfig("--seq must be at least 1".to_owned()));
        }
        if self.max_seconds.is_nan() || self.max_seconds <= 0.0 {
            return Err(Error::InvalidConfig(
                "--max-seconds must be positive".to_owned(),
            ));
        }
        Ok(())
    }
}

/// One row of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionConfig {
    pub attention: Attention,
    pub batch: usize,
    pub heads: usize,
    pub d: usize,
    pub seq: usize,
    pub precision: Precision,
    pub causal: bool,
}

impl AttentionConfig {
    /// The configuration's NVTX range: `attention d64 seq4096 bf16 causal naive`.
    pub fn label(&self) -> String {
        format!(
            "attention d{} seq{} {} {} {}",
            self.d,
            self.seq,
            self.precision,
            if self.causal { "causal" } else { "full" },
            self.attention
        )
    }

    pub fn shape(&self) -> AttnShape {
        AttnShape {
            batch: self.batch,
            ctx: self.seq,
            heads: self.heads,
            d_head: self.d,
        }
    }

    /// Matrix FLOPs of one forward: `4 · batch · heads · seq² · d` (two products of two FLOPs
    /// per multiply-add), half of it with a causal mask.
    pub fn forward_flops(&self) -> f64 {
        let full =
            4.0 * (self.batch * self.heads) as f64 * (self.seq as f64).powi(2) * self.d as f64;
        if self.causal {
            full / 2.0
        } else {
            full
        }
    }

    /// FLOPs of one backward, counted as FlashAttention counts them for every implementation:
    /// 2.5 × the forward's (five products against two, the scores recomputed).
    pub fn backward_flops(&self) -> f64 {
        2.5 * self.forward_flops()
    }

    /// Why this row cannot run, if it cannot: its shape, or naive without a mask; the hint
    /// names the implementation that would run it.
    pub fn refusal(&self) -> Option<String> {
        if let Some(u) = attention::unsupported(self.attention, self.causal) {
            return Some(u.to_string());
        }
        attention_refusal(self.attention, self.batch, self.heads, self.seq, self.d).map(|r| match r
            .alternative
        {
            Some(a) => format!("{} (try --impl {a})", r.reason),
            None => r.reason,
        })
    }

    fn act(&self) -> DType {
        match self.precision {
            Precision::Fp32 => DType::F32,
            Precision::Bf16 => DType::Bf16,
        }
    }
}

/// A row that ran.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionMeasured {
    /// Mean host-clock time of a forward pass, ms.
    pub fwd_ms: f64,
    pub bwd_ms: f64,
    pub fwd_passes: usize,
    pub bwd_passes: usize,
    /// Bytes in use after a forward, before its backward, beyond what was in use before `Q`,
    /// `K`, `V`.
    pub mem_before_bwd: u64,
    /// The most in use at once over the row, on the same base.
    pub peak: u64,
}

/// How a row ended.
#[derive(Clone, Debug, PartialEq)]
pub enum AttentionOutcome {
    Ran(AttentionMeasured),
    OutOfMemory,
    /// Not started: why.
    Refused(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct AttentionRow {
    pub config: AttentionConfig,
    pub outcome: AttentionOutcome,
}

/// Run every configuration of `opts`; `progress` gets a line as each starts and ends. A row
/// that runs out of memory frees what it held and the grid goes on; any other error ends it.
pub fn run(
    rt: &Runtime,
    opts: &AttentionBenchOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<AttentionRow>> {
    opts.validate()?;
    let grid = opts.grid();
    let mut rows = Vec::with_capacity(grid.len());
    for (i, config) in grid.iter().enumerate() {
        let at = format!("[{}/{}] {}", i + 1, grid.len(), config.label());
        let outcome = match config.refusal() {
            Some(reason) => AttentionOutcome::Refused(reason),
            None => {
                progress(&format!("{at}: running"));
                let result = run_one(rt, config, opts);
                rt.gpu.memory.release_cached()?;
                match result {
                    Ok(m) => AttentionOutcome::Ran(m),
                    Err(e) if e.is_oom() => AttentionOutcome::OutOfMemory,
                    Err(e) => return Err(e),
                }
            }
        };
        progress(&format!("{at}: {}", report::status(&outcome)));
        rows.push(AttentionRow {
            config: *config,
            outcome,
        });
    }
    Ok(rows)
}

/// `len` values of a standard normal (truncated at ±3) in `dtype`, made on the device.
fn random(rt: &Runtime, dtype: DType, len: usize, seed: u64) -> Result<Buffer> {
    let wide = rt.gpu.memory.alloc(DType::F32, len)?;
    rt.init_trunc_normal(wide.ptr(), len, 1.0, seed)?;
    if dtype == DType::F32 {
        return Ok(wide);
    }
    let narrow = rt.gpu.memory.alloc(dtype, len)?;
    rt.cast_f32_bf16(wide.ptr(), narrow.ptr(), len)?;
    Ok(narrow)
}

/// Passes timed until `passes` have run, or `max_seconds` have gone by after [`MIN_PASSES`]
/// (at least `min`); returns the mean and the count.
fn timed(
    passes: usize,
    min: usize,
    max_seconds: f64,
    mut pass: impl FnMut() -> Result<f64>,
) -> Result<(f64, usize)> {
    let (mut total, mut n) = (0.0, 0);
    while n < passes {
        total += pass()?;
        n += 1;
        if n >= min && total >= max_seconds * 1e3 {
            break;
        }
    }
    Ok((total / n.max(1) as f64, n))
}

fn run_one(
    rt: &Runtime,
    config: &AttentionConfig,
    opts: &AttentionBenchOptions,
) -> Result<AttentionMeasured> {
    let _r = range(&config.label());
    let mem = &rt.gpu.memory;
    let (act, shape) = (config.act(), config.shape());
    let n = shape.elements();
    let seed = opts.seed.wrapping_mul(4);
    let d_out = random(rt, act, n, seed + 3)?;
    let base = mem.stats().in_use;
    let (q, k, v) = (
        random(rt, act, n, seed)?,
        random(rt, act, n, seed + 1)?,
        random(rt, act, n, seed + 2)?,
    );
    rt.gpu.synchronize()?;
    mem.reset_peak();
    let core = AttentionCore {
        rt,
        attention: config.attention,
        act,
        shape,
        causal: config.causal,
    };
    let backward = |saved| {
        core.backward(
            Input::Borrowed(&d_out),
            Input::Borrowed(&q),
            Input::Borrowed(&k),
            Input::Borrowed(&v),
            saved,
        )
    };
    if opts.warmup > 0 {
        let _w = range(nvtx::WARMUP);
        let warm = || -> Result<f64> {
            let t0 = Instant::now();
            let (_output, saved) = core.forward(&q, &k, &v)?.split();
            let grads = backward(saved)?;
            rt.gpu.synchronize()?;
            drop(grads);
            Ok(t0.elapsed().as_secs_f64() * 1e3)
        };
        timed(opts.warmup, 1, opts.max_seconds, warm)?;
    }
    let (fwd_ms, fwd_passes) = timed(opts.passes, MIN_PASSES, opts.max_seconds, || {
        let _p = range(nvtx::FORWARD);
        let t0 = Instant::now();
        let out = core.forward(&q, &k, &v)?;
        rt.gpu.synchronize()?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        drop(out);
        Ok(ms)
    })?;
    let mut mem_before_bwd = 0;
    let (bwd_ms, bwd_passes) = timed(opts.passes, MIN_PASSES, opts.max_seconds, || {
        let (output, saved) = core.forward(&q, &k, &v)?.split();
        rt.gpu.synchronize()?;
        mem_before_bwd = mem_before_bwd.max(mem.stats().in_use - base);
        let _p = range(nvtx::BACKWARD);
        let t0 = Instant::now();
        let grads = backward(saved)?;
        rt.gpu.synchronize()?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        drop((grads, output));
        Ok(ms)
    })?;
    Ok(AttentionMeasured {
        fwd_ms,
        bwd_ms,
        fwd_passes,
        bwd_passes,
        mem_before_bwd,
        peak: mem.stats().peak - base,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_grid_is_the_assignments() {
        let o = AttentionBenchOptions::default();
        let g = o.grid();
        assert_eq!(g.len(), 2 * 4 * 5);
        assert!(g.iter().all(|c| c.batch == 8 && c.heads == 1 && c.causal));
        assert_eq!(
            (o.passes, o.precisions.as_slice()),
            (100, &[Precision::Fp32][..])
        );
        // The implementations of one shape side by side.
        assert_eq!(
            (g[0].attention, g[1].attention, g[0].seq, g[1].seq),
            (Attention::Naive, Attention::Flash, 256, 256)
        );
        assert_eq!((g[2].d, g[2].seq), (16, 1024));
    }

    #[test]
    fn presets_set_their_grids() {
        let f = "flash-benchmarking".parse::<Preset>().unwrap().options();
        assert_eq!(f.seqs.first(), Some(&128));
        assert_eq!(f.seqs.last(), Some(&65536));
        assert_eq!(f.seqs.len(), 10);
        assert_eq!((f.batch, f.heads, f.causal), (1, 1, true));
        assert_eq!(f.precisions, [Precision::Fp32, Precision::Bf16]);
        let l = Preset::Leaderboard.options();
        let g = l.grid();
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[1].batch, g[1].heads, g[1].seq, g[1].d, g[1].precision),
            (1, 16, 16384, 64, Precision::Bf16)
        );
        assert!(g[1].causal);
        assert!("leader".parse::<Preset>().is_err());
    }

    #[test]
    fn flops_count_the_causal_half_and_a_backward_of_two_and_a_half() {
        let c = Preset::Leaderboard.options().grid()[1];
        let full = 4.0 * 16.0 * 16384f64.powi(2) * 64.0;
        assert_eq!(c.forward_flops(), full / 2.0);
        assert_eq!(c.backward_flops(), 2.5 * full / 2.0);
        let nc = AttentionConfig { causal: false, ..c };
        assert_eq!(nc.forward_flops(), full);
        assert_eq!(c.label(), "attention d64 seq16384 bf16 causal flash");
    }

    #[test]
    fn rows_that_cannot_run_say_why() {
        let c = Preset::FlashBenchmarking.options().grid();
        let naive_64k = c
            .iter()
            .find(|c| c.seq == 65536 && c.attention == Attention::Naive)
            .unwrap();
        let r = naive_64k.refusal().unwrap();
        assert!(r.ends_with("over the 2^31 limit (try --impl flash)"), "{r}");
        let flash_64k = AttentionConfig {
            attention: Attention::Flash,
            ..*naive_64k
        };
        assert_eq!(flash_64k.refusal(), None);
        let full = AttentionConfig {
            causal: false,
            ..c[0]
        };
        assert!(full.refusal().unwrap().contains("causal only"));
        let wide = AttentionConfig {
            d: 256,
            ..flash_64k
        };
        assert!(wide.refusal().unwrap().contains("up to 128 wide"));
    }

    #[test]
    fn phases_stop_at_the_time_cap_after_the_fewest_passes() {
        let slow = || Ok(1000.0);
        assert_eq!(timed(100, MIN_PASSES, 3.0, slow).unwrap(), (1000.0, 5));
        let fast = || Ok(1.0);
        assert_eq!(timed(100, MIN_PASSES, 3.0, fast).unwrap(), (1.0, 100));
        let mut i = 0.0;
        let growing = || {
            i += 1.0;
            Ok(i * 500.0)
        };
        // 500 + 1000 + 1500 ms reach 3 s on the third pass, but five run.
        assert_eq!(timed(100, MIN_PASSES, 3.0, growing).unwrap(), (1500.0, 5));
    }

    #[test]
    fn bad_grids_are_errors() {
        let ok = AttentionBenchOptions::default();
        assert!(ok.validate().is_ok());
        for bad in [
            AttentionBenchOptions {
                ds: vec![],
                ..ok.clone()
            },
            AttentionBenchOptions {
                ds: vec![15],
                ..ok.clone()
            },
            AttentionBenchOptions {
                passes: 0,
                ..ok.clone()
            },
            AttentionBenchOptions {
                max_seconds: 0.0,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
