//! Operators: the PyTorch operator call that launched a piece of GPU work. A CUDA API call
//! belongs to the innermost operator call that holds its start on its own thread; a kernel
//! belongs to the operator call of its launch call (found by correlation id,
//! [`super::launches`]). The outermost call of that chain is its top-level operator
//! (`aten::linear` over `aten::addmm`, an autograd node over the operators of its backward).
//!
//! Operator calls come from one of two records of the same scopes:
//!
//! - Kineto's `cpu_op` events ([`Trace::ops`]), with the inputs' shapes, types and scalar values
//!   where `record_shapes` kept them. Kineto also ties each runtime call to an operator by its
//!   `External id`; the call found by time is that one for every kernel of the Kineto fixture
//!   (`tests/integration/operators.rs` checks it), so time alone is the rule, for both formats.
//! - In an nsys export, the NVTX ranges PyTorch's `emit_nvtx` pushes around every operator
//!   (`aten::mm, seq = 45, op_id = 678, sizes = [[4, 768], [768, 768]], input_op_ids = ...`): a
//!   host range is an operator call when its label carries emit_nvtx's numbers, or names an ATen
//!   operator (`aten::empty`, as older PyTorch labels calls without a sequence number). Their
//!   operator is the label's first part ([`group_name`]), their shapes the `sizes` list; types
//!   are not in the label.
//!
//! An operator call is a scope, so the calls of one thread nest: the innermost call holding a
//! time is the last one started at or before it, or the nearest enclosing call of that one
//! ([`Operators::innermost`]). This module finds calls; what their work costs is
//! [`crate::roofline`]'s, and what is summed per operator the profile's.

use crate::fast_hash::FastMap;
use crate::model::trace::{StrId, Trace};

use super::ranges::thread_key;

/// No operator call.
pub const NONE: u32 = u32::MAX;

/// The name a range groups under: PyTorch's `emit_nvtx` labels without the sequence number, op
/// id, sizes and input op ids it appends (`aten::mm, seq = 45, op_id = 678` → `aten::mm`), which
/// differ on every call and mean nothing across runs; any other name as it is.
pub fn group_name(label: &str) -> &str {
    EMIT_NVTX_KEYS
        .iter()
        .filter_map(|k| label.find(k))
        .min()
        .map_or(label, |i| &label[..i])
}

/// What `emit_nvtx` appends to an operator's name.
const EMIT_NVTX_KEYS: [&str; 4] = [", seq = ", ", op_id = ", ", sizes = ", ", input_op_ids = "];

/// The `sizes = [...]` list of an `emit_nvtx` label (`record_shapes=True`), as written.
pub fn emit_nvtx_sizes(label: &str) -> Option<&str> {
    const KEY: &str = ", sizes = ";
    let rest = &label[label.find(KEY)? + KEY.len()..];
    let end = rest.find(", input_op_ids = ").unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// Whether a range's label is an operator call's: `emit_nvtx`'s numbers, or an ATen name.
pub fn is_operator_label(label: &str) -> bool {
    group_name(label).len() != label.len() || label.starts_with("aten::")
}

/// Where a trace's operator calls come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OperatorSource {
    /// Kineto's `cpu_op` events.
    CpuOp,
    /// `emit_nvtx` NVTX ranges.
    EmitNvtx,
}

/// What a call's cost is read from, stored once for every call that shares it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    /// The operator (an index into [`Operators::names`]).
    pub name: u32,
    /// The inputs' shapes, as one text in one spelling whatever the source
    /// (`[[4, 768], [768, 768]]`).
    pub shapes: Option<StrId>,
    /// The inputs' types (`["float", "float"]`), where recorded.
    pub types: Option<StrId>,
    /// The scalar inputs' values (`["", "True"]`), where recorded.
    pub concrete: Option<StrId>,
    /// FLOPs the profiler counted, where it wrote them.
    pub flops: Option<u64>,
}

/// One operator call.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub start: i64,
    pub end: i64,
    /// An index into [`Operators::signatures`].
    pub signature: u32,
    /// The call enclosing it on its thread, or [`NONE`].
    pub parent: u32,
    /// The outermost call of its chain: itself when it has no parent.
    pub top: u32,
}

/// The operator calls of a trace, by thread.
pub struct Operators {
    pub source: OperatorSource,
    /// Each thread's calls together, in start order (an enclosing call before the calls it
    /// holds).
    pub calls: Vec<Call>,
    /// Operator names, each once.
    pub names: Vec<StrId>,
    pub signatures: Vec<Signature>,
    /// Each thread's calls: a range of `calls`.
    threads: FastMap<u64, (u32, u32)>,
}

/// A call as read, before it is placed among its thread's calls.
struct Raw {
    pid: u32,
    tid: u32,
    start: i64,
    end: i64,
    signature: Signature,
}

