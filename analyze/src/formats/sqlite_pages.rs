//! Full scans of SQLite tables read straight from the file's B-tree pages, for the large tables
//! of an export (kernels, API calls, memory operations): several times faster than stepping a
//! `SELECT` through SQLite, and splittable, since a table's leaf pages can be handed to several
//! threads.
//!
//! Only what a full scan needs is read: the file header, the interior pages of a table's B-tree
//! (to list its leaf pages in key order, the order SQLite's own full scan returns rows in), and
//! the cells of the leaf pages, with their overflow chains. The values come back as SQLite's
//! own [`ValueRef`]s, so a row reads the same whichever way it was fetched. Anything this reader
//! does not handle it declines before the first row ([`PageFile::open`] and [`PageFile::table`]
//! return `None`), and the caller runs SQL instead: a write-ahead log or hot journal beside the
//! file, UTF-16 text, tables without rowid, generated columns, columns with a default value
//! (rows written before an `ALTER TABLE ... ADD COLUMN` read it from the schema), indexed
//! tables. A page that does not parse is damage, reported as [`Damaged`]; every page number is
//! checked against the file, and the walk of a B-tree visits each page at most once, so a
//! damaged file ends in an error, never a loop or a panic.

use std::fs::File;
use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::Connection;

/// The file's pages do not parse: the file is damaged or cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged(pub String);

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn damaged<T>(what: impl Into<String>) -> Result<T, Damaged> {
    Err(Damaged(what.into()))
}

/// An SQLite database file opened for page reads.
pub struct PageFile {
    file: File,
    page_size: usize,
    /// Bytes of a page that hold data (the page size less the reserved bytes at its end).
    usable: usize,
    pages: u32,
}

/// Where a column's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// The n-th value of the record.
    Record(usize),
    /// The n-th value of the record, of a column of REAL affinity: SQLite stores a whole number
    /// there as an integer and reads it back as a real.
    Real(usize),
    /// The rowid (a column declared `INTEGER PRIMARY KEY`, which the record stores as NULL).
    Rowid,
    /// A column the table lacks: always NULL.
    Null,
}

/// A table ready to scan: its leaf pages in key order.
pub struct Table {
    pub leaves: Vec<u32>,
}

