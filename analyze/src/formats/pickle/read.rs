//! A pickle reader for plain data only: the containers and scalars that
//! `torch.cuda.memory._dump_snapshot` writes (dict, list, tuple, set, str, bytes, int of any
//! width, float, bool, None), with the memo and protocol-4 frames, for protocols 0 to 5.
//!
//! It never executes or emulates anything: every opcode that would import a name or call one
//! (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `INST`, `OBJ`, `NEWOBJ`, `NEWOBJ_EX`, the
//! extension registry, persistent ids, out-of-band buffers) stops the read with
//! [`PickleError::Code`]. Opcodes it does not know stop it with [`PickleError::UnknownOpcode`],
//! and input that ends early with [`PickleError::Truncated`].
//!
//! It reads from bytes ([`parse`]) or from any reader ([`parse_stream`]), through a buffer: a
//! long argument is read as its bytes arrive, so a length field that promises more than the input
//! holds allocates no more than what is there. An [`Appender`] may take over the items appended
//! to the lists it chooses (a snapshot reader converts each trace entry as it comes): those items
//! are not stored, their dicts are freed, and the memo holds [`Value::Taken`] in their place.
//!
//! Hostile input is bounded: the reader is an iterative stack machine (no recursion), and the
//! memo holds handles rather than copies, so a value fetched a million times is stored once.
//! Values live in an arena and are referred to by index; [`Value`] is `Copy`. A dict's handle
//! carries its slot's generation, so a handle to a dict that was taken over reads as gone rather
//! than as the next dict in its slot. Cycles (a list that contains itself) are representable;
//! callers walk values along a known schema, never recursively without a bound.

use std::collections::HashMap;
use std::io::Read;

use super::op;

/// One pickled value. Containers and strings are handles into the [`Pickle`] arena.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer that does not fit in 64 bits (index into the arena's big integers).
    BigInt(u32),
    Float(f64),
    Str(u32),
    Bytes(u32),
    List(u32),
    Tuple(u32),
    Dict(DictId),
    Set(u32),
    /// A dict an [`Appender`] took over as it was appended to a list, by the appender's own id:
    /// what the memo holds in its place from then on.
    Taken(u32),
}

/// A dict's handle: its slot in the arena and the slot's generation. A slot is reused once its
/// dict has been taken over ([`Appender`]), so a handle left over from before reads as gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DictId {
    slot: u32,
    generation: u32,
}

/// Why a pickle could not be read. Offsets are byte positions in the (decompressed) input.
#[derive(Clone, Debug, PartialEq)]
pub enum PickleError {
    /// The input ended inside an opcode or before `STOP`.
    Truncated {
        offset: u64,
        context: &'static str,
    },
    UnknownOpcode {
        opcode: u8,
        offset: u64,
    },
    /// The pickle asks for a global or a call; `name` says which.
    Code {
        name: String,
        offset: u64,
    },
    /// Well-formed bytes that do not make sense as plain data (stack underflow, bad memo key…).
    Malformed {
        offset: u64,
        message: String,
    },
    /// The input could not be read (an I/O or decompression error).
    Read {
        offset: u64,
        message: String,
    },
    /// The [`Appender`] refused what was appended; it holds the reason.
    Refused {
        offset: u64,
    },
}

impl std::fmt::Display for PickleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PickleError::Truncated { offset, context } => write!(
                f,
                "pickle is truncated: input ends at byte {offset} inside {context}"
            ),
            PickleError::UnknownOpcode { opcode, offset } => {
                write!(
                    f,
                    "pickle opcode 0x{opcode:02x} at byte {offset} is not supported"
                )
            }
            PickleError::Code { name, offset } => write!(
                f,
                "pickle asks for `{}` at byte {offset}; only plain data is read, never code",
                crate::error::quote(name)
            ),
            PickleError::Malformed { offset, message } => {
                write!(f, "malformed pickle at byte {offset}: {message}")
            }
            PickleError::Read { offset, message } => {
                write!(f, "could not be read at byte {offset}: {message}")
            }
            PickleError::Refused { offset } => {
                write!(f, "the reader refused the items appended at byte {offset}")
            }
        }
    }
}

/// A fully read pickle: its root value and the arena the handles point into.
#[derive(Debug, Default)]
pub struct Pickle {
    pub root: Option<Value>,
    /// Bytes read, up to and including `STOP`.
    pub size: u64,
    strings: Vec<Box<str>>,
    bytes: Vec<Box<[u8]>>,
    big_ints: Vec<Box<[u8]>>,
    lists: Vec<Vec<Value>>,
    dicts: Vec<DictSlot>,
    /// Slots of dicts taken over, for the next dicts.
    free_dicts: Vec<u32>,
}

/// A dict of the arena, and where the memo keeps it (so that the memo can be pointed at what
/// replaces it when it is taken over).
#[derive(Debug, Default)]
struct DictSlot {
    generation: u32,
    /// The memo index of the dict; [`NO_MEMO`] when none, [`MANY_MEMOS`] when more than one.
    memo_at: u32,
    items: Vec<(Value, Value)>,
}

const NO_MEMO: u32 = u32::MAX;
const MANY_MEMOS: u32 = u32::MAX - 1;

impl Pickle {
    /// The root value (a successful [`parse`] always has one).
    pub fn root(&self) -> Value {
        self.root.unwrap_or(Value::None)
    }

    pub fn str(&self, v: Value) -> Option<&str> {
        match v {
            Value::Str(i) => self.strings.get(i as usize).map(|s| &**s),
            _ => None,
        }
    }

    pub fn bytes(&self, v: Value) -> Option<&[u8]> {
        match v {
            Value::Bytes(i) => self.bytes.get(i as usize).map(|b| &**b),
            _ => None,
        }
    }

    /// The items of a list, tuple or set.
    pub fn seq(&self, v: Value) -> Option<&[Value]> {
        match v {
            Value::List(i) | Value::Tuple(i) | Value::Set(i) => {
                self.lists.get(i as usize).map(|l| &l[..])
            }
            _ => None,
        }
    }

