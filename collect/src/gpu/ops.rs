//! Typed launches of our kernels (`kernels/*.cu`): one method per operation, taking device
//! addresses and sizes, choosing the `_f32`/`_bf16` variant by activation type and the launch
//! shape. Together with [`Runtime`] (the GPU, the loaded kernels and cuBLAS) this is the whole
//! interface the model uses to reach the device. No allocation here: callers pass buffers.

use cudarc::driver::result as cu;
use cudarc::driver::{LaunchConfig, PushKernelArg};

use crate::error::{CudaContext as _, Result};
use crate::gpu::blas::Blas;
use crate::gpu::device::Gpu;
use crate::gpu::device_memory::{AllocatorKind, DType};
use crate::gpu::flash::{self, FlashFamily, FlashLaunch};
use crate::gpu::kernels::Kernels;

/// The GPU with our kernels and a cuBLAS handle: what a model runs on. One per process.
///
/// Fields drop in declaration order: the cuBLAS handle (and its workspace), the modules and the
/// counters must go while the stream and context they belong to are still alive.
pub struct Runtime {
    pub blas: Blas,
    pub kernels: Kernels,
    pub counters: KernelCounters,
    pub gpu: Gpu,
}

impl Runtime {
    /// Open device 0, compile the kernels for it, create the cuBLAS handle.
    pub fn open() -> Result<Runtime> {
        Runtime::open_with(AllocatorKind::Pool)
    }

    /// [`Runtime::open`] with device memory from `allocator`.
    pub fn open_with(allocator: AllocatorKind) -> Result<Runtime> {
        let gpu = Gpu::open_with(allocator)?;
        let kernels = Kernels::load(&gpu.ctx)?;
        let blas = Blas::new(&gpu)?;
        let counters = KernelCounters::new(&gpu)?;
        Ok(Runtime {
            blas,
            kernels,
            counters,
            gpu,
        })
    }
}

/// Counters our kernels keep between launches, zero between them (the fused norm backward's
/// tickets). [`COUNTERS_BYTES`] taken from the driver directly, outside the device-memory layer:
/// neither cuBLAS's workspace nor the memory a run counts (and its plan) changes for them.
pub struct KernelCounters {
    ptr: u64,
}

/// Bytes of [`KernelCounters`].
pub const COUNTERS_BYTES: usize = 256;

impl KernelCounters {
    fn new(gpu: &Gpu) -> Result<KernelCounters> {
        gpu.ctx.bind_to_thread().during("cuCtxSetCurrent")?;
        // SAFETY: a plain allocation, owned by the returned value and zeroed before it is used.
        let ptr = unsafe { cu::malloc_sync(COUNTERS_BYTES) }.during("cuMemAlloc")?;
        let counters = KernelCounters { ptr };
        // SAFETY: `ptr` holds COUNTERS_BYTES bytes; no work on the device uses it yet.
        unsafe { cu::memset_d8_sync(ptr, 0, COUNTERS_BYTES) }.during("cuMemsetD8")?;
        // The memset runs on the legacy stream: done before our streams use the counters.
        gpu.ctx.synchronize().during("cuCtxSynchronize")?;
        Ok(counters)
    }

    /// The first counter's address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for KernelCounters {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once; cuMemFree waits for the work that uses it. A
        // failure means the context is gone, and the memory with it.
        let _ = unsafe { cu::free_sync(self.ptr) };
    }
}

const THREADS: u32 = 256;

/// The widest row the fused norm backward (`rmsnorm_bwd_fused_v*`) takes: 256 threads of at
/// most 4 float4 columns each.
pub const NORM_BWD_MAX_D: usize = 4096;

/// The most blocks the fused norm backward launches.
const NORM_BWD_MAX_BLOCKS: usize = 256;

