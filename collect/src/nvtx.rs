//! NVTX ranges: every range `collect` opens goes through [`range`], so that the names Nsight
//! Systems sees (`warmup`, `measurement`, `step_N`, `forward`, `backward`, `optimizer`,
//! `attention_matmul_QK`, `attention_softmax`, `attention_matmul_V`, `attention_flash`,
//! `recompute`) are in one place and can also be handed, with host timestamps, to the
//! [`RangeListener`] installed on the thread: the trace's range log ([`crate::trace::session`])
//! and the memory history's phase frames ([`crate::memory::frames`]), together through a
//! [`Fanout`].
//!
//! The calls go to NVIDIA's header-only NVTX3 (compiled by `build.rs`): with no tool attached a
//! push or pop is a branch; under `nsys` or CUPTI the injected tool records them. This module
//! does not time anything on the GPU and records nothing itself.
//!
//! While a step is captured into CUDA graphs, a [`RangeDiversion`] takes the thread's ranges
//! instead: nothing is opened then (no GPU work runs during a capture), and the capture notes
//! where each range opens and closes, to open it there when the graphs replay.

use std::cell::RefCell;
use std::ffi::CString;
use std::time::Instant;

// The names the benchmark uses, as PyTorch's CS336 scripts spell them.
pub const WARMUP: &str = "warmup";
pub const MEASUREMENT: &str = "measurement";
pub const FORWARD: &str = "forward";
pub const BACKWARD: &str = "backward";
pub const OPTIMIZER: &str = "optimizer";
pub const ATTENTION_QK: &str = "attention_matmul_QK";
pub const ATTENTION_SOFTMAX: &str = "attention_softmax";
pub const ATTENTION_V: &str = "attention_matmul_V";
/// The whole attention core, forward or backward, when FlashAttention computes it.
pub const ATTENTION_FLASH: &str = "attention_flash";
/// A block's forward run again inside `backward`, under activation checkpointing.
pub const RECOMPUTE: &str = "recompute";

/// `step_N`.
pub fn step_name(n: usize) -> String {
    format!("step_{n}")
}

extern "C" {
    fn collect_nvtx_range_push(message: *const std::ffi::c_char) -> i32;
    fn collect_nvtx_range_pop() -> i32;
}

/// Receives every range as it opens and closes (host clock), e.g. to write them into a trace.
pub trait RangeListener {
    fn push(&mut self, name: &str, at: Instant);
    fn pop(&mut self, at: Instant);
}

/// Several listeners behind one: each gets every push and pop, in order (a trace writer and the
/// memory history's phase frames, when both are on).
pub struct Fanout(pub Vec<Box<dyn RangeListener>>);

impl RangeListener for Fanout {
    fn push(&mut self, name: &str, at: Instant) {
        for r in &mut self.0 {
            r.push(name, at);
        }
    }

    fn pop(&mut self, at: Instant) {
        for r in &mut self.0 {
            r.pop(at);
        }
    }
}

/// Takes every push and pop of this thread's ranges in place of NVTX and the listener.
pub trait RangeDiversion {
    fn push(&mut self, name: &str);
    fn pop(&mut self);
}

thread_local! {
    static LISTENER: RefCell<Option<Box<dyn RangeListener>>> = const { RefCell::new(None) };
    static DIVERSION: RefCell<Option<Box<dyn RangeDiversion>>> = const { RefCell::new(None) };
}

/// Install (or, with `None`, remove) the diversion of this thread's ranges; returns the old one.
/// A range opened while one is installed closes into it, if it is still installed then.
pub fn set_diversion(d: Option<Box<dyn RangeDiversion>>) -> Option<Box<dyn RangeDiversion>> {
    DIVERSION.with(|r| std::mem::replace(&mut *r.borrow_mut(), d))
}

/// Install (or, with `None`, remove) the listener of this thread's ranges; returns the old one.
pub fn set_listener(listener: Option<Box<dyn RangeListener>>) -> Option<Box<dyn RangeListener>> {
    LISTENER.with(|r| std::mem::replace(&mut *r.borrow_mut(), listener))
}

/// An open range; it closes when dropped.
#[must_use = "a range closes when this guard is dropped"]
pub struct Range {
    /// Opened into a [`RangeDiversion`], not NVTX.
    diverted: bool,
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Open a thread-local NVTX range named `name` (push/pop semantics, nested as called).
pub fn range(name: &str) -> Range {
    let diverted = DIVERSION.with(|d| match d.borrow_mut().as_mut() {
        Some(d) => {
            d.push(name);
            true
        }
        None => false,
    });
    if diverted {
        return Range {
            diverted,
            _not_send: std::marker::PhantomData,
        };
    }
    // Names are ours and never hold NUL; fall back to a lossy copy rather than fail.
    let c = CString::new(name)
        .unwrap_or_else(|_| CString::new(name.replace('\0', " ")).expect("NULs were replaced"));
    // SAFETY: NVTX copies the message during the call; `c` outlives it.
    unsafe {
        collect_nvtx_range_push(c.as_ptr());
    }
    LISTENER.with(|r| {
        if let Some(rec) = r.borrow_mut().as_mut() {
            rec.push(name, Instant::now());
        }
    });
    Range {
        diverted,
        _not_send: std::marker::PhantomData,
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        if self.diverted {
            DIVERSION.with(|d| {
                if let Some(d) = d.borrow_mut().as_mut() {
                    d.pop();
                }
            });
            return;
        }
        // SAFETY: pops the range this guard pushed on this thread.
        unsafe {
            collect_nvtx_range_pop();
        }
        LISTENER.with(|r| {
            if let Some(rec) = r.borrow_mut().as_mut() {
                rec.pop(Instant::now());
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    struct Log(Rc<RefCell<Vec<String>>>);

    impl RangeListener for Log {
        fn push(&mut self, name: &str, _: Instant) {
            self.0.borrow_mut().push(format!("+{name}"));
        }
        fn pop(&mut self, _: Instant) {
            self.0.borrow_mut().push("-".into());
        }
    }

    #[test]
    fn ranges_nest_and_reach_the_listener_without_a_tool_attached() {
        let log = Rc::new(RefCell::new(Vec::new()));
        set_listener(Some(Box::new(Log(log.clone()))));
        {
            let _m = range(MEASUREMENT);
            let _s = range(&step_name(0));
        }
        set_listener(None);
        let _ignored = range(FORWARD);
        assert_eq!(*log.borrow(), ["+measurement", "+step_0", "-", "-"]);
    }

    struct Diverted(Rc<RefCell<Vec<String>>>);

    impl RangeDiversion for Diverted {
        fn push(&mut self, name: &str) {
            self.0.borrow_mut().push(format!("+{name}"));
        }
        fn pop(&mut self) {
            self.0.borrow_mut().push("-".into());
        }
    }

    #[test]
    fn a_diversion_takes_the_ranges_from_the_listener() {
        let (log, diverted) = (
            Rc::new(RefCell::new(Vec::new())),
            Rc::new(RefCell::new(Vec::new())),
        );
        set_listener(Some(Box::new(Log(log.clone()))));
        {
            let _m = range(MEASUREMENT);
            set_diversion(Some(Box::new(Diverted(diverted.clone()))));
            {
                let _f = range(FORWARD);
            }
            let _b = range(BACKWARD);
            set_diversion(None);
        }
        set_listener(None);
        assert_eq!(*log.borrow(), ["+measurement", "-"]);
        assert_eq!(*diverted.borrow(), ["+forward", "-", "+backward"]);
    }
}
