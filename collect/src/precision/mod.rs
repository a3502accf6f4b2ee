//! `collect precision`: the mixed-precision experiments of the CS336 assignment, computed by the
//! kernels of `kernels/precision.cu` on the GPU, or by their CPU emulation:
//!
//! - [`accumulate`]: 0.01 added to an accumulator 1000 times in each pairing of fp32, fp16 and
//!   bf16 accumulators and values;
//! - [`toy`]: the assignment's ToyModel run through collect's autocast policy
//!   ([`crate::autocast`]), the one the transformer follows, for fp16 and bf16: the dtype of each
//!   tensor, beside PyTorch's ([`pytorch`]);
//! - [`layernorm`]: LayerNorm's mean, variance and output computed in fp16, bf16 and fp32 on rows
//!   that overflow fp16 or cancel catastrophically, against an fp64 reference.
//!
//! The emulation ([`Engine::Cpu`]) repeats each kernel operation by operation with the exact
//! roundings of [`rounding`]; the unit tests check it against PyTorch's numbers, and the GPU tests
//! check the kernels against it. [`report`] turns the results into tables and the JSON rows of
//! the committed results file. Nothing here belongs to the transformer's step.

pub mod accumulate;
pub mod layernorm;
pub mod pytorch;
pub mod report;
pub mod rounding;
pub mod toy;

use crate::error::Result;
use crate::gpu::ops::Runtime;
use crate::transformer::splitmix64;

/// Which experiments to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Experiment {
    Accumulate,
    Toy,
    Layernorm,
    All,
}

impl Experiment {
    fn includes(self, one: Experiment) -> bool {
        self == Experiment::All || self == one
    }
}

/// What computes the experiments.
#[derive(Clone, Copy)]
pub enum Engine<'r> {
    /// The kernels of `kernels/precision.cu` on this runtime's GPU.
    Gpu(&'r Runtime),
    /// Their emulation on the CPU (no GPU needed).
    Cpu,
}

impl Engine<'_> {
    /// The device's name, or `CPU emulation`.
    pub fn describe(&self) -> String {
        match self {
            Engine::Gpu(rt) => rt.gpu.info.name.clone(),
            Engine::Cpu => "CPU emulation".to_owned(),
        }
    }
}

/// The results of the experiments that ran (the others are empty).
#[derive(Clone, Debug, PartialEq)]
pub struct Results {
    /// Where they were computed: the GPU's name, or `CPU emulation`.
    pub source: String,
    pub accumulate: Vec<accumulate::Sum>,
    pub toy: Vec<toy::ToyRun>,
    pub layernorm: Vec<layernorm::Row>,
}

/// Run `which` on `engine`.
pub fn run(engine: Engine, which: Experiment) -> Result<Results> {
    let mut r = Results {
        source: engine.describe(),
        accumulate: Vec::new(),
        toy: Vec::new(),
        layernorm: Vec::new(),
    };
    if which.includes(Experiment::Accumulate) {
        r.accumulate = match engine {
            Engine::Gpu(rt) => accumulate::on_gpu(rt)?,
            Engine::Cpu => accumulate::emulate(),
        };
    }
    if which.includes(Experiment::Toy) {
        for low in toy::AUTOCASTS {
            r.toy.push(match engine {
                Engine::Gpu(rt) => toy::on_gpu(rt, low)?,
                Engine::Cpu => toy::emulate(low),
            });
        }
    }
    if which.includes(Experiment::Layernorm) {
        r.layernorm = match engine {
            Engine::Gpu(rt) => layernorm::on_gpu(rt)?,
            Engine::Cpu => layernorm::emulate(),
        };
    }
    Ok(r)
}

/// A number uniform in `[0, 1)` (53 bits), element `i` of the stream `seed`.
fn uniform(seed: u64, i: u64) -> f64 {
    let h = splitmix64(seed ^ splitmix64(i));
    (h >> 11) as f64 * (-53f64).exp2()
}

/// A standard normal number (Box-Muller), element `i` of the stream `seed`.
fn normal(seed: u64, i: u64) -> f64 {
    let u1 = 1.0 - uniform(seed, 2 * i); // (0, 1]
    let u2 = uniform(seed, 2 * i + 1);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The experiments' kernels, as `kernels/precision.cu` names them.
pub const KERNELS: [&str; 4] = [
    "accumulate_sums",
    "layernorm_in_formats",
    "toy_step",
    "fp_conversion_check",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_file_defines_every_kernel_launched() {
        let (_, src) = crate::gpu::kernels::SOURCES
            .iter()
            .find(|(file, _)| *file == "precision.cu")
            .expect("precision.cu is compiled with the other kernels");
        for name in KERNELS {
            assert!(
                src.contains(&format!("extern \"C\" __global__ void {name}(")),
                "{name}"
            );
        }
    }

    #[test]
    fn all_runs_the_three() {
        let r = run(Engine::Cpu, Experiment::All).unwrap();
        assert_eq!(r.source, "CPU emulation");
        assert_eq!(r.accumulate.len(), accumulate::CASES.len());
        assert_eq!(r.toy.len(), 2);
        assert_eq!(
            r.layernorm.len(),
            layernorm::INPUTS.len() * layernorm::FORMATS.len()
        );
        let one = run(Engine::Cpu, Experiment::Toy).unwrap();
        assert!(one.accumulate.is_empty() && one.layernorm.is_empty());
    }
}