/// Whether the fused norm backward takes rows of `d`: at most [`NORM_BWD_MAX_D`], a multiple
/// of 4 (it moves 16 bytes at a time).
pub fn norm_bwd_fused_takes(d: usize) -> bool {
    d <= NORM_BWD_MAX_D && d.is_multiple_of(4)
}

/// How the fused norm backward splits `rows` rows: (rows per block, blocks).
fn norm_bwd_grid(rows: usize) -> (usize, usize) {
    let per_block = rows.div_ceil(NORM_BWD_MAX_BLOCKS).max(1);
    (per_block, rows.div_ceil(per_block))
}

/// Rows of `d` fp32 sums the fused norm backward over `rows` rows needs as scratch: one per
/// block.
pub fn norm_bwd_scratch_rows(rows: usize) -> usize {
    norm_bwd_grid(rows).1
}

/// Blocks of [`THREADS`] threads for one warp per row over `rows` rows.
fn warp_per_row(rows: usize) -> (u32, u32, u32) {
    (rows.div_ceil((THREADS / 32) as usize) as u32, 1, 1)
}

/// Whether the 16-byte SwiGLU kernels run this shape: `d_ff` a multiple of 8 (a vector of either
/// type stays in one half of a row) and the gate's elements within 32 bits.
fn swiglu_vectorized(rows: usize, d_ff: usize) -> bool {
    d_ff.is_multiple_of(8) && rows * d_ff * 2 < (1 << 31)
}

/// Whether the 16-byte kernels of `kernels/attention.cu` (RoPE, the moves of heads) run this
/// shape: heads a multiple of 16 wide and the indices within 32 bits.
fn heads_vectorized(s: &AttnShape) -> bool {
    s.d_head.is_multiple_of(16) && s.elements() < (1 << 31)
}

/// The variant of `kernel` (of `kernels/attention.cu`) that runs over the heads of shape `s`, and
/// the items of its grid-stride loop: the 16-byte vector one where the shape allows it, else the
/// one that takes `scalar_items` items.
fn heads_kernel(kernel: &str, act: DType, s: &AttnShape, scalar_items: usize) -> (String, usize) {
    if heads_vectorized(s) {
        (
            typed(&format!("{kernel}_vec"), act),
            s.elements() * act.bytes() / 16,
        )
    } else {
        (typed(kernel, act), scalar_items)
    }
}

/// The variant of `kernel` for activations of type `act` (`<kernel>_f32`, `<kernel>_bf16`).
fn typed(kernel: &str, act: DType) -> String {
    format!("{kernel}_{}", flash::dtype_suffix(act))
}

/// Launch `$name` with `$grid` blocks of `$block` threads (and `$smem` bytes of dynamic shared
/// memory, 0 when not given) and the arguments given (each an expression of the exact Rust type
/// of the kernel's parameter: u64 for pointers, i32 for int, i64 for long long, f32 for float),
/// on the main stream, or on the stream given after `on`.
macro_rules! launch {
    ($rt:expr, $name:expr, $grid:expr, $block:expr; $($arg:expr),* $(,)?) => {
        launch!(on $rt.gpu.stream, $rt, $name, $grid, $block, 0; $($arg),*)
    };
    ($rt:expr, $name:expr, $grid:expr, $block:expr, $smem:expr; $($arg:expr),* $(,)?) => {
        launch!(on $rt.gpu.stream, $rt, $name, $grid, $block, $smem; $($arg),*)
    };
    (on $stream:expr, $rt:expr, $name:expr, $grid:expr, $block:expr, $smem:expr; $($arg:expr),* $(,)?) => {{
        let name: &str = &$name;
        let f = $rt.kernels.get(name)?;
        let mut builder = $stream.launch_builder(f);
        // The launch reads each argument through its address: every one gets a binding of its
        // own that lives until then.
        $(
            let arg = $arg;
            builder.arg(&arg);
        )*
        let cfg = LaunchConfig {
            grid_dim: $grid,
            block_dim: $block,
            shared_mem_bytes: $smem,
        };
        // SAFETY: the argument list matches the kernel's signature (see each caller) and every
        // pointer is a live device buffer of the size the kernel indexes.
        unsafe { builder.launch(cfg) }.during("cuLaunchKernel")?;
    }};
}