thread_local! {
    /// The buffer of a thread's page reads, kept from one scan to the next (a scan that starts
    /// inside another finds it taken and makes its own).
    static RUN_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Deeper B-trees than any SQLite writes (it stops at 20) are damage.
const MAX_DEPTH: usize = 64;
/// Consecutive pages read with one system call.
const RUN_PAGES: usize = 256;

impl PageFile {
    /// Open `path` for page reads, or `None` when this reader does not handle the file (the
    /// caller then uses SQLite): a write-ahead log or journal beside it, UTF-16 text, an
    /// unusual header.
    pub fn open(path: &Path) -> Result<Option<PageFile>, Damaged> {
        for suffix in ["-wal", "-journal"] {
            let mut beside = path.as_os_str().to_owned();
            beside.push(suffix);
            if std::fs::metadata(&beside).is_ok_and(|m| m.len() > 0) {
                return Ok(None);
            }
        }
        let Ok(file) = File::open(path) else {
            return Ok(None);
        };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return Ok(None);
        };
        let mut header = [0u8; 100];
        if len < 100 || read_at(&file, &mut header, 0).is_err() {
            return damaged("the file is shorter than an SQLite header");
        }
        if &header[..16] != b"SQLite format 3\0" {
            return damaged("the SQLite header is damaged");
        }
        let page_size = match u16::from_be_bytes([header[16], header[17]]) {
            1 => 65536,
            n => n as usize,
        };
        if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
            return damaged("the SQLite header gives an impossible page size");
        }
        // Write and read versions: 2 is a write-ahead log, which may hold pages the file lacks.
        if header[18] != 1 || header[19] != 1 {
            return Ok(None);
        }
        let usable = page_size - header[20] as usize;
        // The payload fractions are fixed; a text encoding other than UTF-8 needs converting.
        if usable < 480 || header[21..24] != [64, 32, 32] || !matches!(be32(&header[56..]), 0 | 1) {
            return Ok(None);
        }
        let in_file = (len / page_size as u64).min(u32::MAX as u64) as u32;
        let stated = be32(&header[28..]);
        let valid = stated != 0 && header[24..28] == header[92..96];
        if valid && stated > in_file {
            return damaged(format!(
                "the file holds {in_file} pages of the {stated} its header gives (cut short?)"
            ));
        }
        Ok(Some(PageFile {
            file,
            page_size,
            usable,
            pages: if valid { stated } else { in_file },
        }))
    }

    /// The leaf pages of the table `name` and where each of `columns` is stored in its rows, or
    /// `None` when SQL must read it (see the module's description, and a column the table
    /// lacks); a column named `NULL` reads as NULL, as in a `SELECT` list.
    pub fn table(
        &self,
        conn: &Connection,
        name: &str,
        columns: &[&str],
    ) -> Result<Option<(Table, Vec<Field>)>, Damaged> {
        let Some(fields) = fields(conn, name, columns) else {
            return Ok(None);
        };
        let Some(root) = root_page(conn, name) else {
            return Ok(None);
        };
        match self.leaves(root)? {
            Some(leaves) => Ok(Some((Table { leaves }, fields))),
            None => Ok(None),
        }
    }

    fn read_page(&self, page: u32, buf: &mut [u8]) -> Result<(), Damaged> {
        if page == 0 || page > self.pages {
            return damaged(format!(
                "a B-tree points to page {page}, outside the file's {} pages",
                self.pages
            ));
        }
        let offset = (page as u64 - 1) * self.page_size as u64;
        read_at(&self.file, buf, offset).or_else(|_| {
            damaged(format!(
                "page {page} could not be read (the file is cut short?)"
            ))
        })
    }

    /// The leaf pages under `root` in key order; `None` when `root` is not a table B-tree.
    /// Leaves are listed, not read: every leaf of a B-tree lies at the same depth, found down
    /// its left edge, and [`PageFile::scan`] checks each one it reads.
    fn leaves(&self, root: u32) -> Result<Option<Vec<u32>>, Damaged> {
        let mut buf = vec![0u8; self.page_size];
        // The depth of the leaves.
        let mut depth = 0;
        let mut page = root;
        loop {
            self.read_page(page, &mut buf)?;
            let at = if page == 1 { 100 } else { 0 };
            match buf[at] {
                13 => break,
                5 if depth < MAX_DEPTH => {
                    page = self.child(&buf, page, 0)?;
                    depth += 1;
                }
                5 => return damaged("a B-tree is deeper than any SQLite writes"),
                2 | 10 if page == root => return Ok(None),
                t => return damaged(format!("page {page} is of no table B-tree page type ({t})")),
            }
        }
        if depth == 0 {
            return Ok(Some(vec![root]));
        }
        let mut seen = vec![false; self.pages as usize + 1];
        let mut leaves = Vec::new();
        // Interior pages to visit, the next one last, with their depth.
        let mut stack = vec![(root, 0usize)];
        while let Some((page, level)) = stack.pop() {
            if std::mem::replace(&mut seen[page as usize], true) {
                return damaged(format!("a B-tree points to page {page} twice"));
            }
            self.read_page(page, &mut buf)?;
            let at = if page == 1 { 100 } else { 0 };
            if buf[at] != 5 {
                return damaged(format!("page {page} is not an interior page of a table"));
            }
            let cells = u16::from_be_bytes([buf[at + 3], buf[at + 4]]) as usize;
            let children = (0..=cells).map(|i| self.child(&buf, page, i));
            if level + 1 == depth {
                for child in children {
                    leaves.push(child?);
                }
            } else {
                let children: Vec<u32> = children.collect::<Result<_, _>>()?;
                stack.extend(children.into_iter().rev().map(|c| (c, level + 1)));
            }
        }
        for &leaf in &leaves {
            if std::mem::replace(&mut seen[leaf as usize], true) {
                return damaged(format!("a B-tree points to page {leaf} twice"));
            }
        }
        Ok(Some(leaves))
    }

    /// The `i`-th child of the interior table page `buf` (number `page`); the one past its last
    /// cell is its right-most pointer. Checked to lie in the file.
    fn child(&self, buf: &[u8], page: u32, i: usize) -> Result<u32, Damaged> {
        let at = if page == 1 { 100 } else { 0 };
        let cells = u16::from_be_bytes([buf[at + 3], buf[at + 4]]) as usize;
        let pointers = at + 12;
        if pointers + 2 * cells > self.usable {
            return damaged(format!("page {page} lists more cells than it holds"));
        }
        let child = if i >= cells {
            be32(&buf[at + 8..])
        } else {
            let cell =
                u16::from_be_bytes([buf[pointers + 2 * i], buf[pointers + 2 * i + 1]]) as usize;
            if cell + 4 > self.usable {
                return damaged(format!("a cell of page {page} lies outside it"));
            }
            be32(&buf[cell..])
        };
        if child == 0 || child > self.pages {
            return damaged(format!(
                "page {page} points to page {child}, outside the file's {} pages",
                self.pages
            ));
        }
        Ok(child)
    }

    /// Call `row` with every row of the leaf pages `leaves`, in order; [`Row::get`]`(i)` reads
    /// the value of `fields[i]`. `row` may stop the scan with an error of its own.
    pub fn scan<E: From<Damaged>>(
        &self,
        leaves: &[u32],
        fields: &[Field],
        row: impl FnMut(&Row<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        // Record positions wanted, ascending, and where each goes in the output.
        let mut wanted: Vec<(usize, usize)> = fields
            .iter()
            .enumerate()
            .filter_map(|(out, f)| match f {
                Field::Record(i) | Field::Real(i) => Some((*i, out)),
                _ => None,
            })
            .collect();
        wanted.sort_unstable();
        // A position asked for twice is decoded once and copied.
        let mut copies = Vec::new();
        wanted.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                copies.push((a.1, b.1));
            }
            same
        });
        // What the record does not give: the rowid on every row, and reals stored as integers.
        // A column the table lacks stays NULL, as every slot starts.
        let of =
            |want: fn(&Field) -> bool| (0..fields.len()).filter(|&i| want(&fields[i])).collect();
        let layout = Layout {
            wanted,
            copies,
            rowids: of(|f| *f == Field::Rowid),
            reals: of(|f| matches!(f, Field::Real(_))),
        };
        let mut slots = vec![Slot::Null; fields.len()];
        // As many pages as one read takes: a scan of a few leaves reads no more. The buffer of
        // the thread's last scan serves again, unzeroed: each read fills what it covers.
        let mut buf = RUN_BUFFER.take();
        buf.resize(self.page_size * RUN_PAGES.min(leaves.len()).max(1), 0);
        let scanned = self.scan_runs(leaves, &layout, &mut slots, &mut buf, row);
        RUN_BUFFER.set(buf);
        scanned
    }

    /// [`PageFile::scan`]'s reads and rows, into `buf`.
    fn scan_runs<E: From<Damaged>>(
        &self,
        leaves: &[u32],
        layout: &Layout,
        slots: &mut [Slot],
        buf: &mut [u8],
        mut row: impl FnMut(&Row<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut spill = Vec::new();
        let mut i = 0;
        while i < leaves.len() {
            // A run of consecutive pages, read at once.
            let mut n = 1;
            while i + n < leaves.len() && n < RUN_PAGES && leaves[i + n] == leaves[i] + n as u32 {
                n += 1;
            }
            let first = leaves[i];
            if first == 0 || first as u64 + n as u64 - 1 > self.pages as u64 {
                return Err(Damaged(format!("page {first} lies outside the file")).into());
            }
            let run = &mut buf[..n * self.page_size];
            read_at(&self.file, run, (first as u64 - 1) * self.page_size as u64).map_err(|_| {
                Damaged(format!(
                    "page {first} could not be read (the file is cut short?)"
                ))
            })?;
            for p in 0..n {
                let page = &buf[p * self.page_size..(p + 1) * self.page_size];
                let number = first + p as u32;
                let at = if number == 1 { 100 } else { 0 };
                if page[at] != 13 {
                    return Err(Damaged(format!("page {number} is not a leaf page")).into());
                }
                let cells = u16::from_be_bytes([page[at + 3], page[at + 4]]) as usize;
                let pointers = at + 8;
                if pointers + 2 * cells > self.usable {
                    return Err(
                        Damaged(format!("page {number} lists more cells than it holds")).into(),
                    );
                }
                for c in 0..cells {
                    let cell =
                        u16::from_be_bytes([page[pointers + 2 * c], page[pointers + 2 * c + 1]])
                            as usize;
                    let (local, rowid) =
                        self.cell(&page[..self.usable], cell, number, &mut spill)?;
                    let payload = local.unwrap_or(&spill[..]);
                    decode(payload, &layout.wanted, slots)
                        .map_err(|m| Damaged(format!("a row of page {number}: {m}")))?;
                    for &(from, to) in &layout.copies {
                        slots[to] = slots[from];
                    }
                    for &out in &layout.rowids {
                        slots[out] = Slot::Int(rowid);
                    }
                    for &out in &layout.reals {
                        if let Slot::Int(v) = slots[out] {
                            slots[out] = Slot::Real(v as f64);
                        }
                    }
                    row(&Row { slots, payload })?;
                }
            }
            i += n;
        }
        Ok(())
    }

    /// The payload and rowid of the cell at `offset` of a leaf page: the payload in place when it
    /// fits in the page (`Some`), else gathered with its overflow pages into `spill` (`None`).
    #[inline]
    fn cell<'p>(
        &self,
        page: &'p [u8],
        offset: usize,
        number: u32,
        spill: &mut Vec<u8>,
    ) -> Result<(Option<&'p [u8]>, i64), Damaged> {
        let bad = || Damaged(format!("a cell of page {number} does not parse"));
        let (size, a) = varint(page.get(offset..).ok_or_else(bad)?).ok_or_else(bad)?;
        let (rowid, b) = varint(page.get(offset + a..).ok_or_else(bad)?).ok_or_else(bad)?;
        let start = offset + a + b;
        if size <= self.usable as u64 - 35 {
            let end = start + size as usize;
            return Ok((Some(page.get(start..end).ok_or_else(bad)?), rowid as i64));
        }
        self.overflowing(page, start, size, number, spill)?;
        Ok((None, rowid as i64))
    }

    /// The payload of `size` bytes at `start` of a leaf page that goes on in overflow pages,
    /// gathered into `spill`.
    #[inline(never)]
    fn overflowing(
        &self,
        page: &[u8],
        start: usize,
        size: u64,
        number: u32,
        spill: &mut Vec<u8>,
    ) -> Result<(), Damaged> {
        let bad = || Damaged(format!("a cell of page {number} does not parse"));
        let u = self.usable as u64;
        let max_local = u - 35;
        if size > (1 << 30) {
            return Err(bad());
        }
        let min_local = ((u - 12) * 32 / 255) - 23;
        let k = min_local + (size - min_local) % (u - 4);
        let local = if k <= max_local { k } else { min_local } as usize;
        spill.clear();
        spill.extend_from_slice(page.get(start..start + local).ok_or_else(bad)?);
        let mut next = be32(page.get(start + local..start + local + 4).ok_or_else(bad)?);
        let mut overflow = vec![0u8; self.page_size];
        let mut hops = 0u32;
        while spill.len() < size as usize {
            hops += 1;
            if hops > self.pages {
                return Err(bad());
            }
            self.read_page(next, &mut overflow)?;
            let take = (size as usize - spill.len()).min(self.usable - 4);
            spill.extend_from_slice(&overflow[4..4 + take]);
            next = be32(&overflow);
        }
        Ok(())
    }
}