    /// The entries of a dict in insertion order (later duplicates win in [`Pickle::get`]).
    pub fn dict(&self, v: Value) -> Option<&[(Value, Value)]> {
        match v {
            Value::Dict(id) => self.dict_slot(id).map(|d| &d.items[..]),
            _ => None,
        }
    }

    /// `dict[key]` for a string key, as Python would see it (the last assignment wins).
    pub fn get(&self, dict: Value, key: &str) -> Option<Value> {
        self.dict(dict)?
            .iter()
            .rev()
            .find(|(k, _)| self.str(*k) == Some(key))
            .map(|(_, v)| *v)
    }

    /// The value as an integer, if it is one (bools count, as in Python).
    pub fn int(&self, v: Value) -> Option<i64> {
        match v {
            Value::Int(i) => Some(i),
            Value::Bool(b) => Some(i64::from(b)),
            _ => None,
        }
    }

    /// How many lists, tuples and sets the arena holds (their handles are below this).
    pub fn list_count(&self) -> usize {
        self.lists.len()
    }

    fn dict_slot(&self, id: DictId) -> Option<&DictSlot> {
        self.dicts
            .get(id.slot as usize)
            .filter(|d| d.generation == id.generation)
    }

    fn dict_slot_mut(&mut self, id: DictId) -> Option<&mut DictSlot> {
        self.dicts
            .get_mut(id.slot as usize)
            .filter(|d| d.generation == id.generation)
    }

    /// A key that names a dict for as long as it lives (for caches of what a dict was read as).
    pub fn dict_key(id: DictId) -> u64 {
        u64::from(id.slot) | (u64::from(id.generation) << 32)
    }

    /// A short description of a value's type, for error messages.
    pub fn type_name(&self, v: Value) -> &'static str {
        match v {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(id) if self.dict_slot(id).is_none() => "dict read before",
            Value::Dict(_) => "dict",
            Value::Set(_) => "set",
            Value::Taken(_) => "value read before",
        }
    }

    /// The value's type with an article, for messages: "an int", "a list", "None".
    pub fn describe(&self, v: Value) -> &'static str {
        match v {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) | Value::BigInt(_) => "an int",
            Value::Float(_) => "a float",
            Value::Str(_) => "a str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "a list",
            Value::Tuple(_) => "a tuple",
            Value::Dict(id) if self.dict_slot(id).is_none() => "a dict read before",
            Value::Dict(_) => "a dict",
            Value::Set(_) => "a set",
            Value::Taken(_) => "a value read before",
        }
    }

    /// A big integer's little-endian two's-complement bytes.
    pub fn big_int(&self, v: Value) -> Option<&[u8]> {
        match v {
            Value::BigInt(i) => self.big_ints.get(i as usize).map(|b| &**b),
            _ => None,
        }
    }

    /// A big integer that fits in 64 unsigned bits (2^63 to 2^64 − 1: a C `size_t` or
    /// `uint64_t` written by Python as a positive int, as PyTorch writes −1 cast to unsigned),
    /// as those bits; `None` for any other value.
    pub fn big_u64(&self, v: Value) -> Option<u64> {
        let b = self.big_int(v)?;
        let (low, high) = b.split_at_checked(8)?;
        let non_negative = b.last().is_some_and(|&top| top & 0x80 == 0);
        if !non_negative || high.iter().any(|&x| x != 0) {
            return None;
        }
        let mut buf = [0u8; 8];
        buf.copy_from_slice(low);
        Some(u64::from_le_bytes(buf))
    }

    fn push_list(&mut self, items: Vec<Value>) -> Result<u32, String> {
        let id = arena_id(self.lists.len())?;
        self.lists.push(items);
        Ok(id)
    }

    fn push_dict(&mut self, items: Vec<(Value, Value)>) -> Result<Value, String> {
        let slot = match self.free_dicts.pop() {
            Some(slot) => slot,
            None => {
                let slot = arena_id(self.dicts.len())?;
                self.dicts.push(DictSlot::default());
                slot
            }
        };
        let d = &mut self.dicts[slot as usize];
        d.memo_at = NO_MEMO;
        // A reused slot keeps its room for the next dict's items.
        if items.is_empty() {
            d.items.clear();
        } else {
            d.items = items;
        }
        Ok(Value::Dict(DictId {
            slot,
            generation: d.generation,
        }))
    }

    /// Free a dict an [`Appender`] took over: its slot goes to the next dict, and its memo entry
    /// now holds `replacement`. Handles to it elsewhere read as gone.
    fn release_dict(&mut self, id: DictId, memo: &mut Memo, replacement: Value) {
        let Some(d) = self.dict_slot_mut(id) else {
            return;
        };
        let memo_at = d.memo_at;
        d.items.clear();
        d.generation = d.generation.wrapping_add(1);
        self.free_dicts.push(id.slot);
        if memo_at < MANY_MEMOS {
            memo.put(memo_at, replacement);
        }
    }

    /// Note that the memo holds `v` at `index`.
    fn memoised(&mut self, index: u32, v: Value) {
        if let Value::Dict(id) = v {
            if let Some(d) = self.dict_slot_mut(id) {
                d.memo_at = if d.memo_at == NO_MEMO || d.memo_at == index {
                    index
                } else {
                    MANY_MEMOS
                };
            }
        }
    }

    fn push_str(&mut self, s: Box<str>) -> Result<Value, String> {
        let id = arena_id(self.strings.len())?;
        self.strings.push(s);
        Ok(Value::Str(id))
    }

    fn push_bytes(&mut self, b: &[u8]) -> Result<Value, String> {
        let id = arena_id(self.bytes.len())?;
        self.bytes.push(b.into());
        Ok(Value::Bytes(id))
    }
}

fn arena_id(len: usize) -> Result<u32, String> {
    u32::try_from(len).map_err(|_| "too many objects".to_owned())
}

/// The memo: the sequential indices `MEMOIZE` hands out in order, anything else sparse so a
/// `LONG_BINPUT 0xffffffff` costs one entry, not four billion.
///
/// The sequential part keeps its latest indices as values (`tail`) and folds the older ones into
/// pieces: a run of dicts taken over by an [`Appender`], consecutive indices holding consecutive
/// ids (a snapshot's trace entries, millions of them), is kept as its first id and its length,
/// so the memo costs nothing per entry taken; anything else stays as values.
#[derive(Default)]
struct Memo {
    /// Indices `0..tail_start`, in order.
    pieces: Vec<Piece>,
    /// Indices from `tail_start` on.
    tail: Vec<Value>,
    tail_start: u32,
    /// Values stored again at an index of a run of taken dicts.
    overrides: HashMap<u32, Value>,
    sparse: HashMap<u32, Value>,
}

