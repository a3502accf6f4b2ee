//! The fast encoders of a streamed table's rows: CSV lines, and text lines once the writer has
//! set the columns' widths, written straight into the bytes of [`Rows`] with no cell held; what
//! they keep from row to row (the leading digits of timestamps, names, groups of cells); and how a
//! text cell is cut and padded to its column, as `aligned_line` prints it.

use std::ops::Range;

use super::{CellSink, Layout, Rows};
use crate::render::cells::truncate_middle;
use crate::render::csv::{eight_digits, push_csv_field, push_int, write_int, INT_ROOM};
use crate::render::format_fixed;
use crate::render::text::GAP;

/// The leading digits of the last number of nine digits or more written, all but its last
/// eight: the timestamps of a row, and of the rows after it, share them, and each of those is
/// written with one block of eight digits made rather than three.
#[derive(Default)]
pub(super) struct Lead {
    /// The number without its last eight digits (0: none kept, as no number kept has 0).
    high: u64,
    digits: [u8; 16],
    len: usize,
}

impl Lead {
    /// The least number with leading digits to keep.
    pub(super) const FROM: i64 = 100_000_000;

    /// `v` in decimal at the start of `out`, as [`write_int`] writes it; its length.
    #[inline(always)]
    pub(super) fn write(&mut self, v: i64, out: &mut [u8; INT_ROOM]) -> usize {
        const E8: u64 = Lead::FROM as u64;
        const ZEROS: u64 = u64::from_le_bytes([b'0'; 8]);
        if v < Lead::FROM {
            return write_int(v, out);
        }
        let high = v as u64 / E8;
        if high != self.high {
            // Below 2^63 / 10^8: eleven digits at most.
            let mut digits = [0u8; INT_ROOM];
            self.len = write_int(high as i64, &mut digits);
            self.digits.copy_from_slice(&digits[..16]);
            self.high = high;
        }
        let at = self.len;
        out[..16].copy_from_slice(&self.digits);
        let low = eight_digits((v as u64 % E8) as u32) | ZEROS;
        out[at..at + 8].copy_from_slice(&low.to_le_bytes());
        at + 8
    }
}

/// A group of cells already encoded.
pub(super) struct Group {
    key: Box<[i64]>,
    /// Text: the columns it fills (a group's cells are cut and padded to them); CSV: none.
    columns: Range<usize>,
    bytes: Vec<u8>,
}

/// A CSV line written straight into the bytes of [`Rows`], as [`crate::render::csv`] prints it: the fast
/// way, with no cell held.
pub(super) struct CsvCells<'r> {
    pub(super) rows: &'r mut Rows,
    pub(super) first: bool,
}

impl CsvCells<'_> {
    fn cell(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.rows.bytes.push(b',');
        }
    }
}

impl CsvCells<'_> {
    /// `v`: a timestamp with the leading digits kept ([`Lead`]), a smaller number as
    /// [`push_int`] writes it.
    fn number(&mut self, v: i64) {
        let Rows { bytes, lead, .. } = &mut *self.rows;
        if v < Lead::FROM {
            return push_int(bytes, v);
        }
        let at = bytes.len();
        bytes.resize(at + INT_ROOM, 0);
        let len = match bytes[at..].first_chunk_mut::<INT_ROOM>() {
            Some(room) => lead.write(v, room),
            None => 0,
        };
        bytes.truncate(at + len);
    }
}