/// Where a scan's fields come from, worked out once for all its rows.
struct Layout {
    /// Record positions wanted, ascending, and where each goes in the output.
    wanted: Vec<(usize, usize)>,
    /// Outputs of a position asked for twice, copied from its first: (from, to).
    copies: Vec<(usize, usize)>,
    /// Outputs of the rowid.
    rowids: Vec<usize>,
    /// Outputs of REAL columns, where an integer stored is read as a real.
    reals: Vec<usize>,
}

/// A value of a row as decoded: numbers in place, text and blobs as where they lie in the
/// record.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Null,
    Int(i64),
    Real(f64),
    Text(u32, u32),
    Blob(u32, u32),
}

/// One row of a scan.
pub struct Row<'a> {
    slots: &'a [Slot],
    payload: &'a [u8],
}

impl<'a> Row<'a> {
    /// The `i`-th field asked for when it is an integer (`Some(Some(v))`) or NULL
    /// (`Some(None)`); `None` for any other type.
    #[inline]
    pub fn integer(&self, i: usize) -> Option<Option<i64>> {
        match self.slots[i] {
            Slot::Int(v) => Some(Some(v)),
            Slot::Null => Some(None),
            _ => None,
        }
    }

    /// The value of the `i`-th field asked for.
    #[inline]
    pub fn get(&self, i: usize) -> ValueRef<'a> {
        match self.slots[i] {
            Slot::Null => ValueRef::Null,
            Slot::Int(v) => ValueRef::Integer(v),
            Slot::Real(v) => ValueRef::Real(v),
            Slot::Text(a, n) => ValueRef::Text(&self.payload[a as usize..(a + n) as usize]),
            Slot::Blob(a, n) => ValueRef::Blob(&self.payload[a as usize..(a + n) as usize]),
        }
    }
}