impl Operators {
    /// The operator calls of `trace` (its `cpu_op` events, else its `emit_nvtx` ranges); `None`
    /// when it has neither. Operator names and shapes new to the trace are interned in its
    /// strings.
    pub fn new(trace: &mut Trace) -> Option<Operators> {
        let mut names: Vec<StrId> = Vec::new();
        let mut name_ids: FastMap<StrId, u32> = FastMap::default();
        let mut shapes: FastMap<String, Option<StrId>> = FastMap::default();
        let mut raw: Vec<Raw> = Vec::new();
        let source;
        let mut name_of = |name: StrId| {
            *name_ids.entry(name).or_insert_with(|| {
                names.push(name);
                names.len() as u32 - 1
            })
        };
        if !trace.ops.is_empty() {
            source = OperatorSource::CpuOp;
            let ops = std::mem::take(&mut trace.ops);
            for o in &ops {
                let text = o.shapes.map(|s| trace.name(s).to_owned());
                let shapes = text.and_then(|t| canonical(trace, &mut shapes, t));
                raw.push(Raw {
                    pid: o.pid,
                    tid: o.tid,
                    start: o.start.0,
                    end: o.end.0,
                    signature: Signature {
                        name: name_of(o.name),
                        shapes,
                        types: o.types,
                        concrete: o.concrete,
                        flops: o.flops,
                    },
                });
            }
            trace.ops = ops;
        } else {
            source = OperatorSource::EmitNvtx;
            let mut labels: FastMap<StrId, Option<(StrId, Option<StrId>)>> = FastMap::default();
            for i in 0..trace.ranges.len() {
                let r = &trace.ranges[i];
                let (pid, tid, start, end) = (r.pid, r.tid, r.start.0, r.end.0);
                let label = r.name;
                let parsed = match labels.get(&label) {
                    Some(p) => *p,
                    None => {
                        let text = trace.name(label).to_owned();
                        let p = is_operator_label(&text).then(|| {
                            let name = trace.strings.intern(group_name(&text));
                            let sizes = emit_nvtx_sizes(&text).map(str::to_owned);
                            (name, sizes.and_then(|s| canonical(trace, &mut shapes, s)))
                        });
                        labels.insert(label, p);
                        p
                    }
                };
                if let Some((name, shapes)) = parsed {
                    raw.push(Raw {
                        pid,
                        tid,
                        start,
                        end,
                        signature: Signature {
                            name: name_of(name),
                            shapes,
                            types: None,
                            concrete: None,
                            flops: None,
                        },
                    });
                }
            }
        }
        if raw.is_empty() {
            return None;
        }
        // Each thread's calls together, in start order, an enclosing call first.
        raw.sort_by_key(|r| (r.pid, r.tid, r.start, std::cmp::Reverse(r.end)));
        let mut signatures: Vec<Signature> = Vec::new();
        let mut signature_ids: FastMap<Signature, u32> = FastMap::default();
        let mut calls = Vec::with_capacity(raw.len());
        let mut threads = FastMap::default();
        let mut open: Vec<u32> = Vec::new();
        let mut first = 0usize;
        for (i, r) in raw.iter().enumerate() {
            let thread = thread_key(r.pid, r.tid);
            if i > 0 && thread_key(raw[i - 1].pid, raw[i - 1].tid) != thread {
                threads.insert(
                    thread_key(raw[first].pid, raw[first].tid),
                    (first as u32, i as u32),
                );
                first = i;
                open.clear();
            }
            // The calls still open at this one's start that hold all of it.
            while let Some(&o) = open.last() {
                let c: &Call = &calls[o as usize];
                if c.start <= r.start && r.end <= c.end {
                    break;
                }
                open.pop();
            }
            let parent = open.last().copied().unwrap_or(NONE);
            let me = i as u32;
            let signature = *signature_ids.entry(r.signature.clone()).or_insert_with(|| {
                signatures.push(r.signature.clone());
                signatures.len() as u32 - 1
            });
            calls.push(Call {
                start: r.start,
                end: r.end,
                signature,
                parent,
                top: if parent == NONE {
                    me
                } else {
                    calls[parent as usize].top
                },
            });
            open.push(me);
        }
        let last = &raw[first];
        threads.insert(
            thread_key(last.pid, last.tid),
            (first as u32, raw.len() as u32),
        );
        Some(Operators {
            source,
            calls,
            names,
            signatures,
            threads,
        })
    }

    /// The innermost call on thread (`pid`, `tid`) that holds time `t` (its start and end
    /// included), or [`NONE`].
    #[inline]
    pub fn innermost(&self, pid: u32, tid: u32, t: i64) -> u32 {
        let Some(&(a, b)) = self.threads.get(&thread_key(pid, tid)) else {
            return NONE;
        };
        let thread = &self.calls[a as usize..b as usize];
        let n = thread.partition_point(|c| c.start <= t);
        if n == 0 {
            return NONE;
        }
        let mut i = a + n as u32 - 1;
        while i != NONE {
            let c = &self.calls[i as usize];
            if c.end >= t {
                return i;
            }
            i = c.parent;
        }
        NONE
    }

    /// The operator name of a call.
    pub fn name(&self, call: u32) -> StrId {
        let s = self.calls[call as usize].signature;
        self.names[self.signatures[s as usize].name as usize]
    }
}