impl CellSink for CsvCells<'_> {
    fn int(&mut self, v: i64) {
        self.cell();
        self.number(v);
    }
    fn float(&mut self, v: f64, decimals: usize) {
        self.cell();
        let s = self
            .rows
            .floats
            .entry((v.to_bits(), decimals))
            .or_insert_with(|| format_fixed(v, decimals));
        self.rows.bytes.extend_from_slice(s.as_bytes());
    }
    fn text(&mut self, s: &str) {
        self.cell();
        push_csv_field(&mut self.rows.bytes, s);
    }
    fn named(&mut self, key: u64, s: &str) {
        self.cell();
        let field = self.rows.names.entry((key, 0)).or_insert_with(|| {
            let mut field = Vec::with_capacity(s.len() + 2);
            push_csv_field(&mut field, s);
            field
        });
        self.rows.bytes.extend_from_slice(field);
    }
    fn missing(&mut self) {
        self.cell();
    }
    fn opt_int(&mut self, v: Option<i64>) {
        self.cell();
        if let Some(v) = v {
            self.number(v);
        }
    }
    fn ints(&mut self, vs: &[Option<i64>]) {
        // Room made once for a comma and the widest number each, and cut to what they took.
        let first = std::mem::take(&mut self.first);
        let Rows { bytes, lead, .. } = &mut *self.rows;
        let start = bytes.len();
        bytes.resize(start + vs.len() * (1 + INT_ROOM), 0);
        let mut at = start;
        for (i, &v) in vs.iter().enumerate() {
            if i > 0 || !first {
                bytes[at] = b',';
                at += 1;
            }
            if let Some(v) = v {
                if let Some(room) = bytes[at..].first_chunk_mut::<INT_ROOM>() {
                    at += lead.write(v, room);
                }
            }
        }
        bytes.truncate(at);
    }
    fn group(&mut self, key: &[i64], fill: &mut dyn FnMut(&mut dyn CellSink)) {
        // Kept with a comma before each cell; the first cell of a row drops its own.
        let skip = std::mem::take(&mut self.first) as usize;
        let rows = &mut *self.rows;
        let hash = group_hash(key);
        let known = rows.groups.get(&hash);
        if let Some(g) = known.filter(|g| same_key(&g.key, key)) {
            rows.bytes
                .extend_from_slice(&g.bytes[skip.min(g.bytes.len())..]);
            return;
        }
        // Another key of the same hash keeps its place; this one is made each time.
        let keep = known.is_none();
        let bytes = rows.encode_apart(|scratch| {
            fill(&mut CsvCells {
                rows: scratch,
                first: false,
            })
        });
        rows.bytes
            .extend_from_slice(&bytes[skip.min(bytes.len())..]);
        if keep {
            rows.keep_group(hash, key, 0..0, bytes);
        }
    }
    fn as_dyn(&mut self) -> &mut dyn CellSink {
        self
    }
}

/// A text line written straight into the bytes of [`Rows`], each cell cut and padded to its
/// column as `aligned_line` prints it, once the writer has set the layout: the cells of a row
/// need no string each, nor the writer a pass over them.
pub(super) struct TextCells<'r> {
    pub(super) rows: &'r mut Rows,
    pub(super) layout: &'r Layout,
    /// The column of the next cell.
    pub(super) column: usize,
}

impl TextCells<'_> {
    /// The column of the next cell, after the gap before it; none past the last column (whose
    /// cells `aligned_line` leaves out).
    fn next(&mut self) -> Option<usize> {
        let column = self.column;
        if column >= self.layout.widths.len() {
            return None;
        }
        self.column += 1;
        if column > 0 {
            self.rows.bytes.extend_from_slice(&[b' '; GAP]);
        }
        Some(column)
    }

    /// `s` in the next column.
    fn put(&mut self, s: &str) {
        if let Some(column) = self.next() {
            push_aligned(&mut self.rows.bytes, self.layout, column, s);
        }
    }
}

/// `s` in `column` of `layout`: text cut by its middle to the column's width where it is wider
/// ([`truncate_middle`]), a number never (a wider one pushes the rest of its line right);
/// numbers right-aligned, text left-aligned and padded unless it ends the line.
fn push_aligned(out: &mut Vec<u8>, layout: &Layout, column: usize, s: &str) {
    if s.is_ascii() {
        return push_ascii(out, layout, column, s.as_bytes());
    }
    let width = layout.widths[column];
    let chars = s.chars().count();
    let cut;
    let (s, chars) = if chars > width && !layout.numeric[column] {
        cut = truncate_middle(s, width);
        (cut.as_str(), width)
    } else {
        (s, chars)
    };
    pad_around(
        out,
        layout,
        column,
        s.as_bytes(),
        width.saturating_sub(chars),
    );
}

/// [`push_aligned`] of ASCII text (every number, most names), a byte a character: cut with no
/// string made, as [`truncate_middle`] cuts it.
#[inline]
fn push_ascii(out: &mut Vec<u8>, layout: &Layout, column: usize, s: &[u8]) {
    let width = layout.widths[column];
    if s.len() <= width || layout.numeric[column] {
        return pad_around(out, layout, column, s, width.saturating_sub(s.len()));
    }
    if width > 0 {
        let keep = width - 1;
        let head = keep.div_ceil(2);
        out.extend_from_slice(&s[..head]);
        out.extend_from_slice("…".as_bytes());
        out.extend_from_slice(&s[s.len() - (keep - head)..]);
    }
}

