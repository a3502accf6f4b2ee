//! A Python pickle writer for plain data (protocol 4): dicts, lists, tuples, strings, integers of
//! any size up to 64 bits, floats, booleans and `None`, with framing and a memo.
//!
//! It writes the opcodes CPython's own pickler uses for these types (the same set a
//! `torch.cuda.memory._snapshot()` pickle is made of), so any unpickler reads the result: strings
//! are memoized (`MEMOIZE`, then `BINGET`/`LONG_BINGET` on repeats), containers are built with
//! `MARK` ... `SETITEMS`/`APPENDS` in batches of 1000 as CPython does, and the stream is cut into
//! `FRAME`s of about 64 KiB. It never writes a `GLOBAL`, `REDUCE` or any opcode that makes the
//! reader run code. The caller drives the structure (`begin_dict`, `key`, ..., `end_dict`);
//! nothing here knows about memory snapshots. [`super::read`] reads what this writes.

use std::collections::HashMap;

use super::op;

/// CPython's frame size target (`pickle._FRAME_SIZE_TARGET`).
const FRAME_TARGET: usize = 64 * 1024;
/// CPython's batch size for `SETITEMS`/`APPENDS` (`pickle._BATCHSIZE`).
const BATCH: usize = 1000;

/// An index into the unpickler's memo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoId(pub u32);

#[derive(Debug)]
enum Open {
    /// A dict or list: items since the last `MARK`, and whether a `MARK` is pending.
    Dict {
        pending: usize,
        marked: bool,
    },
    List {
        pending: usize,
        marked: bool,
    },
}

/// Writes one pickle into memory. Call the value methods in document order, then
/// [`PickleWriter::finish`].
#[derive(Debug)]
pub struct PickleWriter {
    /// Finished frames (with their `FRAME` headers), after the `PROTO` opcode.
    out: Vec<u8>,
    /// The frame being filled.
    frame: Vec<u8>,
    memo_len: u32,
    strings: HashMap<String, MemoId>,
    open: Vec<Open>,
}

impl Default for PickleWriter {
    fn default() -> Self {
        PickleWriter::new()
    }
}

impl PickleWriter {
    pub fn new() -> PickleWriter {
        PickleWriter {
            out: vec![op::PROTO, 4],
            frame: Vec::with_capacity(FRAME_TARGET + 1024),
            memo_len: 0,
            strings: HashMap::new(),
            open: Vec::new(),
        }
    }

    /// Start a new frame when the current one has reached the target: opcodes never straddle
    /// frames, so this is only called between opcodes.
    fn boundary(&mut self) {
        if self.frame.len() >= FRAME_TARGET {
            self.commit_frame();
        }
    }

    fn commit_frame(&mut self) {
        if self.frame.is_empty() {
            return;
        }
        self.out.push(op::FRAME);
        self.out
            .extend_from_slice(&(self.frame.len() as u64).to_le_bytes());
        self.out.append(&mut self.frame);
    }

    fn opcode(&mut self, code: u8) {
        self.boundary();
        self.frame.push(code);
    }

    /// A value was pushed onto the unpickler's stack: count it toward the enclosing container and
    /// flush a full batch.
    fn pushed(&mut self) {
        let mut flush = None;
        match self.open.last_mut() {
            Some(Open::List { pending, marked }) => {
                *pending += 1;
                if *pending == BATCH {
                    flush = Some(op::APPENDS);
                    *pending = 0;
                    *marked = false;
                }
            }
            // Dict items are counted per pair in `key`/value: see `dict_value_done`.
            Some(Open::Dict { .. }) | None => {}
        }
        if let Some(code) = flush {
            self.opcode(code);
        }
    }

    /// Before a list item or dict key: make sure a `MARK` opened the current batch.
    fn before_item(&mut self) {
        let need_mark = match self.open.last_mut() {
            Some(Open::List { marked, .. }) | Some(Open::Dict { marked, .. }) => {
                let m = !*marked;
                *marked = true;
                m
            }
            None => false,
        };
        if need_mark {
            self.opcode(op::MARK);
        }
    }

    fn memoize(&mut self) -> MemoId {
        self.opcode(op::MEMOIZE);
        let id = MemoId(self.memo_len);
        self.memo_len += 1;
        id
    }

    fn value_start(&mut self) {
        if matches!(self.open.last(), Some(Open::List { .. })) {
            self.before_item();
        }
    }