impl Runtime {
    /// Blocks for a grid-stride loop over `n` items: enough to fill the device, no more.
    fn stride_grid(&self, n: usize) -> (u32, u32, u32) {
        let cap = (self.gpu.info.multiprocessors.max(1) as usize) * 16;
        ((n.div_ceil(THREADS as usize)).clamp(1, cap) as u32, 1, 1)
    }

    pub fn init_trunc_normal(&self, p: u64, n: usize, std: f32, seed: u64) -> Result<()> {
        launch!(self, "init_trunc_normal", self.stride_grid(n), (THREADS, 1, 1); p, n as i64, std, seed);
        Ok(())
    }

    pub fn fill(&self, p: u64, n: usize, value: f32) -> Result<()> {
        launch!(self, "fill_f32", self.stride_grid(n), (THREADS, 1, 1); p, n as i64, value);
        Ok(())
    }

    /// `n` fp32 elements to bf16; `n` a multiple of 4, both addresses 16-byte aligned.
    pub fn cast_f32_bf16(&self, src: u64, dst: u64, n: usize) -> Result<()> {
        debug_assert_eq!(n % 4, 0);
        launch!(self, "cast_f32_bf16_x4", self.stride_grid(n / 4), (THREADS, 1, 1); src, dst, (n / 4) as i64);
        Ok(())
    }

    pub fn cast_bf16_f32(&self, src: u64, dst: u64, n: usize) -> Result<()> {
        launch!(self, "cast_bf16_f32", self.stride_grid(n), (THREADS, 1, 1); src, dst, n as i64);
        Ok(())
    }

    /// Rows of `emb` (`d` wide) looked up by `tokens` into `x`.
    pub fn embedding_fwd(
        &self,
        tokens: u64,
        emb: u64,
        x: u64,
        rows: usize,
        d: usize,
    ) -> Result<()> {
        self.embedding("embedding_fwd", [tokens, emb, x], rows, d)
    }

    /// Rows of `dx` added into the rows of `demb` that `tokens` looked up.
    pub fn embedding_bwd(
        &self,
        tokens: u64,
        dx: u64,
        demb: u64,
        rows: usize,
        d: usize,
    ) -> Result<()> {
        self.embedding("embedding_bwd", [tokens, dx, demb], rows, d)
    }

    /// `kernel` (`embedding_fwd` or `embedding_bwd`), one block per row, with its three buffers
    /// in the kernel's order.
    fn embedding(&self, kernel: &str, [a, b, c]: [u64; 3], rows: usize, d: usize) -> Result<()> {
        launch!(self, kernel, (rows as u32, 1, 1), (THREADS, 1, 1); a, b, c, d as i32);
        Ok(())
    }

    /// `y = rmsnorm(x) * w` over rows of `d`; `rstd` (0 for none) receives 1/rms per row.
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm_fwd(
        &self,
        act: DType,
        x: u64,
        w: u64,
        y: u64,
        rstd: u64,
        rows: usize,
        d: usize,
        eps: f32,
    ) -> Result<()> {
        launch!(self, typed("rmsnorm_fwd", act), (rows as u32, 1, 1), (THREADS, 1, 1);
            x, w, y, rstd, d as i32, eps);
        Ok(())
    }

    /// `dx = rmsnorm_backward(dy) + dres` (dres 0 for none; may equal dx); `dx_bf16` (0 for none)
    /// receives a bf16 copy.
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm_bwd(
        &self,
        dy: u64,
        x: u64,
        w: u64,
        rstd: u64,
        dres: u64,
        dx: u64,
        dx_bf16: u64,
        rows: usize,
        d: usize,
    ) -> Result<()> {
        launch!(self, "rmsnorm_bwd", (rows as u32, 1, 1), (THREADS, 1, 1); dy, x, w, rstd, dres, dx, dx_bf16, d as i32);
        Ok(())
    }