/// Decode the values at the record positions `wanted` (ascending and distinct, with their
/// output slots) of the record `payload` into `slots`; positions past the record's end are NULL.
/// The values between those wanted are stepped over by their serial types alone.
#[inline]
fn decode(
    payload: &[u8],
    wanted: &[(usize, usize)],
    slots: &mut [Slot],
) -> Result<(), &'static str> {
    const BAD_HEADER: &str = "its record header does not parse";
    let (header_len, mut at) = varint(payload).ok_or(BAD_HEADER)?;
    let header_len = header_len as usize;
    if header_len > payload.len() || header_len < at {
        return Err("its record header is longer than the record");
    }
    let header = &payload[..header_len];
    if let Some(&(last, _)) = wanted.last() {
        if let Some(types) = header.get(at..at + last + 1) {
            if let Some(done) = decode_short(payload, header_len, types, wanted, slots) {
                return done;
            }
        }
    }
    let mut body = header_len;
    let mut pos = 0;
    for (i, &(want, out)) in wanted.iter().enumerate() {
        let t = loop {
            // Serial types below 128, nearly all of them, are one byte.
            let t = match header.get(at) {
                Some(&b) if b < 0x80 => {
                    at += 1;
                    b as u64
                }
                Some(_) => {
                    let (t, n) = varint(&header[at..]).ok_or(BAD_HEADER)?;
                    at += n;
                    t
                }
                None => {
                    // The record ends before: this value and the rest are NULL.
                    for &(_, out) in &wanted[i..] {
                        slots[out] = Slot::Null;
                    }
                    return Ok(());
                }
            };
            pos += 1;
            if pos > want {
                break t;
            }
            body += serial_len(t)?;
        };
        let len = serial_len(t)?;
        slots[out] = value(payload, body, t, len).ok_or("its values run past the record")?;
        body += len;
    }
    Ok(())
}