/// A stretch of the memo's sequential indices, from `start`.
enum Piece {
    Values {
        start: u32,
        values: Box<[Value]>,
    },
    /// `Value::Taken(first_id + k)` at index `start + k`, for `k` below `len`.
    Taken {
        start: u32,
        first_id: u32,
        len: u32,
    },
}

impl Piece {
    fn start(&self) -> u32 {
        match self {
            Piece::Values { start, .. } | Piece::Taken { start, .. } => *start,
        }
    }
}

/// The tail's length at which its older part is folded into pieces, and how much of it stays
/// (the dicts of a batch still being appended are among the latest).
const MEMO_TAIL: usize = 1 << 16;
const MEMO_KEEP: usize = 1 << 12;
/// The shortest run of taken dicts folded into one piece: shorter ones stay values, so that the
/// pieces stay few and a lookup among them short.
const MEMO_RUN: usize = 1024;

impl Memo {
    fn put(&mut self, index: u32, v: Value) {
        let end = self.tail_start as usize + self.tail.len();
        let i = index as usize;
        if i < self.tail_start as usize {
            let k = self.piece_of(index);
            match &mut self.pieces[k] {
                Piece::Values { start, values } => values[(index - *start) as usize] = v,
                Piece::Taken { .. } => {
                    self.overrides.insert(index, v);
                }
            }
        } else if i < end {
            self.tail[i - self.tail_start as usize] = v;
        } else if i == end {
            self.tail.push(v);
            if self.tail.len() >= MEMO_TAIL {
                self.fold();
            }
        } else {
            self.sparse.insert(index, v);
        }
    }

    fn get(&self, index: u32) -> Option<Value> {
        let i = index as usize;
        if i < self.tail_start as usize {
            // The first indices (a snapshot's keys and frames) are asked for most: values
            // stored in place, never overridden.
            if let Some(Piece::Values { start: 0, values }) = self.pieces.first() {
                if let Some(&v) = values.get(i) {
                    return Some(v);
                }
            }
            if !self.overrides.is_empty() {
                if let Some(&v) = self.overrides.get(&index) {
                    return Some(v);
                }
            }
            return Some(match &self.pieces[self.piece_of(index)] {
                Piece::Values { start, values } => values[(index - start) as usize],
                Piece::Taken {
                    start, first_id, ..
                } => Value::Taken(first_id + (index - start)),
            });
        }
        self.tail
            .get(i - self.tail_start as usize)
            .copied()
            .or_else(|| self.sparse.get(&index).copied())
    }

    fn len(&self) -> usize {
        self.tail_start as usize + self.tail.len() + self.sparse.len()
    }

    /// The piece holding `index`, which is below `tail_start`.
    fn piece_of(&self, index: u32) -> usize {
        self.pieces.partition_point(|p| p.start() <= index) - 1
    }

    /// Fold the tail, less its latest values, into pieces.
    fn fold(&mut self) {
        let n = self.tail.len() - MEMO_KEEP;
        let mut values: Vec<Value> = Vec::new();
        let mut values_start = self.tail_start;
        let mut k = 0;
        while k < n {
            let run = match self.tail[k] {
                Value::Taken(id) => self.tail[k..n]
                    .iter()
                    .enumerate()
                    .take_while(|&(j, v)| *v == Value::Taken(id.wrapping_add(j as u32)))
                    .count(),
                _ => 0,
            };
            let index = self.tail_start + k as u32;
            if run < MEMO_RUN {
                values.push(self.tail[k]);
                k += 1;
                continue;
            }
            if !values.is_empty() {
                self.pieces.push(Piece::Values {
                    start: values_start,
                    values: std::mem::take(&mut values).into_boxed_slice(),
                });
            }
            let Value::Taken(first_id) = self.tail[k] else {
                unreachable!("a run starts with a taken dict")
            };
            match self.pieces.last_mut() {
                Some(Piece::Taken {
                    start,
                    first_id: f,
                    len,
                }) if *start + *len == index && f.wrapping_add(*len) == first_id => {
                    *len += run as u32;
                }
                _ => self.pieces.push(Piece::Taken {
                    start: index,
                    first_id,
                    len: run as u32,
                }),
            }
            k += run;
            values_start = self.tail_start + k as u32;
        }
        if !values.is_empty() {
            self.pieces.push(Piece::Values {
                start: values_start,
                values: values.into_boxed_slice(),
            });
        }
        self.tail.drain(..n);
        self.tail_start += n as u32;
    }
}

/// The input, read through a buffer: opcodes and short arguments are served from the buffer,
/// long ones are read as their bytes arrive, so a length field promising more than the input
/// holds allocates no more than what is there.
struct Input<R> {
    inner: R,
    buf: Vec<u8>,
    /// The unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// Input offset of `buf[start]`.
    offset: u64,
    /// A long argument, read outside the buffer.
    long: Vec<u8>,
    at_eof: bool,
}

/// The buffer's size, and the longest argument served from it.
const BUFFER: usize = 1 << 16;

impl<R: Read> Input<R> {
    fn new(inner: R) -> Self {
        Input {
            inner,
            buf: vec![0; BUFFER],
            start: 0,
            end: 0,
            offset: 0,
            long: Vec::new(),
            at_eof: false,
        }
    }

    fn pos(&self) -> u64 {
        self.offset
    }