    pub fn rmsnorm_dw(
        &self,
        dy: u64,
        x: u64,
        rstd: u64,
        dw: u64,
        rows: usize,
        d: usize,
    ) -> Result<()> {
        launch!(self, "rmsnorm_dw", (d.div_ceil(32) as u32, 1, 1), (32, 16, 1); dy, x, rstd, dw, rows as i32, d as i32);
        Ok(())
    }

    /// [`Runtime::rmsnorm_bwd`] and [`Runtime::rmsnorm_dw`] in one launch, one pass over `dy`
    /// and `x` (rows `d` wide that [`norm_bwd_fused_takes`]): the blocks' sums of the gain's
    /// gradient go to `parts` ([`norm_bwd_scratch_rows`] rows of `d`) and the last blocks to
    /// finish add them into `dw`, in an order that does not depend on which they are. Its two
    /// ticket counters are the first of the runtime's [`KernelCounters`].
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm_bwd_fused(
        &self,
        dy: u64,
        x: u64,
        w: u64,
        rstd: u64,
        dres: u64,
        dx: u64,
        dx_bf16: u64,
        dw: u64,
        parts: u64,
        rows: usize,
        d: usize,
    ) -> Result<()> {
        debug_assert!(norm_bwd_fused_takes(d));
        let (per_block, blocks) = norm_bwd_grid(rows);
        let v = d.div_ceil(4 * THREADS as usize).max(1);
        launch!(self, format!("rmsnorm_bwd_fused_v{v}"), (blocks as u32, 1, 1), (THREADS, 1, 1);
            dy, x, w, rstd, dres, dx, dx_bf16, dw, parts, self.counters.ptr(), rows as i32,
            per_block as i32, d as i32);
        Ok(())
    }