    fn value_end(&mut self) {
        match self.open.last_mut() {
            Some(Open::Dict { pending, marked }) => {
                // A dict value completes a key/value pair.
                *pending += 1;
                if *pending == BATCH {
                    *pending = 0;
                    *marked = false;
                    self.opcode(op::SETITEMS);
                }
            }
            _ => self.pushed(),
        }
    }

    /// A dict key (always a string here, memoized like every string).
    pub fn key(&mut self, k: &str) {
        debug_assert!(matches!(self.open.last(), Some(Open::Dict { .. })));
        self.before_item();
        self.string_raw(k);
    }

    pub fn none(&mut self) {
        self.value_start();
        self.opcode(op::NONE);
        self.value_end();
    }

    pub fn bool(&mut self, v: bool) {
        self.value_start();
        self.opcode(if v { op::NEWTRUE } else { op::NEWFALSE });
        self.value_end();
    }

    pub fn int(&mut self, v: i64) {
        self.value_start();
        self.int_raw(v as i128);
        self.value_end();
    }

    pub fn uint(&mut self, v: u64) {
        self.value_start();
        self.int_raw(v as i128);
        self.value_end();
    }

    fn int_raw(&mut self, v: i128) {
        if (0..=0xff).contains(&v) {
            self.opcode(op::BININT1);
            self.frame.push(v as u8);
        } else if (0..=0xffff).contains(&v) {
            self.opcode(op::BININT2);
            self.frame.extend_from_slice(&(v as u16).to_le_bytes());
        } else if (i32::MIN as i128..=i32::MAX as i128).contains(&v) {
            self.opcode(op::BININT);
            self.frame.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            // LONG1: little-endian two's complement, as few bytes as keep the sign.
            let bytes = v.to_le_bytes();
            let mut n = 16;
            while n > 1 {
                let top = bytes[n - 1];
                let next_sign = bytes[n - 2] & 0x80;
                if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.opcode(op::LONG1);
            self.frame.push(n as u8);
            self.frame.extend_from_slice(&bytes[..n]);
        }
    }

    pub fn float(&mut self, v: f64) {
        self.value_start();
        self.opcode(op::BINFLOAT);
        self.frame.extend_from_slice(&v.to_be_bytes());
        self.value_end();
    }

    /// A string; a repeat of an earlier string is written as a memo reference, so equal strings
    /// load as one shared object (as in PyTorch's own pickles).
    pub fn string(&mut self, s: &str) {
        self.value_start();
        self.string_raw(s);
        self.value_end();
    }

    fn string_raw(&mut self, s: &str) {
        if let Some(&id) = self.strings.get(s) {
            self.get_raw(id);
            return;
        }
        let b = s.as_bytes();
        if b.len() < 256 {
            self.opcode(op::SHORT_BINUNICODE);
            self.frame.push(b.len() as u8);
        } else {
            self.opcode(op::BINUNICODE);
            self.frame
                .extend_from_slice(&(b.len() as u32).to_le_bytes());
        }
        self.frame.extend_from_slice(b);
        let id = self.memoize();
        self.strings.insert(s.to_owned(), id);
    }

    /// A reference to an object memoized earlier (see [`PickleWriter::end_dict_memo`]).
    pub fn get(&mut self, id: MemoId) {
        self.value_start();
        self.get_raw(id);
        self.value_end();
    }

    fn get_raw(&mut self, id: MemoId) {
        if id.0 < 256 {
            self.opcode(op::BINGET);
            self.frame.push(id.0 as u8);
        } else {
            self.opcode(op::LONG_BINGET);
            self.frame.extend_from_slice(&id.0.to_le_bytes());
        }
    }

    pub fn begin_dict(&mut self) {
        self.value_start();
        self.opcode(op::EMPTY_DICT);
        self.open.push(Open::Dict {
            pending: 0,
            marked: false,
        });
    }

    fn close_dict(&mut self) {
        match self.open.pop() {
            Some(Open::Dict { pending, marked }) => {
                // CPython writes a lone item as SETITEM without a MARK; MARK ... SETITEMS
                // with one item means the same to every unpickler.
                if marked && pending > 0 {
                    self.opcode(op::SETITEMS);
                }
            }
            other => panic!("end_dict without begin_dict (open: {other:?})"),
        }
    }

    pub fn end_dict(&mut self) {
        self.close_dict();
        self.value_end();
    }

    /// Close a dict and memoize it, so later [`PickleWriter::get`] calls refer to the same object.
    pub fn end_dict_memo(&mut self) -> MemoId {
        self.close_dict();
        let id = self.memoize();
        self.value_end();
        id
    }

    pub fn begin_list(&mut self) {
        self.value_start();
        self.opcode(op::EMPTY_LIST);
        self.open.push(Open::List {
            pending: 0,
            marked: false,
        });
    }

    pub fn end_list(&mut self) {
        match self.open.pop() {
            Some(Open::List { pending, marked }) => {
                if marked && pending > 0 {
                    self.opcode(op::APPENDS);
                }
            }
            other => panic!("end_list without begin_list (open: {other:?})"),
        }
        self.value_end();
    }

    /// A tuple of integers, written as CPython writes short tuples (`TUPLE2` for a pair).
    pub fn int_tuple(&mut self, items: &[i64]) {
        self.value_start();
        if items.len() > 3 {
            self.opcode(op::MARK);
        }
        for &v in items {
            self.int_raw(v as i128);
        }
        let code = match items.len() {
            0 => op::EMPTY_TUPLE,
            1 => op::TUPLE1,
            2 => op::TUPLE2,
            3 => op::TUPLE3,
            _ => op::TUPLE,
        };
        self.opcode(code);
        self.value_end();
    }

    /// Finish the pickle: `STOP`, the last frame, and the bytes.
    pub fn finish(mut self) -> Vec<u8> {
        assert!(self.open.is_empty(), "unclosed containers: {:?}", self.open);
        self.frame.push(op::STOP);
        self.commit_frame();
        self.out
    }

    /// How many objects the memo holds.
    pub fn memo_len(&self) -> u32 {
        self.memo_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPython's `pickle.dumps({'a': 1}, protocol=4)`.
    #[test]
    fn small_dict_matches_cpython_layout() {
        let mut w = PickleWriter::new();
        w.begin_dict();
        w.key("a");
        w.int(1);
        w.end_dict();
        let b = w.finish();
        // \x80\x04 FRAME(len) } MARK? CPython: '}\x94' memoizes the dict; we don't, which is
        // valid. Check the parts that matter: protocol, a frame, the key, STOP.
        assert_eq!(&b[..2], &[0x80, 4]);
        assert_eq!(b[2], op::FRAME);
        let len = u64::from_le_bytes(b[3..11].try_into().unwrap()) as usize;
        assert_eq!(b.len(), 11 + len);
        assert_eq!(*b.last().unwrap(), op::STOP);
        assert_eq!(
            &b[11..],
            &[
                op::EMPTY_DICT,
                op::MARK,
                op::SHORT_BINUNICODE,
                1,
                b'a',
                op::MEMOIZE,
                op::BININT1,
                1,
                op::SETITEMS,
                op::STOP
            ]
        );
    }

    #[test]
    fn repeated_strings_use_the_memo() {
        let mut w = PickleWriter::new();
        w.begin_list();
        w.string("forward");
        w.string("forward");
        w.end_list();
        let b = w.finish();
        let body = &b[11..];
        assert_eq!(body.windows(7).filter(|s| s == b"forward").count(), 1);
        assert!(body.windows(2).any(|s| s == [op::BINGET, 0]));
    }

    #[test]
    fn integers_pick_the_smallest_opcode() {
        let enc = |v: i128| {
            let mut w = PickleWriter::new();
            w.int_raw(v);
            w.frame.clone()
        };
        assert_eq!(enc(0), [op::BININT1, 0]);
        assert_eq!(enc(300), [op::BININT2, 44, 1]);
        assert_eq!(enc(-1), [op::BININT, 0xff, 0xff, 0xff, 0xff]);
        // 2**31 needs 5 bytes (sign byte), as CPython's encode_long gives.
        assert_eq!(enc(1 << 31), [op::LONG1, 5, 0, 0, 0, 0x80, 0]);
        // A device address from a real snapshot: 140480226525184 -> 6 bytes.
        assert_eq!(
            enc(140_480_226_525_184),
            [op::LONG1, 6, 0, 0, 0, 0x1a, 0xc4, 0x7f]
        );
        assert_eq!(enc(u64::MAX as i128).len(), 2 + 9);
    }

    #[test]
    fn large_lists_are_batched_and_framed() {
        let mut w = PickleWriter::new();
        w.begin_list();
        for i in 0..70_000 {
            w.int(i);
        }
        w.end_list();
        let b = w.finish();
        let appends = b.iter().filter(|&&c| c == op::APPENDS).count();
        assert!(appends >= 70, "{appends}");
        let frames = b.iter().filter(|&&c| c == op::FRAME).count();
        assert!(frames >= 2, "{frames}");
    }
}
