//! The chunks gathered, merged in table order into what the reports are computed from: kernels
//! by interned names and attribution slots, functions' durations, contexts' projections.

use std::collections::HashMap;

use crate::model::trace::StrId;
use crate::source::NameResolver;
use crate::stats::attribution::FastMap;

use super::kernels::LISTS;
use super::*;

/// A kernel's names, interned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelNames {
    pub name: StrId,
    pub short: StrId,
    pub mangled: Option<StrId>,
}

/// Everything gathered: what the kernel and API reports are computed from.
pub struct Gathered {
    /// (function, durations), in the order the functions first occur.
    pub functions: Vec<(StrId, Samples)>,
    pub ctxs: Vec<Ctx>,
    /// Lists of contexts (kernels whose correlation id several calls share).
    pub lists: Vec<Vec<u32>>,
    pub kernel_names: Vec<KernelNames>,
    /// Signatures: the slot keys of the kernels' attributions.
    pub sigs: Vec<Vec<SlotKey>>,
    /// (signature, kernel names index) → durations.
    pub kernels: Vec<(u32, u32, Samples)>,
    /// The (attribution, kernel names index) met, ascending. Attribution 0: no launch call;
    /// `1 + c`: context `c`; `LISTS | l`: list `l`.
    pub presence: Vec<(u32, u32)>,
    pub projections: FastMap<u32, Projection>,
}

/// One slot of a kernel's attribution: the call's process and thread (none when the launch was
/// not traced) and one enclosing range (none when no range encloses the call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub range: Option<u32>,
}

impl Gathered {
    /// The (call, range) slots of an attribution, in order: a kernel counts once in each, as
    /// nsys's join counts it.
    pub fn slots(&self, attribution: u32) -> Vec<Slot> {
        if attribution == 0 {
            return vec![Slot {
                pid: None,
                tid: None,
                range: None,
            }];
        }
        let single;
        let ctxs: &[u32] = if attribution & LISTS != 0 {
            &self.lists[(attribution & !LISTS) as usize]
        } else {
            single = [attribution - 1];
            &single
        };
        let mut out = Vec::new();
        for &c in ctxs {
            let ctx = &self.ctxs[c as usize];
            let (pid, tid) = (Some(ctx.pid), Some(ctx.tid));
            if ctx.ranges.is_empty() {
                out.push(Slot {
                    pid,
                    tid,
                    range: None,
                });
            }
            out.extend(ctx.ranges.iter().map(|&r| Slot {
                pid,
                tid,
                range: Some(r),
            }));
        }
        out
    }

    /// The ranges of an attribution, each once, ascending.
    pub fn ranges(&self, attribution: u32) -> Vec<u32> {
        let mut out: Vec<u32> = self
            .slots(attribution)
            .into_iter()
            .filter_map(|s| s.range)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Merge the kernel chunks (in table order) of a gathering whose calls are `calls`,
    /// resolving function keys and kernel names with `names`.
    pub fn finish(
        calls: Calls,
        chunks: Vec<KernelChunk>,
        names: &mut dyn NameResolver,
    ) -> Gathered {
        let mut functions: Vec<(StrId, Vec<Samples>)> = Vec::new();
        let mut function_index: FastMap<StrId, usize> = FastMap::default();
        for (key, samples) in calls.functions {
            let id = names.function(key);
            match function_index.get(&id) {
                Some(&i) => functions[i].1.push(samples),
                None => {
                    function_index.insert(id, functions.len());
                    functions.push((id, vec![samples]));
                }
            }
        }
        let functions = functions
            .into_iter()
            .map(|(id, parts)| (id, Samples::concat(parts)))
            .collect();
        let mut kernel_names: Vec<KernelNames> = Vec::new();
        let mut names_index: FastMap<KernelNames, u32> = FastMap::default();
        let mut lists: Vec<Vec<u32>> = Vec::new();
        let mut list_index: HashMap<Vec<u32>, u32> = HashMap::new();
        let mut kernels: FastMap<(u32, u32), Vec<Samples>> = FastMap::default();
        let mut projections: FastMap<u32, Projection> = FastMap::default();
        let mut presence: Vec<(u32, u32)> = Vec::new();
        let mut sigs = calls.sigs;
        for chunk in chunks {
            let kid: Vec<u32> = chunk
                .kids
                .iter()
                .map(|raw| {
                    let n = match names.name(&raw[0]) {
                        Some(n) => n,
                        None => names.unnamed(),
                    };
                    let k = KernelNames {
                        name: n,
                        short: names.name(&raw[1]).unwrap_or(n),
                        mangled: names.name(&raw[2]),
                    };
                    let next = kernel_names.len() as u32;
                    *names_index.entry(k).or_insert_with(|| {
                        kernel_names.push(k);
                        next
                    })
                })
                .collect();
            let list: Vec<u32> = chunk
                .lists
                .into_iter()
                .map(|l| {
                    let next = lists.len() as u32;
                    *list_index.entry(l.clone()).or_insert_with(|| {
                        lists.push(l);
                        next
                    })
                })
                .collect();
            let global = |a: u32| {
                if a & LISTS != 0 {
                    LISTS | list[(a & !LISTS) as usize]
                } else {
                    a
                }
            };
            let sig: Vec<u32> = chunk
                .sigs
                .lists
                .into_iter()
                .map(|keys| sigs.intern(keys))
                .collect();
            let global_sig = |s: u32| {
                if s & LISTS != 0 {
                    sig[(s & !LISTS) as usize]
                } else {
                    s
                }
            };
            for (s, k, samples) in chunk.samples {
                kernels
                    .entry((global_sig(s), kid[k as usize]))
                    .or_default()
                    .push(samples);
            }
            presence.extend(
                chunk
                    .presence
                    .into_iter()
                    .map(|(a, k)| (global(a), kid[k as usize])),
            );
            for (a, per) in chunk.per {
                if let Some(p) = per.projection {
                    projections
                        .entry(global(a))
                        .and_modify(|q| q.add(&p))
                        .or_insert(p);
                }
            }
        }
        let mut kernels: Vec<(u32, u32, Samples)> = kernels
            .into_iter()
            .map(|((a, k), parts)| (a, k, Samples::concat(parts)))
            .collect();
        kernels.sort_unstable_by_key(|k| (k.0, k.1));
        presence.sort_unstable();
        presence.dedup();
        Gathered {
            functions,
            ctxs: calls.ctxs,
            lists,
            kernel_names,
            sigs: sigs.lists,
            kernels,
            presence,
            projections,
        }
    }
}