    /// Split `qkv` `[B*T, 3D]` into head-major q, k, v, rotating q and k.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_fwd(
        &self,
        act: DType,
        qkv: u64,
        cs: u64,
        q: u64,
        k: u64,
        v: u64,
        s: AttnShape,
    ) -> Result<()> {
        self.rope("rope_fwd", act, [qkv, cs, q, k, v], s)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn rope_bwd(
        &self,
        act: DType,
        dq: u64,
        dk: u64,
        dv: u64,
        cs: u64,
        dqkv: u64,
        s: AttnShape,
    ) -> Result<()> {
        self.rope("rope_bwd", act, [dq, dk, dv, cs, dqkv], s)
    }

    /// `kernel` (`rope_fwd` or `rope_bwd`) over shape `s` with its five buffers in the kernel's
    /// order: the 16-byte vector version where the shape allows it, else one pair per thread.
    fn rope(
        &self,
        kernel: &str,
        act: DType,
        [a, b, c, d, e]: [u64; 5],
        s: AttnShape,
    ) -> Result<()> {
        let (name, items) = heads_kernel(kernel, act, &s, s.elements() / 2);
        launch!(self, name, self.stride_grid(items), (THREADS, 1, 1);
            a, b, c, d, e, s.batch as i32, s.ctx as i32, s.heads as i32, s.d_head as i32);
        Ok(())
    }

    /// Causal softmax in place over `rows` rows of `ctx` scores.
    pub fn softmax_causal_fwd(&self, act: DType, s: u64, ctx: usize, rows: usize) -> Result<()> {
        launch!(self, typed("softmax_causal_fwd", act), warp_per_row(rows), (THREADS, 1, 1);
            s, ctx as i32, rows as i64);
        Ok(())
    }

    /// `dp` becomes the gradient of the scores, in place.
    pub fn softmax_causal_bwd(
        &self,
        act: DType,
        p: u64,
        dp: u64,
        ctx: usize,
        rows: usize,
    ) -> Result<()> {
        launch!(self, typed("softmax_causal_bwd", act), warp_per_row(rows), (THREADS, 1, 1);
            p, dp, ctx as i32, rows as i64);
        Ok(())
    }

    /// `rows` rows of `width` bytes from `src` (rows `src_pitch` bytes apart) to `dst` (rows
    /// `dst_pitch` bytes apart) and zeros in the rest of each destination row: a head widened
    /// to a kernel's width, or cut back (`dst_pitch == width`). One pass over `dst`
    /// (`copy_rows_x16`) when the pointers, pitches and width are multiples of 16 bytes; a
    /// memset and a strided copy otherwise.
    pub fn copy_rows_zero_fill(
        &self,
        dst: u64,
        dst_pitch: usize,
        src: u64,
        src_pitch: usize,
        width: usize,
        rows: usize,
    ) -> Result<()> {
        debug_assert!(width <= dst_pitch && width <= src_pitch);
        let aligned = [dst as usize, src as usize, dst_pitch, src_pitch, width]
            .iter()
            .all(|x| x.is_multiple_of(16));
        let vectors = (dst_pitch / 16)
            .checked_mul(rows)
            .filter(|&n| aligned && u32::try_from(n).is_ok());
        if let Some(n) = vectors {
            launch!(self, "copy_rows_x16", self.stride_grid(n), (THREADS, 1, 1);
                src, dst, rows as u32, (src_pitch / 16) as u32, (width / 16) as u32,
                (dst_pitch / 16) as u32);
            return Ok(());
        }
        if width < dst_pitch {
            self.gpu.memset_zero(dst, dst_pitch * rows)?;
        }
        self.gpu
            .copy_rows(dst, dst_pitch, src, src_pitch, width, rows)
    }

    pub fn heads_to_tokens(&self, act: DType, src: u64, dst: u64, s: AttnShape) -> Result<()> {
        self.move_heads("heads_to_tokens", act, src, dst, s)
    }

    pub fn tokens_to_heads(&self, act: DType, src: u64, dst: u64, s: AttnShape) -> Result<()> {
        self.move_heads("tokens_to_heads", act, src, dst, s)
    }

    fn move_heads(&self, kernel: &str, act: DType, src: u64, dst: u64, s: AttnShape) -> Result<()> {
        let (name, n) = heads_kernel(kernel, act, &s, s.elements());
        launch!(self, name, self.stride_grid(n), (THREADS, 1, 1);
            src, dst, s.batch as i32, s.ctx as i32, s.heads as i32, s.d_head as i32);
        Ok(())
    }

    pub fn swiglu_fwd(&self, act: DType, h13: u64, g: u64, rows: usize, d_ff: usize) -> Result<()> {
        if swiglu_vectorized(rows, d_ff) {
            let items = rows * d_ff * act.bytes() / 16;
            launch!(self, typed("swiglu_fwd_vec", act), self.stride_grid(items), (THREADS, 1, 1);
                h13, g, rows as u32, d_ff as u32);
            return Ok(());
        }
        launch!(self, typed("swiglu_fwd", act), self.stride_grid(rows * d_ff), (THREADS, 1, 1);
            h13, g, rows as i64, d_ff as i32);
        Ok(())
    }

    pub fn swiglu_bwd(
        &self,
        act: DType,
        h13: u64,
        dg: u64,
        dh13: u64,
        rows: usize,
        d_ff: usize,
    ) -> Result<()> {
        if swiglu_vectorized(rows, d_ff) {
            let items = rows * d_ff * act.bytes() / 16;
            launch!(self, typed("swiglu_bwd_vec", act), self.stride_grid(items), (THREADS, 1, 1);
                h13, dg, dh13, rows as u32, d_ff as u32);
            return Ok(());
        }
        launch!(self, typed("swiglu_bwd", act), self.stride_grid(rows * d_ff), (THREADS, 1, 1);
            h13, dg, dh13, rows as i64, d_ff as i32);
        Ok(())
    }

    /// Per-row cross-entropy into `row_loss`; `dlogits` (0 for none) gets the gradient of the
    /// mean over rows.
    #[allow(clippy::too_many_arguments)]
    pub fn cross_entropy(
        &self,
        act: DType,
        logits: u64,
        targets: u64,
        row_loss: u64,
        dlogits: u64,
        rows: usize,
        vocab: usize,
    ) -> Result<()> {
        let inv_n = 1.0f32 / rows as f32;
        launch!(self, typed("cross_entropy", act), (rows as u32, 1, 1), (512, 1, 1);
            logits, targets, row_loss, dlogits, vocab as i32, inv_n);
        Ok(())
    }

    pub fn mean(&self, x: u64, n: usize, out: u64) -> Result<()> {
        launch!(self, "mean_f32", (1, 1, 1), (1024, 1, 1); x, n as i32, out);
        Ok(())
    }

    /// The launch of `family` for `act` and head width `d`, from [`flash::LAUNCHES`].
    fn flash_launch(
        &self,
        family: FlashFamily,
        act: DType,
        d: usize,
    ) -> Result<&'static FlashLaunch> {
        flash::launch(family, act, d).ok_or_else(|| {
            crate::Error::InvalidConfig(format!(
                "no FlashAttention kernel for {} heads of width {d}",
                flash::dtype_suffix(act)
            ))
        })
    }

    /// The launch of `hopper` where the table has one and its kernel was built for this device,
    /// else that of `family`.
    fn flash_kernel(
        &self,
        hopper: FlashFamily,
        family: FlashFamily,
        act: DType,
        d: usize,
    ) -> Result<&'static FlashLaunch> {
        match flash::launch(hopper, act, d) {
            Some(l) if self.kernels.has(l.name) => Ok(l),
            _ => self.flash_launch(family, act, d),
        }
    }

    /// FlashAttention-2 forward: `o = softmax(scale * q kᵀ [causal]) v` and `lse`, the
    /// logsumexp of each row's scaled scores (fp32 `[BH, T]`), for `q`, `k`, `v`, `o` head-major
    /// `[BH, T, d]` in the activation type, `d` a kernel width. Hopper's own kernel is used where
    /// the launch table has one and it was built for this device.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attention_forward(
        &self,
        act: DType,
        s: FlashShape,
        q: u64,
        k: u64,
        v: u64,
        o: u64,
        lse: u64,
        scale: f32,
        causal: bool,
    ) -> Result<()> {
        let l = self.flash_kernel(FlashFamily::ForwardSm90, FlashFamily::Forward, act, s.d)?;
        launch!(self, l.name, s.grid(l, false), (l.block, 1, 1), l.smem;
            q, k, v, o, lse, s.seq as i32, scale, i32::from(causal));
        Ok(())
    }

    /// FlashAttention-2 backward: `dq`, `dk`, `dv` from `q`, `k`, `v`, the forward's `o` and
    /// `lse`, and `dout` (all head-major `[BH, T, d]` in the activation type but `lse`). The
    /// caller's scratch: `delta` (fp32 `[BH, T]`) and `dq_accum` (fp32 `[BH, T, d]`, zeroed by the
    /// preprocess; in fp32 it is `dq` itself, and `dq` is not written). In bf16 `dq_accum` is
    /// rounded into `dq` at the end.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attention_backward(
        &self,
        act: DType,
        s: FlashShape,
        io: FlashBackwardBuffers,
        scale: f32,
        causal: bool,
    ) -> Result<()> {
        let n = s.bh * s.seq * s.d;
        let pre = self.flash_launch(FlashFamily::Preprocess, act, s.d)?;
        launch!(self, pre.name, s.grid(pre, true), (pre.block, 1, 1), pre.smem;
            io.o, io.dout, io.delta, io.dq_accum, s.seq as i32);
        let l = self.flash_kernel(FlashFamily::BackwardSm90, FlashFamily::Backward, act, s.d)?;
        launch!(self, l.name, s.grid(l, false), (l.block, 1, 1), l.smem;
            io.q, io.k, io.v, io.dout, io.lse, io.delta, io.dk, io.dv, io.dq_accum,
            s.seq as i32, scale, i32::from(causal));
        if act == DType::Bf16 {
            let c = self.flash_launch(FlashFamily::DqConvert, act, s.d)?;
            launch!(self, c.name, self.stride_grid(n.div_ceil(4)), (c.block, 1, 1), c.smem;
                io.dq_accum, io.dq, n as i64);
        }
        Ok(())
    }

    /// One AdamW update over `n` elements (a multiple of 4), on the main stream.
    #[allow(clippy::too_many_arguments)]
    pub fn adamw(&self, p: u64, g: u64, m: u64, v: u64, n: usize, h: AdamWStep) -> Result<()> {
        debug_assert_eq!(n % 4, 0);
        launch!(self, "adamw_x4", self.stride_grid(n / 4), (THREADS, 1, 1);
            p, g, m, v, (n / 4) as i64, h.decay, h.beta1, h.beta2, h.eps, h.step_size, h.bc2_sqrt);
        Ok(())
    }

    /// The AdamW update of one range of `n` elements (a multiple of 4, 16-byte aligned) on the
    /// optimizer's stream, writing the updated parameters' bf16 copy to `p_bf16` too (0 for
    /// none). Ordering it against the main stream is the caller's.
    #[allow(clippy::too_many_arguments)]
    pub fn adamw_range(
        &self,
        p: u64,
        g: u64,
        m: u64,
        v: u64,
        p_bf16: u64,
        n: usize,
        h: AdamWStep,
    ) -> Result<()> {
        debug_assert_eq!(n % 4, 0);
        let blocks = (n / 4).div_ceil(THREADS as usize).max(1) as u32;
        launch!(on self.gpu.side, self, "adamw_range_x4", (blocks, 1, 1), (THREADS, 1, 1), 0;
            p, g, m, v, p_bf16, (n / 4) as i64, h.decay, h.beta1, h.beta2, h.eps, h.step_size,
            h.bc2_sqrt);
        Ok(())
    }
}

