//! The launch contract of the FlashAttention-2 kernels (`kernels/flash_attention_fwd.cu`,
//! `kernels/flash_attention_bwd.cu`, and Hopper-only `*_sm90.cu` files when there are some), in one
//! table: per kernel family, element type and head width, the kernel's name, its block size, the
//! rows of the sequence one block covers (the tile that sets the grid's sequence dimension) and
//! its dynamic shared memory. Re-tuning a kernel is a one-line edit here; [`crate::gpu::kernels`]
//! sets each kernel's shared-memory limit from this table when it loads them, and
//! [`crate::gpu::ops`] launches from it. Pure data: nothing here touches the device.

use crate::gpu::device_memory::DType;

/// What a kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashFamily {
    /// `O`, `L` from `Q`, `K`, `V`: grid (BH, tiles).
    Forward,
    /// The same on Hopper's own instructions (`*_sm90.cu`, built for `sm_90a`); used in place of
    /// [`FlashFamily::Forward`] when its row is here and its kernel was loaded.
    ForwardSm90,
    /// `Delta = rowsum(dO ⊙ O)`: grid (tiles, BH).
    Preprocess,
    /// `dQ` (accumulated in fp32), `dK`, `dV`: grid (BH, tiles).
    Backward,
    /// The same on Hopper's own instructions; used in place of [`FlashFamily::Backward`] as
    /// [`FlashFamily::ForwardSm90`] is.
    BackwardSm90,
    /// The fp32 `dQ` accumulator to bf16, a grid-stride loop over any grid.
    DqConvert,
}

/// One kernel's launch: `block` threads, `tile_rows` sequence rows per block (0 for a
/// grid-stride kernel), `smem` bytes of dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashLaunch {
    pub family: FlashFamily,
    pub dtype: DType,
    /// Head width; 0 for a kernel that does not depend on it.
    pub d: usize,
    pub name: &'static str,
    pub block: u32,
    pub tile_rows: usize,
    pub smem: u32,
}

/// Above this much dynamic shared memory a kernel must be allowed more before it is launched
/// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).
pub const DEFAULT_SMEM_LIMIT: u32 = 48 * 1024;

/// The head widths the kernels are built for; other widths are padded up to the next one.
pub const HEAD_WIDTHS: [usize; 4] = [16, 32, 64, 128];

const fn row(
    family: FlashFamily,
    dtype: DType,
    d: usize,
    name: &'static str,
    block: u32,
    tile_rows: usize,
    smem: u32,
) -> FlashLaunch {
    FlashLaunch {
        family,
        dtype,
        d,
        name,
        block,
        tile_rows,
        smem,
    }
}

/// The rows of [`LAUNCHES`], one group per kernel family and element type, each kernel named as
/// its file names it:
/// - `Family Type "prefix": (d, threads, tile rows, smem) ...;` one row per head width `d`,
///   named `<prefix>_d<d>`;
/// - `Family Type "prefix" [d ...]: (threads, tile rows, smem);` the same launch at each width;
/// - `Family Type "name" = (threads, tile rows, smem);` one kernel for every width (`d` 0).
macro_rules! launches {
    ([$($done:expr),*]) => {
        &[$($done),*]
    };
    ([$($done:expr),*] $family:ident $dtype:ident $prefix:literal:
        $(($d:literal, $block:literal, $tile:literal, $smem:literal))+; $($rest:tt)*) => {
        launches!([$($done,)* $(
            row($family, $dtype, $d, concat!($prefix, "_d", $d), $block, $tile, $smem)
        ),+] $($rest)*)
    };
    ([$($done:expr),*] $family:ident $dtype:ident $prefix:literal [$($d:literal)+]:
        ($block:literal, $tile:literal, $smem:literal); $($rest:tt)*) => {
        launches!([$($done),*] $family $dtype $prefix:
            $(($d, $block, $tile, $smem))+; $($rest)*)
    };
    ([$($done:expr),*] $family:ident $dtype:ident $name:literal =
        ($block:literal, $tile:literal, $smem:literal); $($rest:tt)*) => {
        launches!([$($done,)* row($family, $dtype, 0, $name, $block, $tile, $smem)] $($rest)*)
    };
}

use DType::{Bf16, F32};
use FlashFamily::{Backward, BackwardSm90, DqConvert, Forward, ForwardSm90, Preprocess};

/// Every kernel's launch, as the kernel files' header comments give them.
pub const LAUNCHES: &[FlashLaunch] = launches!([]
    Forward Bf16 "flash_fwd_bf16":
        (16, 128, 128, 13824) (32, 128, 128, 27648) (64, 128, 128, 55296) (128, 128, 128, 69632);
    Forward F32 "flash_fwd_f32":
        (16, 256, 64, 30464) (32, 256, 64, 42752) (64, 256, 64, 67328) (128, 256, 64, 116480);
    Preprocess Bf16 "flash_bwd_preprocess_bf16" [16 32 64 128]: (256, 64, 0);
    Preprocess F32 "flash_bwd_preprocess_f32" [16 32 64 128]: (256, 64, 0);
    Backward Bf16 "flash_bwd_bf16":
        (16, 128, 128, 23552) (32, 128, 128, 37376) (64, 128, 128, 65024) (128, 256, 128, 114176);
    Backward F32 "flash_bwd_f32":
        (16, 256, 64, 52736) (32, 256, 64, 69120) (64, 256, 64, 101888) (128, 256, 64, 167424);
    DqConvert Bf16 "flash_dq_convert_bf16" = (256, 0, 0);
    // Hopper's kernels, at the widths where they beat the ones above on an H200 (bf16, causal,
    // seq 4096 to 16384): the forward at d 64 and 128, the backward from d 32. The files build
    // every width; the others stay unused.
    ForwardSm90 Bf16 "flash_fwd_sm90_bf16": (64, 256, 128, 75776) (128, 256, 128, 198656);
    BackwardSm90 Bf16 "flash_bwd_sm90_bf16":
        (32, 256, 128, 136192) (64, 256, 128, 201728) (128, 256, 128, 201728);
);