/// The id of `text`, a list of shapes, in one spelling (`[[4, 768], []]`: a comma and a space
/// between items), interned in `trace`'s strings; `None` when it is not a list. `seen` keeps
/// each text's answer.
fn canonical(
    trace: &mut Trace,
    seen: &mut FastMap<String, Option<StrId>>,
    text: String,
) -> Option<StrId> {
    if let Some(&id) = seen.get(&text) {
        return id;
    }
    let id = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v @ serde_json::Value::Array(_)) => Some(trace.strings.intern(&spelled(&v))),
        _ => None,
    };
    seen.insert(text, id);
    id
}

/// A JSON value written with `, ` between list items.
fn spelled(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(spelled).collect();
            format!("[{}]", inner.join(", "))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::trace::{Nanos, OpCall, Range, Source, SourceFormat};

    #[test]
    fn emit_nvtx_labels_group_under_their_operator() {
        assert_eq!(group_name("aten::mm, op_id = 123"), "aten::mm");
        assert_eq!(
            group_name("MmBackward0, seq = 45, op_id = 678"),
            "MmBackward0"
        );
        assert_eq!(group_name("aten::linear, seq = 7"), "aten::linear");
        assert_eq!(
            group_name(
                "aten::addmm, seq = 8, op_id = 9, sizes = [[4], [4, 8]], input_op_ids = [3]"
            ),
            "aten::addmm"
        );
        assert_eq!(group_name("forward"), "forward");
        assert_eq!(group_name("a, b = 1"), "a, b = 1");
        assert_eq!(
            emit_nvtx_sizes("aten::mm, op_id = 9, sizes = [[4, 8], [8, 2]], input_op_ids = [3]"),
            Some("[[4, 8], [8, 2]]")
        );
        assert_eq!(emit_nvtx_sizes("aten::mm, seq = 2"), None);
        assert!(is_operator_label("aten::empty"));
        assert!(!is_operator_label("forward"));
    }

    fn range(trace: &mut Trace, name: &str, tid: u32, start: i64, end: i64) {
        let name = trace.strings.intern(name);
        trace
            .ranges
            .push(Range::push_pop(name, 1, tid, Nanos(start), Nanos(end)));
    }

    #[test]
    fn the_innermost_call_on_the_launching_thread_holds_a_launch() {
        let mut t = Trace::empty(Source::new("t", SourceFormat::NsysSqlite));
        range(&mut t, "forward", 1, 0, 100);
        range(&mut t, "aten::linear, seq = 1, op_id = 1", 1, 10, 50);
        range(
            &mut t,
            "aten::addmm, seq = 1, op_id = 2, sizes = [[8], [4,16], [16,8]]",
            1,
            20,
            40,
        );
        range(&mut t, "aten::mul, seq = 2, op_id = 3", 1, 60, 70);
        range(&mut t, "aten::mul, seq = 3, op_id = 4", 2, 0, 100);
        t.sort();
        let ops = Operators::new(&mut t).unwrap();
        assert_eq!(ops.source, OperatorSource::EmitNvtx);
        let name = |c: u32| t.name(ops.name(c)).to_owned();
        let at = |tid, time| ops.innermost(1, tid, time);
        assert_eq!(name(at(1, 30)), "aten::addmm");
        assert_eq!(name(ops.calls[at(1, 30) as usize].top), "aten::linear");
        assert_eq!(name(at(1, 45)), "aten::linear", "after addmm ended");
        assert_eq!(name(at(1, 40)), "aten::addmm", "ends count");
        assert_eq!(at(1, 55), NONE, "between calls: `forward` is no operator");
        assert_eq!(name(at(1, 65)), "aten::mul");
        assert_eq!(at(3, 65), NONE, "another thread");
        let addmm = &ops.signatures[ops.calls[at(1, 30) as usize].signature as usize];
        assert_eq!(
            t.name(addmm.shapes.unwrap()),
            "[[8], [4, 16], [16, 8]]",
            "shapes in one spelling"
        );
    }

    #[test]
    fn cpu_ops_stand_for_ranges_where_the_trace_has_them() {
        let mut t = Trace::empty(Source::new("t", SourceFormat::Kineto));
        range(&mut t, "aten::mul, seq = 3, op_id = 4", 1, 0, 100);
        let name = t.strings.intern("aten::bmm");
        let shapes = Some(t.strings.intern("[[1,2,3],[1,3,4]]"));
        t.ops.push(OpCall {
            start: Nanos(5),
            end: Nanos(9),
            pid: 1,
            tid: 1,
            name,
            shapes,
            types: None,
            concrete: None,
            flops: Some(48),
        });
        let ops = Operators::new(&mut t).unwrap();
        assert_eq!(ops.source, OperatorSource::CpuOp);
        assert_eq!(ops.calls.len(), 1);
        assert_eq!(t.name(ops.name(ops.innermost(1, 1, 7))), "aten::bmm");
        assert_eq!(t.ops.len(), 1, "the trace keeps its calls");
        let s = &ops.signatures[0];
        assert_eq!(t.name(s.shapes.unwrap()), "[[1, 2, 3], [1, 3, 4]]");
        assert_eq!(s.flops, Some(48));
    }
}