/// The shape of one attention: batch, positions, heads, head width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnShape {
    pub batch: usize,
    pub ctx: usize,
    pub heads: usize,
    pub d_head: usize,
}

impl AttnShape {
    /// Elements of one of q, k, v.
    pub fn elements(&self) -> usize {
        self.batch * self.ctx * self.heads * self.d_head
    }
}

/// The shape of a FlashAttention launch: `bh` heads (batch × heads) of `seq` rows of width `d`
/// (one of the kernels' widths).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashShape {
    pub bh: usize,
    pub seq: usize,
    pub d: usize,
}

impl FlashShape {
    /// The grid of launch `l`: (heads, tiles), or (tiles, heads) with `tiles_first`.
    fn grid(&self, l: &FlashLaunch, tiles_first: bool) -> (u32, u32, u32) {
        let tiles = self.seq.div_ceil(l.tile_rows.max(1)) as u32;
        if tiles_first {
            (tiles, self.bh as u32, 1)
        } else {
            (self.bh as u32, tiles, 1)
        }
    }
}

/// The device buffers of a FlashAttention backward (see
/// [`Runtime::flash_attention_backward`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashBackwardBuffers {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub dout: u64,
    pub lse: u64,
    pub delta: u64,
    pub dq_accum: u64,
    /// bf16 `dq`; unused in fp32, where `dq_accum` is `dq`.
    pub dq: u64,
    pub dk: u64,
    pub dv: u64,
}