    /// Read more bytes after `end`; `Ok(false)` at the end of the input.
    fn fill(&mut self) -> Result<bool, PickleError> {
        if self.at_eof {
            return Ok(false);
        }
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                // A protocol 0 line longer than the buffer.
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.at_eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(PickleError::Read {
                        offset: self.offset + (self.end - self.start) as u64,
                        message: e.to_string(),
                    })
                }
            }
        }
    }

    fn truncated(&self, context: &'static str) -> PickleError {
        PickleError::Truncated {
            offset: self.offset + (self.end - self.start) as u64,
            context,
        }
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }

    fn take(&mut self, n: usize, context: &'static str) -> Result<&[u8], PickleError> {
        if n > BUFFER {
            return self.take_long(n as u64, context);
        }
        while self.end - self.start < n {
            if self.start + n > self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if !self.fill()? {
                return Err(self.truncated(context));
            }
        }
        let s = self.start;
        self.consume(n);
        Ok(&self.buf[s..s + n])
    }

    /// An argument longer than the buffer, in a vector that grows as its bytes arrive.
    fn take_long(&mut self, n: u64, context: &'static str) -> Result<&[u8], PickleError> {
        self.long.clear();
        self.long.extend_from_slice(&self.buf[self.start..self.end]);
        let buffered = (self.end - self.start) as u64;
        self.consume(self.end - self.start);
        self.start = 0;
        self.end = 0;
        let mut rest = (&mut self.inner).take(n - buffered);
        let read = loop {
            match rest.read_to_end(&mut self.long) {
                Ok(_) => break Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.offset += self.long.len() as u64 - buffered;
        if let Err(e) = read {
            return Err(PickleError::Read {
                offset: self.offset,
                message: e.to_string(),
            });
        }
        if (self.long.len() as u64) < n {
            self.at_eof = true;
            return Err(self.truncated(context));
        }
        Ok(&self.long)
    }

    fn u8(&mut self, context: &'static str) -> Result<u8, PickleError> {
        if self.start < self.end {
            let b = self.buf[self.start];
            self.consume(1);
            return Ok(b);
        }
        Ok(self.take(1, context)?[0])
    }

    #[inline]
    fn le<const N: usize>(&mut self, context: &'static str) -> Result<[u8; N], PickleError> {
        if let Some(b) = self.buf[self.start..self.end].first_chunk::<N>() {
            let out = *b;
            self.consume(N);
            return Ok(out);
        }
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, context)?);
        Ok(out)
    }

    /// A length-prefixed argument: nothing is allocated for bytes that are not there.
    #[inline]
    fn len_prefixed(&mut self, n: u64, context: &'static str) -> Result<&[u8], PickleError> {
        if n <= (self.end - self.start) as u64 {
            let (s, n) = (self.start, n as usize);
            self.consume(n);
            return Ok(&self.buf[s..s + n]);
        }
        match usize::try_from(n) {
            Ok(n) if n <= BUFFER => self.take(n, context),
            _ => self.take_long(n, context),
        }
    }

    /// A newline-terminated argument of the text opcodes (protocol 0).
    fn line(&mut self, context: &'static str) -> Result<&[u8], PickleError> {
        let mut searched = 0;
        loop {
            let unread = &self.buf[self.start + searched..self.end];
            if let Some(i) = unread.iter().position(|&b| b == b'\n') {
                let s = self.start;
                let len = searched + i;
                self.consume(len + 1);
                return Ok(&self.buf[s..s + len]);
            }
            searched = self.end - self.start;
            if !self.fill()? {
                return Err(self.truncated(context));
            }
        }
    }
}

/// Opcodes that import or call: refused, with the name a reader would see.
fn code_opcode_name(code: u8) -> Option<&'static str> {
    Some(match code {
        op::GLOBAL => "GLOBAL",
        op::STACK_GLOBAL => "STACK_GLOBAL",
        op::REDUCE => "REDUCE",
        op::BUILD => "BUILD",
        op::INST => "INST",
        op::OBJ => "OBJ",
        op::NEWOBJ => "NEWOBJ",
        op::NEWOBJ_EX => "NEWOBJ_EX",
        op::EXT1 => "EXT1",
        op::EXT2 => "EXT2",
        op::EXT4 => "EXT4",
        op::PERSID => "PERSID",
        op::BINPERSID => "BINPERSID",
        op::NEXT_BUFFER => "NEXT_BUFFER",
        op::READONLY_BUFFER => "READONLY_BUFFER",
        _ => return None,
    })
}

/// The highest pickle protocol Python writes today.
const HIGHEST_PROTOCOL: u8 = 5;

/// Takes over the items appended to the lists it chooses, so that a reader that folds a long
/// list into records of its own never holds that list as values. The items it takes are not
/// stored in the list, and each dict among them is freed: the memo holds [`Value::Taken`] with
/// the appender's id for it in its place, so a later `GET` of it hands the appender its own
/// record back.
pub trait Appender {
    /// `items` are about to be appended to the list `list`, which is on top of `stack` (the
    /// values below it are those of the containers still being built); `at` is the input offset
    /// of the opcode. Return `Ok(false)` to
    /// leave them to the list, or `Ok(true)` having pushed one id per item onto `taken`.
    fn append(
        &mut self,
        p: &Pickle,
        stack: &[Value],
        list: u32,
        items: &[Value],
        taken: &mut Vec<u32>,
        at: u64,
    ) -> Result<bool, Refused>;
}

/// An [`Appender`] refused the items; it keeps the reason.
#[derive(Debug)]
pub struct Refused;

/// The appender of a plain read: every list keeps its items.
struct KeepAll;

impl Appender for KeepAll {
    fn append(
        &mut self,
        _: &Pickle,
        _: &[Value],
        _: u32,
        _: &[Value],
        _: &mut Vec<u32>,
        _: u64,
    ) -> Result<bool, Refused> {
        Ok(false)
    }
}

/// Read a whole pickle. Bytes after `STOP` are ignored, as Python does.
pub fn parse(data: &[u8]) -> Result<Pickle, PickleError> {
    parse_stream(data, &mut KeepAll)
}

