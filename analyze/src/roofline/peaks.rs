//! The roofs: each GPU's peak dense FLOP rates and its memory bandwidth, from the vendors' spec
//! sheets, in one table ([`PEAKS`]), and the entry a trace's GPU name picks ([`for_gpu`]).
//!
//! Every figure is **dense** (NVIDIA's sheets print tensor-core rates "with sparsity", twice the
//! dense rate: those are halved here) and at the boost clock the sheet states. Tensor rates are
//! with FP32 accumulation where a GeForce sheet gives two (PyTorch accumulates in FP32).
//! Sources, per GPU:
//!
//! - A100: NVIDIA A100 Tensor Core GPU datasheet (2021): FP32 19.5, TF32 156, BF16/FP16 312
//!   TFLOP/s; HBM2e 2,039 GB/s (SXM4 80GB), 1,935 GB/s (80GB PCIe), HBM2 1,555 GB/s (40GB).
//! - H100 SXM5 / PCIe / NVL: NVIDIA H100 Tensor Core GPU datasheet (2023): FP32 67 / 51 / 60,
//!   TF32 989 / 756 / 835 sparse, BF16 and FP16 1,979 / 1,513 / 1,671 sparse TFLOP/s; 3.35 /
//!   2.0 / 3.9 TB/s.
//! - H200 SXM / NVL: NVIDIA H200 Tensor Core GPU datasheet (2024): FP32 67 / 60, TF32 989 / 835
//!   sparse, BF16 and FP16 1,979 / 1,671 sparse TFLOP/s; HBM3e 4.8 TB/s.
//! - GH200: NVIDIA GH200 Grace Hopper Superchip datasheet (2024): the H100 SXM's rates; HBM3
//!   4.0 TB/s (96 GB), HBM3e 4.9 TB/s (144 GB).
//! - B200: NVIDIA HGX B200 datasheet (2025), per GPU: FP32 75, TF32 2.2 PF sparse, BF16 and
//!   FP16 4.5 PF sparse; HBM3e 7.7 TB/s.
//! - L4: NVIDIA L4 datasheet (2023): FP32 30.3, TF32 120 sparse, BF16 and FP16 242 sparse
//!   TFLOP/s; GDDR6 300 GB/s.
//! - L40S: NVIDIA L40S datasheet (2023): FP32 91.6, TF32 366 sparse, BF16 and FP16 733 sparse
//!   TFLOP/s; GDDR6 864 GB/s.
//! - RTX 4090: NVIDIA Ada Lovelace architecture whitepaper (v2.1), appendix table: FP32 82.6,
//!   TF32 82.6, BF16 and FP16 with FP32 accumulate 165.2 dense TFLOP/s; GDDR6X 1,008 GB/s.
//! - RTX 5090: NVIDIA RTX Blackwell GPU architecture whitepaper (v1.0), appendix table: FP32
//!   104.8, TF32 104.8, BF16 and FP16 with FP32 accumulate 209.5 dense TFLOP/s; GDDR7 1,792 GB/s.
//! - MI250X: AMD Instinct MI250X data sheet: FP32 vector 47.9, FP32 matrix 95.7, BF16 and FP16
//!   383 TFLOP/s (no TF32); HBM2e 3.2768 TB/s.
//! - MI300X: AMD Instinct MI300X data sheet: FP32 vector 163.4, FP32 matrix 163.4, TF32 653.7,
//!   BF16 and FP16 1,307.4 dense TFLOP/s; HBM3 5.3 TB/s.
//!
//! A GPU is picked by the words of its name (`NVIDIA H100 80GB HBM3`, `NVIDIA GeForce RTX 4090`,
//! `AMD Instinct MI300X`): the first entry all of whose words it holds, ignoring case, the more
//! specific entries of a family first (`H100 PCIe` before `H100`, `GH200` is a word `H200` is
//! not).

use serde::Serialize;

/// The peak dense rates of one GPU, in TFLOP/s, and its memory bandwidth in TB/s.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Peaks {
    /// Tensor (matrix) cores, BF16 inputs.
    pub bf16: f64,
    /// Tensor cores, FP16 inputs.
    pub fp16: f64,
    /// Tensor cores, TF32 (FP32 inputs rounded); `None` where the GPU has no TF32.
    pub tf32: Option<f64>,
    /// Matrix cores, FP32 inputs (AMD); `None` where there are none.
    pub fp32_matrix: Option<f64>,
    /// Vector units, FP32.
    pub fp32: f64,
    /// Memory bandwidth, TB/s.
    pub tbps: f64,
}

/// One row of the table: a GPU, the words of its name, its peaks.
pub struct Entry {
    pub name: &'static str,
    words: &'static [&'static str],
    pub peaks: Peaks,
}

const fn nvidia(fp32: f64, tf32: f64, bf16: f64, tbps: f64) -> Peaks {
    Peaks {
        bf16,
        fp16: bf16,
        tf32: Some(tf32),
        fp32_matrix: None,
        fp32,
        tbps,
    }
}