/// The scalars of one AdamW step, as torch.optim.AdamW derives them from the step count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    /// `1 - lr * weight_decay`.
    pub decay: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// `lr / (1 - beta1^t)`.
    pub step_size: f32,
    /// `sqrt(1 - beta2^t)`.
    pub bc2_sqrt: f32,
}

impl AdamWStep {
    /// The scalars for step `t` (1-based), computed in f64 as PyTorch does in Python.
    pub fn new(t: u64, lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64) -> AdamWStep {
        let bc1 = 1.0 - beta1.powi(t as i32);
        let bc2 = 1.0 - beta2.powi(t as i32);
        AdamWStep {
            decay: (1.0 - lr * weight_decay) as f32,
            beta1: beta1 as f32,
            beta2: beta2 as f32,
            eps: eps as f32,
            step_size: (lr / bc1) as f32,
            bc2_sqrt: bc2.sqrt() as f32,
        }
    }
}

/// The launches of `kernels/precision.cu`: the mixed-precision experiments of
/// [`crate::precision`], each one thread (per row and format) doing sums in a fixed order. Format
/// codes are [`crate::autocast::Float::kernel_code`]s in an i32 device buffer.
impl Runtime {
    /// For each of `cases` cases (accumulator, value and cast format codes, `-1` for no cast, in
    /// `formats`), `value` added `steps` times; the sums into `out` (fp32, one per case).
    pub fn accumulate_sums(
        &self,
        value: f32,
        steps: usize,
        formats: u64,
        cases: usize,
        out: u64,
    ) -> Result<()> {
        launch!(self, "accumulate_sums", (1, 1, 1), (1, 1, 1); value, steps as i32, formats, cases as i32, out);
        Ok(())
    }