/// Read a pickle as its bytes come from `input`, handing appended items to `appender`. Bytes
/// after `STOP` are not read.
pub fn parse_stream<R: Read>(input: R, appender: &mut dyn Appender) -> Result<Pickle, PickleError> {
    let mut p = Pickle::default();
    let mut r = Input::new(input);
    let mut stack: Vec<Value> = Vec::new();
    let mut marks: Vec<usize> = Vec::new();
    let mut memo = Memo::default();
    let mut taken: Vec<u32> = Vec::new();

    loop {
        let at = r.pos();
        let code = r.u8("an opcode (no STOP before the end)")?;
        let malformed = |message: String| PickleError::Malformed {
            offset: at,
            message,
        };
        let underflow = || PickleError::Malformed {
            offset: at,
            message: format!("opcode 0x{code:02x} needs a value but the stack is empty"),
        };
        match code {
            op::PROTO => {
                let proto = r.u8("PROTO")?;
                if proto > HIGHEST_PROTOCOL {
                    return Err(malformed(format!(
                        "pickle protocol {proto} is not supported (0 to {HIGHEST_PROTOCOL})"
                    )));
                }
            }
            op::FRAME => {
                // FRAME: a length hint only; the data follows inline.
                r.le::<8>("FRAME")?;
            }
            op::STOP => {
                let root = stack.pop().ok_or_else(underflow)?;
                p.root = Some(root);
                p.size = r.pos();
                return Ok(p);
            }
            op::MARK => marks.push(stack.len()),
            op::POP => {
                stack.pop().ok_or_else(underflow)?;
            }
            op::POP_MARK => {
                let m = marks
                    .pop()
                    .ok_or_else(|| malformed("POP_MARK without MARK".into()))?;
                stack.truncate(m);
            }
            op::DUP => {
                let top = *stack.last().ok_or_else(underflow)?;
                stack.push(top);
            }
            op::NONE => stack.push(Value::None),
            op::NEWTRUE => stack.push(Value::Bool(true)),
            op::NEWFALSE => stack.push(Value::Bool(false)),
            op::BININT => stack.push(Value::Int(i64::from(i32::from_le_bytes(r.le("BININT")?)))),
            op::BININT1 => stack.push(Value::Int(i64::from(r.u8("BININT1")?))),
            op::BININT2 => stack.push(Value::Int(i64::from(u16::from_le_bytes(r.le("BININT2")?)))),
            op::LONG1 => {
                let n = r.u8("LONG1")?;
                let b = r.len_prefixed(u64::from(n), "LONG1")?;
                let v = long_value(&mut p, b).map_err(malformed)?;
                stack.push(v);
            }
            op::LONG4 => {
                let n = i32::from_le_bytes(r.le("LONG4")?);
                if n < 0 {
                    return Err(malformed("LONG4 with a negative length".into()));
                }
                let b = r.len_prefixed(n as u64, "LONG4")?;
                let v = long_value(&mut p, b).map_err(malformed)?;
                stack.push(v);
            }
            op::INT => {
                let line = r.line("INT")?;
                let v = match line {
                    b"00" => Value::Bool(false),
                    b"01" => Value::Bool(true),
                    _ => Value::Int(parse_text_int(line).ok_or_else(|| {
                        malformed(format!("INT argument \"{}\" is not a number", shown(line)))
                    })?),
                };
                stack.push(v);
            }
            op::LONG => {
                let line = r.line("LONG")?;
                let digits = line.strip_suffix(b"L").unwrap_or(line);
                let v = parse_text_int(digits).ok_or_else(|| {
                    malformed(format!(
                        "LONG argument \"{}\" is not a 64-bit number",
                        shown(line)
                    ))
                })?;
                stack.push(Value::Int(v));
            }
            op::FLOAT => {
                let line = r.line("FLOAT")?;
                let v: f64 = std::str::from_utf8(line)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| {
                        malformed(format!(
                            "FLOAT argument \"{}\" is not a number",
                            shown(line)
                        ))
                    })?;
                stack.push(Value::Float(v));
            }
            op::BINFLOAT => stack.push(Value::Float(f64::from_be_bytes(r.le("BINFLOAT")?))),
            op::BINUNICODE => {
                let n = u32::from_le_bytes(r.le("BINUNICODE")?);
                let b = r.len_prefixed(u64::from(n), "BINUNICODE")?;
                stack.push(p.push_str(utf8(b)).map_err(malformed)?);
            }
            op::SHORT_BINUNICODE => {
                let n = r.u8("SHORT_BINUNICODE")?;
                let b = r.len_prefixed(u64::from(n), "SHORT_BINUNICODE")?;
                stack.push(p.push_str(utf8(b)).map_err(malformed)?);
            }
            op::BINUNICODE8 => {
                let n = u64::from_le_bytes(r.le("BINUNICODE8")?);
                let b = r.len_prefixed(n, "BINUNICODE8")?;
                stack.push(p.push_str(utf8(b)).map_err(malformed)?);
            }
            op::UNICODE => {
                let line = r.line("UNICODE")?;
                stack.push(p.push_str(raw_unicode_escape(line)).map_err(malformed)?);
            }
            op::BINSTRING => {
                let n = i32::from_le_bytes(r.le("BINSTRING")?);
                if n < 0 {
                    return Err(malformed("BINSTRING with a negative length".into()));
                }
                let b = r.len_prefixed(n as u64, "BINSTRING")?;
                stack.push(p.push_str(utf8(b)).map_err(malformed)?);
            }
            op::SHORT_BINSTRING => {
                let n = r.u8("SHORT_BINSTRING")?;
                let b = r.len_prefixed(u64::from(n), "SHORT_BINSTRING")?;
                stack.push(p.push_str(utf8(b)).map_err(malformed)?);
            }
            op::STRING => {
                let line = r.line("STRING")?;
                let s = python_string_literal(line)
                    .ok_or_else(|| malformed("STRING argument is not a quoted string".into()))?;
                stack.push(p.push_str(s).map_err(malformed)?);
            }
            op::BINBYTES => {
                let n = u32::from_le_bytes(r.le("BINBYTES")?);
                let b = r.len_prefixed(u64::from(n), "BINBYTES")?;
                stack.push(p.push_bytes(b).map_err(malformed)?);
            }
            op::SHORT_BINBYTES => {
                let n = r.u8("SHORT_BINBYTES")?;
                let b = r.len_prefixed(u64::from(n), "SHORT_BINBYTES")?;
                stack.push(p.push_bytes(b).map_err(malformed)?);
            }
            op::BINBYTES8 | op::BYTEARRAY8 => {
                let n = u64::from_le_bytes(r.le("BINBYTES8")?);
                let b = r.len_prefixed(n, "BINBYTES8")?;
                stack.push(p.push_bytes(b).map_err(malformed)?);
            }
            op::EMPTY_DICT => stack.push(p.push_dict(Vec::new()).map_err(malformed)?),
            op::EMPTY_LIST => stack.push(Value::List(p.push_list(Vec::new()).map_err(malformed)?)),
            op::EMPTY_TUPLE => {
                stack.push(Value::Tuple(p.push_list(Vec::new()).map_err(malformed)?))
            }
            op::EMPTY_SET => stack.push(Value::Set(p.push_list(Vec::new()).map_err(malformed)?)),
            op::DICT | op::LIST | op::TUPLE | op::FROZENSET => {
                let m = pop_mark(&mut marks, stack.len()).map_err(malformed)?;
                let items = stack.split_off(m);
                let v = match code {
                    op::DICT => {
                        if items.len() & 1 == 1 {
                            return Err(malformed("DICT with an odd number of items".into()));
                        }
                        let pairs = items.chunks_exact(2).map(|c| (c[0], c[1])).collect();
                        p.push_dict(pairs).map_err(malformed)?
                    }
                    op::LIST => Value::List(p.push_list(items).map_err(malformed)?),
                    op::TUPLE => Value::Tuple(p.push_list(items).map_err(malformed)?),
                    _ => Value::Set(p.push_list(items).map_err(malformed)?),
                };
                stack.push(v);
            }
            op::TUPLE1..=op::TUPLE3 => {
                let n = usize::from(code - op::TUPLE1) + 1;
                if stack.len() < n {
                    return Err(underflow());
                }
                let items = stack.split_off(stack.len() - n);
                stack.push(Value::Tuple(p.push_list(items).map_err(malformed)?));
            }
            op::APPEND => {
                let item = stack.pop().ok_or_else(underflow)?;
                let target = *stack.last().ok_or_else(underflow)?;
                match target {
                    Value::List(i) => {
                        let mut lists = Lists {
                            p: &mut p,
                            memo: &mut memo,
                            taken: &mut taken,
                            at,
                        };
                        lists.append(appender, &stack, i, vec![item])?;
                    }
                    other => {
                        return Err(malformed(format!(
                            "APPEND to a {}, not a list",
                            p.type_name(other)
                        )))
                    }
                }
            }
            op::APPENDS | op::ADDITEMS => {
                let m = pop_mark(&mut marks, stack.len()).map_err(malformed)?;
                if m == 0 {
                    return Err(underflow());
                }
                let items = stack.split_off(m);
                match (code, stack[m - 1]) {
                    (op::APPENDS, Value::List(i)) => {
                        let mut lists = Lists {
                            p: &mut p,
                            memo: &mut memo,
                            taken: &mut taken,
                            at,
                        };
                        lists.append(appender, &stack, i, items)?;
                    }
                    (op::ADDITEMS, Value::Set(i)) => p.lists[i as usize].extend(items),
                    (_, other) => {
                        return Err(malformed(format!(
                            "adding items to a {}",
                            p.type_name(other)
                        )))
                    }
                }
            }
            op::SETITEM => {
                if stack.len() < 3 {
                    return Err(underflow());
                }
                let v = stack.pop().ok_or_else(underflow)?;
                let k = stack.pop().ok_or_else(underflow)?;
                match stack[stack.len() - 1] {
                    Value::Dict(id) if p.dict_slot(id).is_some() => {
                        if let Some(d) = p.dict_slot_mut(id) {
                            d.items.push((k, v));
                        }
                    }
                    other => {
                        return Err(malformed(format!(
                            "SETITEM on a {}, not a dict",
                            p.type_name(other)
                        )))
                    }
                }
            }
            op::SETITEMS => {
                let m = pop_mark(&mut marks, stack.len()).map_err(malformed)?;
                if m == 0 {
                    return Err(underflow());
                }
                if (stack.len() - m) & 1 == 1 {
                    return Err(malformed("SETITEMS with an odd number of items".into()));
                }
                match stack[m - 1] {
                    Value::Dict(id) if p.dict_slot(id).is_some() => {
                        if let Some(d) = p.dict_slot_mut(id) {
                            d.items
                                .extend(stack[m..].chunks_exact(2).map(|c| (c[0], c[1])));
                        }
                        stack.truncate(m);
                    }
                    other => {
                        return Err(malformed(format!(
                            "SETITEMS on a {}, not a dict",
                            p.type_name(other)
                        )))
                    }
                }
            }
            op::PUT => {
                let line = r.line("PUT")?;
                let idx = parse_text_int(line)
                    .and_then(|i| u32::try_from(i).ok())
                    .ok_or_else(|| malformed("PUT with a bad memo index".into()))?;
                remember(&mut p, &mut memo, idx, *stack.last().ok_or_else(underflow)?);
            }
            op::BINPUT => {
                let idx = u32::from(r.u8("BINPUT")?);
                remember(&mut p, &mut memo, idx, *stack.last().ok_or_else(underflow)?);
            }
            op::LONG_BINPUT => {
                let idx = u32::from_le_bytes(r.le("LONG_BINPUT")?);
                remember(&mut p, &mut memo, idx, *stack.last().ok_or_else(underflow)?);
            }
            op::MEMOIZE => {
                let idx =
                    u32::try_from(memo.len()).map_err(|_| malformed("memo is full".into()))?;
                remember(&mut p, &mut memo, idx, *stack.last().ok_or_else(underflow)?);
            }
            op::GET | op::BINGET | op::LONG_BINGET => {
                let idx = match code {
                    op::GET => {
                        let line = r.line("GET")?;
                        parse_text_int(line)
                            .and_then(|i| u32::try_from(i).ok())
                            .ok_or_else(|| malformed("GET with a bad memo index".into()))?
                    }
                    op::BINGET => u32::from(r.u8("BINGET")?),
                    _ => u32::from_le_bytes(r.le("LONG_BINGET")?),
                };
                let v = memo
                    .get(idx)
                    .ok_or_else(|| malformed(format!("memo key {idx} was never stored")))?;
                stack.push(v);
            }
            _ => {
                if let Some(opname) = code_opcode_name(code) {
                    let name = match code {
                        op::GLOBAL | op::INST => {
                            let module = lossy(r.line(opname)?);
                            let name = lossy(r.line(opname)?);
                            format!("{module}.{name}")
                        }
                        op::STACK_GLOBAL => match (stack.len() >= 2)
                            .then(|| (stack[stack.len() - 2], stack[stack.len() - 1]))
                        {
                            Some((m, n)) if p.str(m).is_some() && p.str(n).is_some() => format!(
                                "{}.{}",
                                p.str(m).unwrap_or_default(),
                                p.str(n).unwrap_or_default()
                            ),
                            _ => "a global (STACK_GLOBAL)".to_owned(),
                        },
                        op::REDUCE | op::OBJ | op::NEWOBJ | op::NEWOBJ_EX => {
                            format!("a function call ({opname})")
                        }
                        op::BUILD => "an object's __setstate__ (BUILD)".to_owned(),
                        _ => format!("an external object ({opname})"),
                    };
                    return Err(PickleError::Code { name, offset: at });
                }
                return Err(PickleError::UnknownOpcode {
                    opcode: code,
                    offset: at,
                });
            }
        }
    }
}