/// Every GPU the roofline knows, more specific names first.
pub const PEAKS: &[Entry] = &[
    Entry {
        name: "NVIDIA A100 SXM4 80GB",
        words: &["A100", "80GB", "SXM4"],
        peaks: nvidia(19.5, 156.0, 312.0, 2.039),
    },
    Entry {
        name: "NVIDIA A100 80GB PCIe",
        words: &["A100", "80GB"],
        peaks: nvidia(19.5, 156.0, 312.0, 1.935),
    },
    Entry {
        name: "NVIDIA A100 40GB",
        words: &["A100"],
        peaks: nvidia(19.5, 156.0, 312.0, 1.555),
    },
    Entry {
        name: "NVIDIA H100 PCIe",
        words: &["H100", "PCIE"],
        peaks: nvidia(51.0, 378.0, 756.5, 2.0),
    },
    Entry {
        name: "NVIDIA H100 NVL",
        words: &["H100", "NVL"],
        peaks: nvidia(60.0, 417.5, 835.5, 3.9),
    },
    Entry {
        name: "NVIDIA H100 SXM5",
        words: &["H100"],
        peaks: nvidia(67.0, 494.5, 989.5, 3.35),
    },
    Entry {
        name: "NVIDIA GH200 144GB HBM3e",
        words: &["GH200", "144G"],
        peaks: nvidia(67.0, 494.5, 989.5, 4.9),
    },
    Entry {
        name: "NVIDIA GH200 96GB HBM3",
        words: &["GH200"],
        peaks: nvidia(67.0, 494.5, 989.5, 4.0),
    },
    Entry {
        name: "NVIDIA H200 NVL",
        words: &["H200", "NVL"],
        peaks: nvidia(60.0, 417.5, 835.5, 4.8),
    },
    Entry {
        name: "NVIDIA H200 SXM",
        words: &["H200"],
        peaks: nvidia(67.0, 494.5, 989.5, 4.8),
    },
    Entry {
        name: "NVIDIA B200",
        words: &["B200"],
        peaks: nvidia(75.0, 1100.0, 2250.0, 7.7),
    },
    Entry {
        name: "NVIDIA L40S",
        words: &["L40S"],
        peaks: nvidia(91.6, 183.0, 366.5, 0.864),
    },
    Entry {
        name: "NVIDIA L4",
        words: &["L4"],
        peaks: nvidia(30.3, 60.0, 121.0, 0.3),
    },
    Entry {
        name: "NVIDIA GeForce RTX 4090",
        words: &["RTX", "4090"],
        peaks: nvidia(82.6, 82.6, 165.2, 1.008),
    },
    Entry {
        name: "NVIDIA GeForce RTX 5090",
        words: &["RTX", "5090"],
        peaks: nvidia(104.8, 104.8, 209.5, 1.792),
    },
    Entry {
        name: "AMD Instinct MI250X",
        words: &["MI250X"],
        peaks: Peaks {
            bf16: 383.0,
            fp16: 383.0,
            tf32: None,
            fp32_matrix: Some(95.7),
            fp32: 47.9,
            tbps: 3.2768,
        },
    },
    Entry {
        name: "AMD Instinct MI300X",
        words: &["MI300X"],
        peaks: Peaks {
            bf16: 1307.4,
            fp16: 1307.4,
            tf32: Some(653.7),
            fp32_matrix: Some(163.4),
            fp32: 163.4,
            tbps: 5.3,
        },
    },
];

/// The entry of the GPU named `name` (as CUDA or ROCm reports it), if the table has it.
pub fn for_gpu(name: &str) -> Option<&'static Entry> {
    let upper = name.to_ascii_uppercase();
    let words: Vec<&str> = upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    PEAKS
        .iter()
        .find(|e| e.words.iter().all(|w| words.contains(w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_the_drivers_report_them_pick_their_entry() {
        let pick = |n: &str| for_gpu(n).map(|e| e.name);
        assert_eq!(pick("NVIDIA H200"), Some("NVIDIA H200 SXM"));
        assert_eq!(pick("NVIDIA H200 NVL"), Some("NVIDIA H200 NVL"));
        assert_eq!(pick("NVIDIA H100 80GB HBM3"), Some("NVIDIA H100 SXM5"));
        assert_eq!(pick("NVIDIA H100 PCIe"), Some("NVIDIA H100 PCIe"));
        assert_eq!(pick("NVIDIA GH200 480GB"), Some("NVIDIA GH200 96GB HBM3"));
        assert_eq!(
            pick("NVIDIA GH200 144G HBM3e"),
            Some("NVIDIA GH200 144GB HBM3e")
        );
        assert_eq!(pick("NVIDIA A100-SXM4-80GB"), Some("NVIDIA A100 SXM4 80GB"));
        assert_eq!(pick("NVIDIA A100 80GB PCIe"), Some("NVIDIA A100 80GB PCIe"));
        assert_eq!(pick("NVIDIA A100-PCIE-40GB"), Some("NVIDIA A100 40GB"));
        assert_eq!(pick("NVIDIA L4"), Some("NVIDIA L4"));
        assert_eq!(pick("NVIDIA L40S"), Some("NVIDIA L40S"));
        assert_eq!(pick("NVIDIA L40"), None, "not the L4");
        assert_eq!(
            pick("NVIDIA GeForce RTX 4090"),
            Some("NVIDIA GeForce RTX 4090")
        );
        assert_eq!(
            pick("NVIDIA GeForce RTX 5090"),
            Some("NVIDIA GeForce RTX 5090")
        );
        assert_eq!(pick("NVIDIA B200"), Some("NVIDIA B200"));
        assert_eq!(pick("AMD Instinct MI300X"), Some("AMD Instinct MI300X"));
        assert_eq!(
            pick("AMD Instinct MI250X/MI250"),
            Some("AMD Instinct MI250X")
        );
        assert_eq!(pick("Tesla V100-SXM2-16GB"), None);
    }

    #[test]
    fn tensor_rates_are_dense_halves_of_the_sparse_figures() {
        let h200 = for_gpu("NVIDIA H200").unwrap().peaks;
        assert_eq!(h200.bf16 * 2.0, 1979.0);
        assert_eq!(h200.tf32.map(|t| t * 2.0), Some(989.0));
        for e in PEAKS {
            let p = e.peaks;
            assert!(p.bf16 >= p.fp32 && p.tbps > 0.0, "{}", e.name);
        }
    }
}