/// [`decode`] where the serial types up to the last one wanted, `types` (the values start at
/// `body`), are one byte each and none is reserved, as in nearly every row: every value's place
/// is worked out first, in a loop that runs the same on every row, then the values wanted are
/// read. `None`, having written nothing, where that does not hold: the caller takes the long way.
#[inline(always)]
fn decode_short(
    payload: &[u8],
    body: usize,
    types: &[u8],
    wanted: &[(usize, usize)],
    slots: &mut [Slot],
) -> Option<Result<(), &'static str>> {
    const MOST: usize = 32;
    if types.len() > MOST {
        return None;
    }
    let mut places = [0u32; MOST];
    // Below 2^31: a payload is at most 2^30 bytes, a type of one byte 57 at most.
    let mut at = body as u32;
    // Any type of two bytes or more sets the high bit; a reserved one has no length.
    let (mut high, mut longest) = (0u8, 0u8);
    for (place, &t) in places.iter_mut().zip(types) {
        *place = at;
        high |= t;
        let len = SERIAL_LEN[(t & 0x7f) as usize];
        longest = longest.max(len);
        at += len as u32;
    }
    if high >= 0x80 || longest == u8::MAX {
        return None;
    }
    for &(pos, out) in wanted {
        let t = types[pos];
        match value(
            payload,
            places[pos] as usize,
            t.into(),
            SERIAL_LEN[t as usize].into(),
        ) {
            Some(v) => slots[out] = v,
            None => return Some(Err("its values run past the record")),
        }
    }
    Some(Ok(()))
}