/// Remember `v` at memo index `index`.
fn remember(p: &mut Pickle, memo: &mut Memo, index: u32, v: Value) {
    memo.put(index, v);
    p.memoised(index, v);
}

/// What appending to a list touches: the arena, the memo (where a dict taken over is replaced)
/// and the buffer of the appender's ids.
struct Lists<'a> {
    p: &'a mut Pickle,
    memo: &'a mut Memo,
    taken: &'a mut Vec<u32>,
    at: u64,
}

impl Lists<'_> {
    fn append(
        &mut self,
        appender: &mut dyn Appender,
        stack: &[Value],
        list: u32,
        items: Vec<Value>,
    ) -> Result<(), PickleError> {
        self.taken.clear();
        let took = appender
            .append(self.p, stack, list, &items, self.taken, self.at)
            .map_err(|Refused| PickleError::Refused { offset: self.at })?;
        if !took {
            self.p.lists[list as usize].extend(items);
            return Ok(());
        }
        for (item, &id) in items.iter().zip(self.taken.iter()) {
            if let Value::Dict(d) = *item {
                self.p.release_dict(d, self.memo, Value::Taken(id));
            }
        }
        Ok(())
    }
}

/// The stack position of the innermost MARK, checked against the stack (values popped below a
/// mark would otherwise make the mark point past the end).
fn pop_mark(marks: &mut Vec<usize>, stack_len: usize) -> Result<usize, String> {
    match marks.pop() {
        Some(m) if m <= stack_len => Ok(m),
        Some(_) => Err("values were popped below a MARK".into()),
        None => Err("an opcode needs a MARK but there is none".into()),
    }
}