    /// LayerNorm's statistics of `rows` rows of `n` fp32 values in each of `nf` formats: `stats`
    /// (4 per row and format), the rows normalised with each variance (`y_naive`, `y_two_pass`,
    /// `n` per row and format), `scratch` as large as those.
    #[allow(clippy::too_many_arguments)]
    pub fn layernorm_in_formats(
        &self,
        x: u64,
        n: usize,
        rows: usize,
        formats: u64,
        nf: usize,
        eps: f32,
        scratch: u64,
        stats: u64,
        y_naive: u64,
        y_two_pass: u64,
    ) -> Result<()> {
        launch!(self, "layernorm_in_formats", ((rows * nf) as u32, 1, 1), (1, 1, 1);
            x, n as i32, formats, nf as i32, eps, scratch, stats, y_naive, y_two_pass);
        Ok(())
    }

    /// The ToyModel's forward and backward for `[batch, width_in, hidden, out]`, from `input`
    /// (the input and parameters) to `out`, in the seven formats of `formats`.
    pub fn toy_step(
        &self,
        input: u64,
        targets: u64,
        formats: u64,
        out: u64,
        scratch: u64,
        [batch, width_in, hidden, classes]: [usize; 4],
    ) -> Result<()> {
        launch!(self, "toy_step", (1, 1, 1), (1, 1, 1);
            input, targets, formats, out, scratch,
            batch as i32, width_in as i32, hidden as i32, classes as i32);
        Ok(())
    }

    /// Our fp16 and bf16 narrowing of `n` (at least 65536) fp32 values beside the hardware's
    /// `cvt.rn` (2-byte outputs), and the 65536 fp16 patterns widened by both (fp32 outputs).
    #[allow(clippy::too_many_arguments)]
    pub fn fp_conversion_check(
        &self,
        input: u64,
        n: usize,
        f16_ours: u64,
        f16_hw: u64,
        bf16_ours: u64,
        bf16_hw: u64,
        widen_ours: u64,
        widen_hw: u64,
    ) -> Result<()> {
        launch!(self, "fp_conversion_check", self.stride_grid(n), (THREADS, 1, 1);
            input, n as i64, f16_ours, f16_hw, bf16_ours, bf16_hw, widen_ours, widen_hw);
        Ok(())
    }
}