/// Bytes of a value of serial type `t`.
#[inline(always)]
fn serial_len(t: u64) -> Result<usize, &'static str> {
    match t {
        0..=127 => match SERIAL_LEN[t as usize] {
            u8::MAX => Err("its record holds a reserved type"),
            n => Ok(n as usize),
        },
        t => Ok(((t - 12) / 2).min(1 << 31) as usize),
    }
}

/// The value of serial type `t` and `len` bytes at `at` of `payload`; `None` when it runs past
/// the end.
#[inline(always)]
fn value(payload: &[u8], at: usize, t: u64, len: usize) -> Option<Slot> {
    if at + len > payload.len() {
        return None;
    }
    Some(match t {
        0 => Slot::Null,
        1..=6 | 8 | 9 => Slot::Int(int_at(payload, at, t, len)),
        7 => Slot::Real(f64::from_bits(int_at(payload, at, t, len) as u64)),
        t if t % 2 == 0 => Slot::Blob(at as u32, len as u32),
        _ => Slot::Text(at as u32, len as u32),
    })
}

/// The integer of serial type `t` (1 to 9) at `at` of `payload`, its `len` bytes (0 to 8)
/// there: big-endian two's complement, read as the top of a word and shifted down with its
/// sign; types 8 and 9, of no bytes, are 0 and 1. The same steps for every type, so that rows
/// whose columns change type cost no more.
#[inline(always)]
fn int_at(payload: &[u8], at: usize, t: u64, len: usize) -> i64 {
    let word = match payload[at..].first_chunk::<8>() {
        Some(word) => i64::from_be_bytes(*word),
        None => {
            let mut word = [0u8; 8];
            word[..len].copy_from_slice(&payload[at..at + len]);
            i64::from_be_bytes(word)
        }
    };
    let v = word.checked_shr(64 - 8 * len as u32).unwrap_or(0);
    v | (t == 9) as i64
}

/// Bytes of a value of each serial type below 128 (`u8::MAX`: reserved).
const SERIAL_LEN: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = match i {
            0 | 8 | 9 => 0,
            1 => 1,
            2 => 2,
            3 => 3,
            4 => 4,
            5 => 6,
            6 | 7 => 8,
            10 | 11 => u8::MAX,
            n => ((n - 12) / 2) as u8,
        };
        i += 1;
    }
    t
};

/// An SQLite varint (1 to 9 bytes, big-endian, 7 bits a byte, the ninth byte whole) and its
/// length.
#[inline(always)]
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    match bytes.first() {
        Some(&b) if b < 0x80 => Some((b as u64, 1)),
        None => None,
        _ => varint_long(bytes),
    }
}