/// `s` with `pad` spaces: before a number, after text unless it ends the line.
#[inline(always)]
fn pad_around(out: &mut Vec<u8>, layout: &Layout, column: usize, s: &[u8], pad: usize) {
    if layout.numeric[column] {
        out.resize(out.len() + pad, b' ');
        out.extend_from_slice(s);
    } else {
        out.extend_from_slice(s);
        if column + 1 < layout.widths.len() {
            out.resize(out.len() + pad, b' ');
        }
    }
}

/// The line that starts at `start` of `bytes` without the white space at its end, as
/// `aligned_line` trims it.
pub(super) fn trim_line_end(bytes: &mut Vec<u8>, start: usize) {
    match bytes[start..].last() {
        Some(&b) if b.is_ascii() && !char::from(b).is_whitespace() => {}
        None => {}
        Some(_) => {
            // Every cell is whole text, or text cut at characters.
            let line = String::from_utf8_lossy(&bytes[start..]);
            let keep = line.trim_end().len();
            bytes.truncate(start + keep);
        }
    }
}

impl CellSink for TextCells<'_> {
    fn int(&mut self, v: i64) {
        let Some(column) = self.next() else { return };
        let mut digits = [0u8; INT_ROOM];
        let len = self.rows.lead.write(v, &mut digits);
        push_ascii(&mut self.rows.bytes, self.layout, column, &digits[..len]);
    }
    fn float(&mut self, v: f64, decimals: usize) {
        let Some(column) = self.next() else { return };
        let s = self
            .rows
            .floats
            .entry((v.to_bits(), decimals))
            .or_insert_with(|| format_fixed(v, decimals));
        push_aligned(&mut self.rows.bytes, self.layout, column, s);
    }
    fn text(&mut self, s: &str) {
        self.put(s);
    }
    fn named(&mut self, key: u64, s: &str) {
        let Some(column) = self.next() else { return };
        let layout = self.layout;
        let cell = self.rows.names.entry((key, column)).or_insert_with(|| {
            let mut cell = Vec::new();
            push_aligned(&mut cell, layout, column, s);
            cell
        });
        self.rows.bytes.extend_from_slice(cell);
    }
    fn missing(&mut self) {
        self.put("-");
    }
    fn group(&mut self, key: &[i64], fill: &mut dyn FnMut(&mut dyn CellSink)) {
        let rows = &mut *self.rows;
        let start = self.column;
        let hash = group_hash(key) ^ (start as u64);
        let known = rows.groups.get(&hash);
        if let Some(g) = known.filter(|g| g.columns.start == start && same_key(&g.key, key)) {
            rows.bytes.extend_from_slice(&g.bytes);
            self.column = g.columns.end;
            return;
        }
        let keep = known.is_none();
        let mut end = start;
        let layout = self.layout;
        let bytes = rows.encode_apart(|scratch| {
            let mut cells = TextCells {
                rows: scratch,
                layout,
                column: start,
            };
            fill(&mut cells);
            end = cells.column;
        });
        rows.bytes.extend_from_slice(&bytes);
        self.column = end;
        if keep {
            rows.keep_group(hash, key, start..end, bytes);
        }
    }
    fn as_dyn(&mut self) -> &mut dyn CellSink {
        self
    }
}

/// Whether two groups' keys are equal: compared in place, every number at once (a call to
/// compare bytes costs more here, on every row).
fn same_key(a: &[i64], b: &[i64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

impl Rows {
    /// The bytes `encode` writes into rows of their own, which share these rows' encoded
    /// numbers and names: a group of cells, kept apart to be cached.
    fn encode_apart(&mut self, encode: impl FnOnce(&mut Rows)) -> Vec<u8> {
        let mut scratch = Rows {
            floats: std::mem::take(&mut self.floats),
            names: std::mem::take(&mut self.names),
            ..Rows::default()
        };
        encode(&mut scratch);
        self.floats = scratch.floats;
        self.names = scratch.names;
        scratch.bytes
    }

    /// Keep a group's encoded `bytes`, filling `columns`, under its key's `hash`.
    fn keep_group(&mut self, hash: u64, key: &[i64], columns: Range<usize>, bytes: Vec<u8>) {
        let key = key.into();
        self.groups.insert(
            hash,
            Group {
                key,
                columns,
                bytes,
            },
        );
    }
}

/// The hash a group of cells is kept by (the map hashes it again): each number of the key
/// times an odd constant of its place, summed. The products do not wait on one another, as a
/// hasher's chain of multiplications would, on every row of a trace.
pub(super) fn group_hash(key: &[i64]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    key.iter().enumerate().fold(key.len() as u64, |h, (i, &v)| {
        h.wrapping_add((v as u64).wrapping_mul(K ^ ((i as u64) << 1)))
    })
}
