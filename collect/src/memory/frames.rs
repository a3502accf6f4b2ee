//! Our own frames for the memory history: the model names what it allocates (module paths such
//! as `layers.3.attn.scores`) and the benchmark's NVTX ranges name the phase (`step_N`,
//! `forward`, `backward`, `optimizer`), so that every allocator event recorded by
//! [`crate::memory::caching_allocator`] carries a stack a reader can attribute, as PyTorch's Python
//! frames do.
//!
//! Frames go to the [`MemoryContext`] installed on this thread with [`install`]; with none
//! installed (the default, and whenever no snapshot is being recorded) [`module`] and
//! [`module_with`] cost one thread-local lookup and format nothing. Phases reach the context
//! through [`PhaseFrames`], a [`RangeListener`] that [`crate::nvtx`] feeds. This module records
//! nothing itself and touches no device.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

use crate::memory::history::{FrameGuard, MemoryContext};
use crate::nvtx::{self, RangeListener};

thread_local! {
    static CONTEXT: RefCell<Option<MemoryContext>> = const { RefCell::new(None) };
}

/// Install (or, with `None`, remove) the context this thread's frames go to; returns the old one.
pub fn install(context: Option<MemoryContext>) -> Option<MemoryContext> {
    CONTEXT.with(|c| std::mem::replace(&mut *c.borrow_mut(), context))
}

/// Whether frames are being collected on this thread.
pub fn active() -> bool {
    CONTEXT.with(|c| c.borrow().is_some())
}

/// Push the module frame `name` (joined to the enclosing module's path: `attn` inside
/// `layers.3` is `layers.3.attn`); it is popped when the guard drops. `None` when no context is
/// installed.
pub fn module(name: &str) -> Option<FrameGuard> {
    CONTEXT.with(|c| c.borrow().as_ref().map(|ctx| ctx.module(name)))
}

/// [`module`] with a name built only when frames are being collected (`format!` costs an
/// allocation per call otherwise).
pub fn module_with(name: impl FnOnce() -> String) -> Option<FrameGuard> {
    CONTEXT.with(|c| c.borrow().as_ref().map(|ctx| ctx.module(&name())))
}

/// Whether an NVTX range of the benchmark is a phase of the memory timeline: the step and its
/// forward, backward and optimizer parts. `warmup` and `measurement` enclose whole runs, and the
/// attention ranges are covered by the module frames (`layers.N.attn.scores`).
pub fn is_phase(range: &str) -> bool {
    matches!(range, nvtx::FORWARD | nvtx::BACKWARD | nvtx::OPTIMIZER)
        || range
            .strip_prefix("step_")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Turns the benchmark's phase ranges into phase frames of a [`MemoryContext`] (and, while the
/// allocator records, into `START`/`END` annotations).
///
/// With [`PhaseFrames::sync_at_phase_end`], the end of `forward`, `backward` and `optimizer` waits
/// for the device while the switch is on, so that the phase's `END` annotation marks when its
/// work finished rather than when the host had queued it: host-side, an optimizer step that
/// runs for a millisecond on the GPU is queued in microseconds.
pub struct PhaseFrames {
    context: MemoryContext,
    /// For every open range: whether it pushed a frame, and whether its end may synchronize.
    open: Vec<(bool, bool)>,
    sync: Option<PhaseSync>,
}

/// The switch and the call of [`PhaseFrames::sync_at_phase_end`].
type PhaseSync = (Rc<Cell<bool>>, Box<dyn Fn()>);

impl PhaseFrames {
    pub fn new(context: MemoryContext) -> PhaseFrames {
        PhaseFrames {
            context,
            open: Vec::new(),
            sync: None,
        }
    }

    /// Call `sync` at the end of each forward, backward and optimizer range while `on` is set.
    pub fn sync_at_phase_end(mut self, on: Rc<Cell<bool>>, sync: Box<dyn Fn()>) -> PhaseFrames {
        self.sync = Some((on, sync));
        self
    }
}

impl RangeListener for PhaseFrames {
    fn push(&mut self, name: &str, _at: Instant) {
        let phase = is_phase(name);
        if phase {
            self.context.push_phase(name);
        }
        let part = matches!(name, nvtx::FORWARD | nvtx::BACKWARD | nvtx::OPTIMIZER);
        self.open.push((phase, part));
    }

    fn pop(&mut self, _at: Instant) {
        let Some((phase, part)) = self.open.pop() else {
            return;
        };
        if part {
            if let Some((on, sync)) = &self.sync {
                if on.get() {
                    sync();
                }
            }
        }
        if phase {
            self.context.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::history::Clock;

    #[test]
    fn frames_follow_ranges_and_modules_only_when_installed() {
        assert!(module("unused").is_none());
        let ctx = MemoryContext::new(Clock::from_fn(|| 1), 0);
        let old = install(Some(ctx.clone()));
        let mut phases = PhaseFrames::new(ctx.clone());
        let now = Instant::now();
        phases.push("measurement", now);
        phases.push("step_3", now);
        phases.push("forward", now);
        {
            let _l = module_with(|| format!("layers.{}", 3));
            phases.push("attention_matmul_QK", now);
            let _s = module("attn.scores");
            let names: Vec<String> = ctx.current_frames().into_iter().map(|f| f.name).collect();
            assert_eq!(
                names,
                ["layers.3.attn.scores", "layers.3", "forward", "step_3"]
            );
            phases.pop(now);
        }
        phases.pop(now);
        assert_eq!(ctx.depth(), 1);
        phases.pop(now);
        phases.pop(now);
        assert_eq!(ctx.depth(), 0);
        install(old);
        assert!(!active());
    }

    #[test]
    fn phase_ends_synchronize_only_while_switched_on() {
        let ctx = MemoryContext::new(Clock::from_fn(|| 1), 0);
        let on = Rc::new(Cell::new(false));
        let calls = Rc::new(Cell::new(0));
        let c = calls.clone();
        let mut phases = PhaseFrames::new(ctx)
            .sync_at_phase_end(on.clone(), Box::new(move || c.set(c.get() + 1)));
        let now = Instant::now();
        for (switch, want) in [(false, 0), (true, 3)] {
            on.set(switch);
            calls.set(0);
            phases.push("step_0", now);
            for part in ["forward", "backward", "optimizer"] {
                phases.push(part, now);
                phases.push("attention_softmax", now);
                phases.pop(now);
                phases.pop(now);
            }
            phases.pop(now);
            assert_eq!(calls.get(), want);
        }
    }

    #[test]
    fn phases_are_the_step_and_its_parts() {
        for p in ["forward", "backward", "optimizer", "step_0", "step_12"] {
            assert!(is_phase(p), "{p}");
        }
        for p in [
            "warmup",
            "measurement",
            "attention_softmax",
            "step_",
            "step_x",
        ] {
            assert!(!is_phase(p), "{p}");
        }
    }
}