/// [`varint`] of two bytes or more.
#[inline]
fn varint_long(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for i in 0..9 {
        let b = *bytes.get(i)?;
        if i == 8 {
            return Some(((v << 8) | b as u64, 9));
        }
        v = (v << 7) | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The root page of the rowid table `name`, when it is an ordinary table without indexes (an
/// index could make SQLite's own scan return rows in another order).
fn root_page(conn: &Connection, name: &str) -> Option<u32> {
    let mut stmt = conn
        .prepare("SELECT type, rootpage, sql FROM sqlite_master WHERE tbl_name = ?1")
        .ok()?;
    let rows: Vec<(String, Option<i64>, Option<String>)> = stmt
        .query_map([name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .ok()?
        .collect::<rusqlite::Result<_>>()
        .ok()?;
    let mut root = None;
    for (kind, page, sql) in rows {
        match kind.as_str() {
            "table" => {
                let sql = sql.unwrap_or_default().to_ascii_uppercase();
                if sql.contains("WITHOUT ROWID") || sql.contains("VIRTUAL") {
                    return None;
                }
                root = page
                    .filter(|&p| p > 0 && p <= u32::MAX as i64)
                    .map(|p| p as u32);
            }
            _ => return None,
        }
    }
    root
}

/// Where each of `columns` of table `name` is stored, or `None` when SQL must read it.
fn fields(conn: &Connection, name: &str, columns: &[&str]) -> Option<Vec<Field>> {
    let quoted = name.replace('"', "\"\"");
    let mut stmt = conn
        .prepare(&format!("PRAGMA table_xinfo(\"{quoted}\")"))
        .ok()?;
    // (name, declared type, default, primary key position, hidden)
    type Info = (String, String, Option<String>, i64, i64);
    let info: Vec<Info> = stmt
        .query_map([], |r| {
            Ok((
                r.get(1)?,
                r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .ok()?
        .collect::<rusqlite::Result<_>>()
        .ok()?;
    if info.is_empty() || info.iter().any(|c| c.4 != 0) {
        return None;
    }
    let keys = info.iter().filter(|c| c.3 > 0).count();
    columns
        .iter()
        .map(|&want| {
            if want == "NULL" {
                return Some(Field::Null);
            }
            // Names are matched as SQLite matches them: without regard to ASCII case. A column
            // the table lacks is SQL's to report, but for `rowid`.
            match info.iter().position(|c| c.0.eq_ignore_ascii_case(want)) {
                Some(i) => field(&info[i], i, keys),
                None if want.eq_ignore_ascii_case("rowid") => Some(Field::Rowid),
                None => None,
            }
        })
        .collect()
}

fn field(
    c: &(String, String, Option<String>, i64, i64),
    position: usize,
    keys: usize,
) -> Option<Field> {
    if c.2.is_some() {
        return None;
    }
    if c.3 == 1 && keys == 1 && c.1.eq_ignore_ascii_case("INTEGER") {
        return Some(Field::Rowid);
    }
    // SQLite's rules of affinity, in their order: INT, then text, then BLOB or none, then REAL.
    let t = c.1.to_ascii_uppercase();
    let real = !t.contains("INT")
        && !["CHAR", "CLOB", "TEXT", "BLOB"]
            .iter()
            .any(|k| t.contains(k))
        && !t.is_empty()
        && ["REAL", "FLOA", "DOUB"].iter().any(|k| t.contains(k));
    Some(if real {
        Field::Real(position)
    } else {
        Field::Record(position)
    })
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset)
}

#[cfg(windows)]
fn read_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_integers() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x81, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0xff; 9]), Some((u64::MAX, 9)));
        assert_eq!(varint(&[0x81]), None);
        assert_eq!(int_at(&[0xff], 0, 1, 1), -1);
        assert_eq!(int_at(&[0x00, 0x80], 0, 2, 2), 128);
        assert_eq!(int_at(&[0xff, 0xff, 0xfe], 0, 3, 3), -2);
        let max = [0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(int_at(&max, 0, 6, 8), i64::MAX);
        // Bytes after the value are not its own.
        let then = [9, 0x01, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(int_at(&then, 1, 2, 2), 258);
        assert_eq!(int_at(&then, 3, 5, 6), -1);
        assert_eq!(int_at(&then, 10, 8, 0), 0);
        assert_eq!(int_at(&then, 10, 9, 0), 1);
    }

    /// Every row of a table of every kind of value, small and overflowing, read from the pages
    /// equals what SQLite reads.
    #[test]
    fn pages_read_as_sqlite_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sqlite");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b REAL, c TEXT, d BLOB);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
             INSERT INTO t (a, b, c, d) SELECT
               CASE i % 7 WHEN 0 THEN NULL WHEN 1 THEN i * 1000003 WHEN 2 THEN -i
                 WHEN 3 THEN 9223372036854775807 - i WHEN 4 THEN 0 WHEN 5 THEN 1 ELSE i * 65536 END,
               i * 0.25, 'text ' || i, CASE WHEN i % 500 = 0 THEN zeroblob(9000 + i) ELSE x'0102' END
             FROM n;
             ALTER TABLE t ADD COLUMN e INTEGER;
             INSERT INTO t (a, e) VALUES (5, 6);",
        )
        .unwrap();
        drop(conn);
        let conn = Connection::open(&path).unwrap();
        let cols = ["e", "c", "id", "a", "d", "b", "NULL"];
        let mut expected = Vec::new();
        let mut stmt = conn
            .prepare("SELECT e, c, id, a, d, b, NULL FROM t")
            .unwrap();
        let mut rows = stmt.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            expected.push(
                (0..cols.len())
                    .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                    .collect::<Vec<_>>(),
            );
        }
        let file = PageFile::open(&path).unwrap().unwrap();
        let (table, fields) = file.table(&conn, "t", &cols).unwrap().unwrap();
        assert!(table.leaves.len() > 10);
        let mut got = Vec::new();
        file.scan::<Damaged>(&table.leaves, &fields, |row| {
            got.push(
                (0..cols.len())
                    .map(|i| format!("{:?}", row.get(i)))
                    .collect::<Vec<_>>(),
            );
            Ok(())
        })
        .unwrap();
        assert_eq!(got.len(), 3001);
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                g == e,
                "row {i}: {:.200} != {:.200}",
                g.join(" "),
                e.join(" ")
            );
        }
    }

    #[test]
    fn declined_and_damaged_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sqlite");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE d (a INTEGER DEFAULT 4, b INTEGER);
             CREATE TABLE w (a INTEGER PRIMARY KEY, b) WITHOUT ROWID;
             CREATE TABLE i (a INTEGER, b INTEGER); CREATE INDEX ia ON i (a);
             CREATE TABLE ok (a INTEGER);
             INSERT INTO ok VALUES (1), (2);",
        )
        .unwrap();
        let file = PageFile::open(&path).unwrap().unwrap();
        assert!(file.table(&conn, "d", &["a"]).unwrap().is_none());
        assert!(file.table(&conn, "d", &["b"]).unwrap().is_some());
        assert!(file.table(&conn, "w", &["b"]).unwrap().is_none());
        assert!(file.table(&conn, "i", &["b"]).unwrap().is_none());
        assert!(file.table(&conn, "nope", &["b"]).unwrap().is_none());
        assert!(file.table(&conn, "ok", &["b"]).unwrap().is_none());
        let (t, f) = file.table(&conn, "ok", &["a"]).unwrap().unwrap();
        drop(conn);
        // The table's page zeroed: damage, not a panic.
        let mut bytes = std::fs::read(&path).unwrap();
        let page = t.leaves[0] as usize;
        bytes[(page - 1) * 4096..page * 4096].fill(0);
        std::fs::write(&path, &bytes).unwrap();
        let file = PageFile::open(&path).unwrap().unwrap();
        let r = file.scan::<Damaged>(&t.leaves, &f, |_| Ok(()));
        assert!(r.is_err());
        // Cut short.
        std::fs::write(&path, &bytes[..bytes.len() - 4096]).unwrap();
        assert!(
            PageFile::open(&path).is_err() || {
                let file = PageFile::open(&path).unwrap().unwrap();
                file.scan::<Damaged>(&t.leaves, &f, |_| Ok(())).is_err()
            }
        );
    }
}