/// A little-endian two's-complement integer (LONG1/LONG4).
fn long_value(p: &mut Pickle, b: &[u8]) -> Result<Value, String> {
    if b.is_empty() {
        return Ok(Value::Int(0));
    }
    if b.len() <= 8 {
        let negative = b[b.len() - 1] & 0x80 != 0;
        let mut buf = if negative { [0xffu8; 8] } else { [0u8; 8] };
        buf[..b.len()].copy_from_slice(b);
        return Ok(Value::Int(i64::from_le_bytes(buf)));
    }
    // Wider encodings of a value that still fits (redundant sign bytes) stay plain ints.
    let negative = b[b.len() - 1] & 0x80 != 0;
    let fill = if negative { 0xff } else { 0 };
    if b[8..].iter().all(|&x| x == fill) && ((b[7] & 0x80 != 0) == negative) {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(&b[..8]);
        return Ok(Value::Int(i64::from_le_bytes(buf)));
    }
    let id = arena_id(p.big_ints.len())?;
    p.big_ints.push(b.into());
    Ok(Value::BigInt(id))
}

fn parse_text_int(line: &[u8]) -> Option<i64> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Bytes of the pickle as an error quotes them: one line, escaped, cut.
fn shown(b: &[u8]) -> String {
    crate::error::quote(&String::from_utf8_lossy(b))
}

/// Python writes strings with `surrogatepass`; anything that is not valid UTF-8 is replaced
/// rather than refused, since only names and paths are ever read from them.
fn utf8(b: &[u8]) -> Box<str> {
    String::from_utf8_lossy(b).into()
}

/// Protocol 0 `UNICODE`: raw-unicode-escape, i.e. latin-1 with `\uXXXX` and `\UXXXXXXXX`.
fn raw_unicode_escape(line: &[u8]) -> Box<str> {
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        let b = line[i];
        if b == b'\\' && i + 1 < line.len() && (line[i + 1] == b'u' || line[i + 1] == b'U') {
            let n = if line[i + 1] == b'u' { 4 } else { 8 };
            let hex = line.get(i + 2..i + 2 + n);
            if let Some(c) = hex
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .and_then(char::from_u32)
            {
                out.push(c);
                i += 2 + n;
                continue;
            }
        }
        out.push(char::from(b));
        i += 1;
    }
    out.into()
}