/// The row for `family`, `dtype` and head width `d` (kernel widths only; `d` is ignored for a
/// kernel that does not depend on it).
pub fn launch(family: FlashFamily, dtype: DType, d: usize) -> Option<&'static FlashLaunch> {
    LAUNCHES
        .iter()
        .find(|l| l.family == family && l.dtype == dtype && (l.d == d || l.d == 0))
}

/// The kernel width a head of `d_head` runs at: `d_head` itself when the kernels are built for
/// it, else the next wider one (the head is zero-padded, which changes no score and no
/// gradient); `None` above the widest.
pub fn kernel_width(d_head: usize) -> Option<usize> {
    HEAD_WIDTHS.iter().copied().find(|&w| w >= d_head)
}

/// The element-type suffix of a kernel name.
pub fn dtype_suffix(dtype: DType) -> &'static str {
    match dtype {
        Bf16 => "bf16",
        _ => "f32",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_a_row_per_type_and_width_named_after_them() {
        for family in [Forward, Preprocess, Backward] {
            for dtype in [F32, Bf16] {
                for d in HEAD_WIDTHS {
                    let l = launch(family, dtype, d).expect("a row");
                    let s = dtype_suffix(dtype);
                    let expected = match family {
                        Forward => format!("flash_fwd_{s}_d{d}"),
                        Preprocess => format!("flash_bwd_preprocess_{s}_d{d}"),
                        _ => format!("flash_bwd_{s}_d{d}"),
                    };
                    assert_eq!(l.name, expected);
                    assert!(l.block.is_multiple_of(32) && l.tile_rows > 0);
                }
            }
        }
        let c = launch(DqConvert, Bf16, 64).expect("the converter");
        assert_eq!((c.name, c.tile_rows), ("flash_dq_convert_bf16", 0));
        assert!(launch(Forward, F32, 80).is_none());
    }

    #[test]
    fn rows_are_unique_and_shared_memory_fits_an_h200_block() {
        for (i, a) in LAUNCHES.iter().enumerate() {
            assert!(a.smem <= 227 * 1024, "{}", a.name);
            for b in &LAUNCHES[i + 1..] {
                assert!(a.name != b.name, "{} twice", a.name);
            }
        }
        // The ones the header comments mark (*) need the attribute; the others do not.
        let big: Vec<&str> = LAUNCHES
            .iter()
            .filter(|l| l.smem > DEFAULT_SMEM_LIMIT)
            .map(|l| l.name)
            .collect();
        assert!(big.contains(&"flash_fwd_bf16_d64") && !big.contains(&"flash_fwd_bf16_d32"));
        assert!(big.contains(&"flash_bwd_f32_d16") && !big.contains(&"flash_bwd_bf16_d16"));
    }

    /// Every row equals its kernel's line in the launch table of its file's header comment
    /// (`//     <name>  <tile> [<tile>]  <threads>  <smem>`), and the tile it launches by is one of
    /// that line's tile columns.
    #[test]
    fn rows_equal_the_launch_tables_of_the_kernel_files() {
        let headers: Vec<(&str, Vec<u32>)> = crate::gpu::kernels::SOURCES
            .iter()
            .flat_map(|(_, src)| src.lines())
            .filter_map(|l| {
                let mut words = l.strip_prefix("//     ")?.split_whitespace();
                let name = words.next().filter(|w| w.starts_with("flash_"))?;
                let numbers = words.map_while(|w| w.parse().ok()).collect();
                Some((name, numbers))
            })
            .collect();
        for l in LAUNCHES.iter().filter(|l| l.tile_rows > 0 && l.smem > 0) {
            let (_, n) = headers
                .iter()
                .find(|(name, _)| *name == l.name)
                .unwrap_or_else(|| panic!("{} has no line in its file's launch table", l.name));
            let (tiles, rest) = n.split_at(n.len() - 2);
            assert_eq!(rest, [l.block, l.smem], "{}: threads and smem", l.name);
            assert!(tiles.contains(&(l.tile_rows as u32)), "{}: tile", l.name);
        }
    }

    #[test]
    fn head_widths_pad_up_to_a_kernel_width() {
        assert_eq!(kernel_width(64), Some(64));
        assert_eq!(kernel_width(80), Some(128));
        assert_eq!(kernel_width(2), Some(16));
        assert_eq!(kernel_width(48), Some(64));
        assert_eq!(kernel_width(130), None);
    }
}