/// Protocol 0 `STRING`: a quoted Python 2 `str` literal with backslash escapes.
fn python_string_literal(line: &[u8]) -> Option<Box<str>> {
    let q = *line.first()?;
    if line.len() < 2 || (q != b'\'' && q != b'"') || *line.last()? != q {
        return None;
    }
    let body = &line[1..line.len() - 1];
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i] == b'\\' && i + 1 < body.len() {
            let e = body[i + 1];
            i += 2;
            match e {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'r' => out.push(b'\r'),
                b'\\' | b'\'' | b'"' => out.push(e),
                b'x' => {
                    let h = body.get(i..i + 2)?;
                    out.push(u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?);
                    i += 2;
                }
                other => {
                    out.push(b'\\');
                    out.push(other);
                }
            }
        } else {
            out.push(body[i]);
            i += 1;
        }
    }
    Some(utf8(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Long runs of taken dicts fold into pieces, and every index reads back what was put there:
    /// values among and after the runs, a run broken by a value, a value put again inside a run.
    #[test]
    fn the_memo_folds_runs_of_taken_dicts_and_reads_back_every_index() {
        let mut memo = Memo::default();
        let mut expected = Vec::new();
        let mut id = 0u32;
        for i in 0..300_000u32 {
            let v = if i % 100_000 == 7 || (i < 5_000 && i % 3 == 0) {
                Value::Int(i64::from(i))
            } else {
                id += 1;
                Value::Taken(id)
            };
            memo.put(i, v);
            expected.push(v);
        }
        memo.put(150_000, Value::None);
        expected[150_000] = Value::None;
        assert!(memo.pieces.len() < 20, "{} pieces", memo.pieces.len());
        assert!(memo.tail.len() < MEMO_TAIL);
        for (i, &v) in expected.iter().enumerate() {
            assert_eq!(memo.get(i as u32), Some(v), "index {i}");
        }
        assert_eq!(memo.len(), expected.len());
        assert_eq!(memo.get(300_000), None);
    }

    fn ok(data: &[u8]) -> Pickle {
        parse(data).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn reads_a_protocol_4_dict_with_memo() {
        // pickle.dumps({'a': [1, -2, 3.5, None, True], 'b': ('x', b'y'), 'c': 2**70}, protocol=4)
        let data = b"\x80\x04\x95<\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xffG@\x0c\x00\x00\x00\x00\x00\x00N\x88e\x8c\x01b\x94\x8c\x01x\x94C\x01y\x94\x86\x94\x8c\x01c\x94\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00@u.";
        let p = ok(data);
        let root = p.root();
        let a = p.get(root, "a").unwrap();
        let items = p.seq(a).unwrap();
        assert_eq!(items[0], Value::Int(1));
        assert_eq!(items[1], Value::Int(-2));
        assert_eq!(items[2], Value::Float(3.5));
        assert_eq!(items[3], Value::None);
        assert_eq!(items[4], Value::Bool(true));
        let b = p.seq(p.get(root, "b").unwrap()).unwrap();
        assert_eq!(p.str(b[0]), Some("x"));
        assert_eq!(p.bytes(b[1]), Some(&b"y"[..]));
        let c = p.get(root, "c").unwrap();
        assert_eq!(p.big_int(c).map(|b| b.len()), Some(9));
        assert_eq!(p.big_u64(c), None, "2**70 does not fit 64 bits");
    }

    #[test]
    fn unsigned_64_bit_values_read_as_their_bits() {
        // pickle.dumps([2**64 - 1, 2**63, -2**64], protocol=2)
        let data = b"\x80\x02]q\x00(\x8a\t\xff\xff\xff\xff\xff\xff\xff\xff\x00\x8a\t\x00\x00\x00\x00\x00\x00\x00\x80\x00\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00\xffe.";
        let p = ok(data);
        let items = p.seq(p.root()).unwrap();
        assert_eq!(p.big_u64(items[0]), Some(u64::MAX));
        assert_eq!(p.big_u64(items[1]), Some(1 << 63));
        assert_eq!(p.big_u64(items[2]), None, "negative");
        assert_eq!(p.big_u64(Value::Int(5)), None, "only big integers");
    }

    #[test]
    fn reads_protocol_0_text_opcodes() {
        // pickle.dumps({'k': [1, 'v']}, protocol=0)
        let data = b"(dp0\nVk\np1\n(lp2\nI1\naVv\np3\nas.";
        let p = ok(data);
        let l = p.seq(p.get(p.root(), "k").unwrap()).unwrap();
        assert_eq!(l[0], Value::Int(1));
        assert_eq!(p.str(l[1]), Some("v"));
    }

    #[test]
    fn refuses_globals_and_calls_by_name() {
        // pickle.dumps(os.system, protocol=2): GLOBAL 'posix system'
        let e = parse(b"\x80\x02cposix\nsystem\nq\x00.").unwrap_err();
        assert_eq!(
            e,
            PickleError::Code {
                name: "posix.system".into(),
                offset: 2
            }
        );
        // protocol 4: STACK_GLOBAL after two strings
        let e = parse(b"\x80\x04\x8c\x02os\x8c\x06system\x93.").unwrap_err();
        assert!(matches!(e, PickleError::Code { ref name, offset: 14 } if name == "os.system"));
        let e = parse(b"\x80\x02N)R.").unwrap_err();
        assert!(matches!(e, PickleError::Code { ref name, .. } if name.contains("REDUCE")));
    }

    #[test]
    fn truncation_and_unknown_opcodes_are_errors() {
        assert!(matches!(
            parse(b"\x80\x04\x8c\x05ab").unwrap_err(),
            PickleError::Truncated { .. }
        ));
        assert!(matches!(
            parse(b"\x80\x04]").unwrap_err(),
            PickleError::Truncated { .. }
        ));
        assert_eq!(
            parse(b"\x80\x04\xff").unwrap_err(),
            PickleError::UnknownOpcode {
                opcode: 0xff,
                offset: 2
            }
        );
    }

    #[test]
    fn huge_declared_lengths_do_not_allocate() {
        let mut data = b"\x80\x04\x8d".to_vec();
        data.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            parse(&data).unwrap_err(),
            PickleError::Truncated { .. }
        ));
    }

    #[test]
    fn shared_values_are_stored_once() {
        // A list holding the same memoised string 200 times.
        let mut data = b"\x80\x04]\x94(\x8c\x03abc\x94".to_vec();
        for _ in 0..199 {
            data.extend_from_slice(b"h\x01");
        }
        data.extend_from_slice(b"e.");
        let p = ok(&data);
        assert_eq!(p.seq(p.root()).unwrap().len(), 200);
        assert_eq!(p.strings.len(), 1);
    }

    #[test]
    fn a_list_may_contain_itself() {
        // l = []; l.append(l)
        let p = ok(b"\x80\x04]\x94h\x00a.");
        let items = p.seq(p.root()).unwrap();
        assert_eq!(items[0], p.root());
    }

    #[test]
    fn stack_underflow_is_malformed() {
        assert!(matches!(
            parse(b"\x80\x04a.").unwrap_err(),
            PickleError::Malformed { .. }
        ));
        assert!(matches!(
            parse(b"\x80\x04.").unwrap_err(),
            PickleError::Malformed { .. }
        ));
    }
}
