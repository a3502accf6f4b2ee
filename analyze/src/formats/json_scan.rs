//! A JSON scanner for texts read a window at a time: the tokens of RFC 8259 checked byte by byte
//! over a slice that may end in the middle of a value, without building a tree.
//!
//! A [`Cursor`] walks a window of the text. When the window ends before the value it is reading
//! does, it stops with [`Stop::More`]: the caller keeps the bytes from the start of that value,
//! reads more after them ([`Window`], the next block read beside the scan by an [`Ahead`]) and
//! scans the value again from its start, so a value is only ever seen whole. Every value is
//! checked, skipped ones too: strings (escapes, control characters, UTF-8), numbers (the grammar,
//! not the range) and literals. Nesting is walked, not recursed into: a bit per level (whether it
//! is an array or an object), so a value nested a million levels deep costs no stack and 125 KB.
//! What the values mean is the caller's business: strings come back as their raw bytes with a
//! flag for escapes ([`Str`]), numbers and skipped values as their text.

use std::borrow::Cow;

use crate::error::Result;

/// Why a scan stopped before the end of what it was reading.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    /// The window ends inside the value; more of the text is needed.
    More,
    /// The text is not JSON (or not what the caller expects) at byte `at` of the window.
    Bad { at: usize, what: &'static str },
}

/// What a scan returns.
pub type Scan<T> = std::result::Result<T, Stop>;

/// A string as written between its quotes: valid UTF-8, its escapes well formed.
#[derive(Clone, Copy, Debug)]
pub struct Str<'a> {
    raw: &'a [u8],
    escaped: bool,
}

impl<'a> Str<'a> {
    /// The bytes between the quotes.
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// The text, when it has no escapes to decode.
    #[inline]
    pub fn plain(&self) -> Option<&'a str> {
        // SAFETY: a `Str` is only made by `Cursor::string`, which checked the bytes as UTF-8.
        (!self.escaped).then(|| unsafe { std::str::from_utf8_unchecked(self.raw) })
    }

    /// Whether it has escapes to decode.
    pub fn escaped(&self) -> bool {
        self.escaped
    }

    /// The text with its escapes decoded; `None` for a `\u` escape of half a surrogate pair,
    /// which no string holds.
    pub fn decode(&self) -> Option<Cow<'a, str>> {
        if let Some(s) = self.plain() {
            return Some(Cow::Borrowed(s));
        }
        let mut out = String::with_capacity(self.raw.len());
        let text = std::str::from_utf8(self.raw).ok()?;
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            let decoded = match chars.next()? {
                '"' => '"',
                '\\' => '\\',
                '/' => '/',
                'b' => '\u{8}',
                'f' => '\u{c}',
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                'u' => {
                    let unit = hex4(&mut chars)?;
                    match unit {
                        0xD800..=0xDBFF => {
                            let (Some('\\'), Some('u')) = (chars.next(), chars.next()) else {
                                return None;
                            };
                            let low = hex4(&mut chars)?;
                            if !(0xDC00..=0xDFFF).contains(&low) {
                                return None;
                            }
                            let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                            char::from_u32(code)?
                        }
                        0xDC00..=0xDFFF => return None,
                        _ => char::from_u32(unit)?,
                    }
                }
                _ => return None,
            };
            out.push(decoded);
        }
        Some(Cow::Owned(out))
    }
}

fn hex4(chars: &mut std::str::Chars<'_>) -> Option<u32> {
    let mut n = 0;
    for _ in 0..4 {
        n = n * 16 + chars.next()?.to_digit(16)?;
    }
    Some(n)
}

/// The bytes of a word (8 bytes, little-endian) that may end the plain run of a string: a quote,
/// a backslash, a control character, and (with `high_too`) a byte of a multi-byte character. The
/// lowest marked byte is exact; bytes above a marked one may be marked wrongly.
#[inline]
fn specials(word: u64, high_too: bool) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_in = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let quote = zero_in(word ^ (ONES * u64::from(b'"')));
    let backslash = zero_in(word ^ (ONES * u64::from(b'\\')));
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    let high = if high_too { word & HIGH } else { 0 };
    quote | backslash | control | high
}

/// The length of the run of ASCII digits at `bytes[from..]`, eight bytes at a time.
#[inline]
fn digits(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        // A digit (0x30..=0x39) sets no high bit in either sum; any other byte sets one in its
        // own byte (the lowest such byte is exact: digits below it carry and borrow nothing).
        let others = (word.wrapping_add(0x4646_4646_4646_4646)
            | word.wrapping_sub(0x3030_3030_3030_3030))
            & 0x8080_8080_8080_8080;
        if others != 0 {
            return i - from + others.trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    i - from
        + bytes[i.min(bytes.len())..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
}

/// A position in a window of JSON text.
pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Whether the window ends where the text does.
    eof: bool,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8], eof: bool) -> Cursor<'a> {
        Cursor { bytes, pos: 0, eof }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn set_pos(&mut self, pos: usize) {
        self.pos = pos;
    }

    /// Whether the window ends where the text does.
    pub fn ends_text(&self) -> bool {
        self.eof
    }

    /// The bytes from here to the end of the window.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.pos.min(self.bytes.len())..]
    }

    /// A stop for what is wrong here.
    pub fn bad<T>(&self, what: &'static str) -> Scan<T> {
        Err(Stop::Bad { at: self.pos, what })
    }

    /// The end of the window: more text, or the end of the text where none is expected.
    fn end<T>(&self) -> Scan<T> {
        if self.eof {
            self.bad("the text ends early")
        } else {
            Err(Stop::More)
        }
    }

    /// Skip whitespace (JSON's four characters).
    #[inline]
    pub fn ws(&mut self) {
        while let Some(&b) = self.bytes.get(self.pos) {
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                break;
            }
            self.pos += 1;
        }
    }

    /// Whether only whitespace is left, to the end of the text.
    pub fn at_end(&mut self) -> Scan<bool> {
        self.ws();
        if self.pos < self.bytes.len() {
            Ok(false)
        } else if self.eof {
            Ok(true)
        } else {
            Err(Stop::More)
        }
    }

    /// The next byte, not consumed.
    #[inline]
    pub fn peek(&self) -> Scan<u8> {
        match self.bytes.get(self.pos) {
            Some(&b) => Ok(b),
            None => self.end(),
        }
    }

    /// Consume `b` if it comes next.
    #[inline]
    pub fn eat(&mut self, b: u8) -> Scan<bool> {
        let found = self.peek()? == b;
        self.pos += usize::from(found);
        Ok(found)
    }

    /// Consume `b`, which must come next.
    #[inline]
    pub fn expect(&mut self, b: u8, what: &'static str) -> Scan<()> {
        if self.eat(b)? {
            Ok(())
        } else {
            self.bad(what)
        }
    }

    /// After a member or element: whitespace, then `,` (true: another follows) or `close`.
    #[inline]
    pub fn next_or_close(&mut self, close: u8) -> Scan<bool> {
        self.ws();
        match self.peek()? {
            b',' => {
                self.pos += 1;
                self.ws();
                Ok(true)
            }
            b if b == close => {
                self.pos += 1;
                Ok(false)
            }
            _ if close == b'}' => self.bad("expected `,` or `}` after a member"),
            _ => self.bad("expected `,` or `]` after an element"),
        }
    }

    /// Whether another member or element follows, inside an object or array that `close` ends:
    /// the first unless `close` comes at once, a later one as [`Cursor::next_or_close`] says.
    #[inline]
    pub fn more(&mut self, first: bool, close: u8) -> Scan<bool> {
        if first {
            self.ws();
            Ok(!self.eat(close)?)
        } else {
            self.next_or_close(close)
        }
    }

    /// A key and its colon, with the whitespace after it.
    #[inline]
    pub fn key(&mut self) -> Scan<Str<'a>> {
        if self.peek()? != b'"' {
            return self.bad("expected a key (a string)");
        }
        let key = self.string()?;
        self.ws();
        self.expect(b':', "expected `:` after a key")?;
        self.ws();
        Ok(key)
    }

    /// A string, from its opening quote.
    pub fn string(&mut self) -> Scan<Str<'a>> {
        debug_assert_eq!(self.bytes.get(self.pos), Some(&b'"'));
        let start = self.pos + 1;
        let mut i = start;
        let (mut escaped, mut wide) = (false, false);
        let bytes = self.bytes;
        loop {
            // To the next byte that is not plain text, eight at a time; once a multi-byte
            // character is met, the whole string is checked as UTF-8 at its end instead.
            while let Some(chunk) = bytes.get(i..i + 8) {
                let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
                let marks = specials(word, !wide);
                if marks != 0 {
                    i += marks.trailing_zeros() as usize / 8;
                    break;
                }
                i += 8;
            }
            let Some(&b) = bytes.get(i) else {
                self.pos = i;
                return self.end();
            };
            match b {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    let Some(&e) = bytes.get(i + 1) else {
                        self.pos = i;
                        return self.end();
                    };
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                        b'u' => {
                            let Some(hex) = bytes.get(i + 2..i + 6) else {
                                self.pos = i;
                                return self.end();
                            };
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                self.pos = i;
                                return self.bad("a `\\u` escape without four hex digits");
                            }
                            i += 6;
                        }
                        _ => {
                            self.pos = i;
                            return self.bad("an unknown escape in a string");
                        }
                    }
                }
                0..=0x1f => {
                    self.pos = i;
                    return self.bad("a control character in a string");
                }
                0x80.. => {
                    wide = true;
                    i += 1;
                }
                _ => i += 1,
            }
        }
        let raw = &bytes[start..i];
        if wide && std::str::from_utf8(raw).is_err() {
            self.pos = start;
            return self.bad("a string that is not UTF-8");
        }
        self.pos = i + 1;
        Ok(Str { raw, escaped })
    }

    /// A number's text, checked against the grammar.
    pub fn number(&mut self) -> Scan<&'a [u8]> {
        let start = self.pos;
        let bytes = self.bytes;
        let mut i = start + usize::from(bytes.get(start) == Some(&b'-'));
        let int_digits = digits(bytes, i);
        let mut ok = int_digits > 0 && !(int_digits > 1 && bytes[i] == b'0');
        i += int_digits;
        if ok && bytes.get(i) == Some(&b'.') {
            let n = digits(bytes, i + 1);
            ok = n > 0;
            i += 1 + n;
        }
        if ok && matches!(bytes.get(i), Some(b'e' | b'E')) {
            i += 1 + usize::from(matches!(bytes.get(i + 1), Some(b'+' | b'-')));
            let n = digits(bytes, i);
            ok = n > 0;
            i += n;
        }
        if i >= bytes.len() && !self.eof {
            // The number may go on in the next window.
            return Err(Stop::More);
        }
        self.pos = i;
        if !ok {
            return self.bad("a malformed number");
        }
        Ok(&bytes[start..i])
    }

    /// `true`, `false` or `null`.
    fn literal(&mut self) -> Scan<()> {
        let rest = &self.bytes[self.pos..];
        for word in [&b"true"[..], b"false", b"null"] {
            if rest.starts_with(word) {
                self.pos += word.len();
                return Ok(());
            }
            if rest.len() < word.len() && word.starts_with(rest) {
                return self.end();
            }
        }
        self.bad("expected a value")
    }

    /// Skip one value (of any kind, nested to any depth) and return its text.
    pub fn value(&mut self) -> Scan<&'a [u8]> {
        let start = self.pos;
        // Scalars, the common case, directly.
        match self.peek()? {
            b'"' => {
                self.string()?;
                return Ok(&self.bytes[start..self.pos]);
            }
            b'-' | b'0'..=b'9' => return self.number(),
            _ => {}
        }
        let mut levels = Levels::default();
        loop {
            self.ws();
            match self.peek()? {
                open @ (b'{' | b'[') => {
                    self.pos += 1;
                    self.ws();
                    let object = open == b'{';
                    if !self.eat(if object { b'}' } else { b']' })? {
                        levels.push(object);
                        if object {
                            self.key()?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.string()?;
                }
                b'-' | b'0'..=b'9' => {
                    self.number()?;
                }
                _ => self.literal()?,
            }
            // After a value: close what it ends, or go on to the next one.
            loop {
                let Some(object) = levels.top() else {
                    return Ok(&self.bytes[start..self.pos]);
                };
                if self.next_or_close(if object { b'}' } else { b']' })? {
                    if object {
                        self.key()?;
                    }
                    break;
                }
                levels.pop();
            }
        }
    }
}

/// The open arrays and objects around a point of a value: one bit each (set for an object), the
/// first 128 in place.
#[derive(Default)]
struct Levels {
    len: usize,
    near: u128,
    deeper: Vec<u64>,
}

impl Levels {
    fn push(&mut self, object: bool) {
        let i = self.len;
        if i < 128 {
            self.near = (self.near & !(1 << i)) | (u128::from(object) << i);
        } else {
            let (word, bit) = ((i - 128) / 64, (i - 128) % 64);
            if word == self.deeper.len() {
                self.deeper.push(0);
            }
            let w = &mut self.deeper[word];
            *w = (*w & !(1 << bit)) | (u64::from(object) << bit);
        }
        self.len += 1;
    }

    fn pop(&mut self) {
        self.len -= 1;
    }

    /// Whether the innermost level is an object; `None` outside every level.
    fn top(&self) -> Option<bool> {
        let i = self.len.checked_sub(1)?;
        Some(if i < 128 {
            self.near & (1 << i) != 0
        } else {
            let (word, bit) = ((i - 128) / 64, (i - 128) % 64);
            self.deeper[word] & (1 << bit) != 0
        })
    }
}

/// What a window is read from: a file, a gzip stream, or bytes already in memory.
pub trait Feed {
    /// Read into `buf`: the count, 0 at the end.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize>;
}

impl Feed for &[u8] {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = buf.len().min(self.len());
        buf[..n].copy_from_slice(&self[..n]);
        *self = &self[n..];
        Ok(n)
    }
}

/// The next block of a text, read from its feed while the window before it is scanned, into a
/// buffer with room in front for the end of that window that was not consumed.
pub struct Ahead {
    buf: Vec<u8>,
    gap: usize,
    /// The bytes read (at `gap..gap + len`), once read; and whether the text ends there.
    read: Option<(usize, bool)>,
}

impl Ahead {
    /// Blocks of `size` bytes, with `gap` bytes before each for the end of the last.
    pub fn new(size: usize, gap: usize) -> Ahead {
        Ahead {
            buf: vec![0; gap + size],
            gap,
            read: None,
        }
    }

    /// Read the next block, unless it is read already: as full as the feed gives it, so that a
    /// value is not scanned again too soon.
    pub fn read<F: Feed>(&mut self, feed: &mut F) -> Result<()> {
        if self.read.is_some_and(|(len, _)| len > 0) {
            return Ok(());
        }
        let mut len = 0;
        let mut eof = false;
        while self.gap + len < self.buf.len() {
            let n = feed.read(&mut self.buf[self.gap + len..])?;
            if n == 0 {
                eof = true;
                break;
            }
            len += n;
        }
        self.read = Some((len, eof));
        Ok(())
    }
}

/// The part of a text in memory: from the first byte not yet consumed (the start of the value
/// being read) to as far as has been read, taking one block at a time from an [`Ahead`], and
/// holding a value longer than a block whole, up to a limit.
pub struct Window {
    buf: Vec<u8>,
    /// The first byte not yet consumed, and the end of what was read.
    start: usize,
    end: usize,
    eof: bool,
    /// Offset in the text of `buf[start]`.
    offset: u64,
    /// The longest single value the window holds.
    max: usize,
}

impl Window {
    /// An empty window, holding a value of up to `max` bytes.
    pub fn new(max: usize) -> Window {
        Window {
            buf: Vec::new(),
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
            max,
        }
    }

    /// The bytes read and not yet consumed, and whether the text ends with them.
    pub fn bytes(&self) -> (&[u8], bool) {
        (&self.buf[self.start..self.end], self.eof)
    }

    /// Mark `n` bytes of [`Window::bytes`] as consumed.
    pub fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }

    /// The offset in the text of the first unconsumed byte plus `at`.
    pub fn offset(&self, at: usize) -> u64 {
        self.offset + at as u64
    }

    /// Append the block `ahead` read (reading it first if it has not) after the bytes not
    /// consumed: `Ok(false)` when these are a value already as long as the window may hold.
    /// The block's buffer becomes the window's where they fit in its gap, so the text is
    /// copied only once, from the feed.
    pub fn take<F: Feed>(&mut self, ahead: &mut Ahead, feed: &mut F) -> Result<bool> {
        if self.eof {
            return Ok(true);
        }
        let kept = self.end - self.start;
        if kept >= self.max {
            return Ok(false);
        }
        ahead.read(feed)?;
        let Some((len, eof)) = ahead.read.take() else {
            return Ok(true);
        };
        if kept <= ahead.gap {
            let at = ahead.gap - kept;
            ahead.buf[at..ahead.gap].copy_from_slice(&self.buf[self.start..self.end]);
            std::mem::swap(&mut self.buf, &mut ahead.buf);
            self.start = at;
            self.end = ahead.gap + len;
            // The window's last buffer is the next block's, if it is as large.
            if ahead.buf.len() != self.buf.len() {
                ahead.buf = vec![0; self.buf.len()];
            }
        } else {
            self.buf.copy_within(self.start..self.end, 0);
            self.buf.truncate(kept);
            self.buf
                .extend_from_slice(&ahead.buf[ahead.gap..ahead.gap + len]);
            self.start = 0;
            self.end = self.buf.len();
        }
        self.eof = eof;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skip(text: &str) -> Scan<&[u8]> {
        Cursor::new(text.as_bytes(), true).value()
    }

    #[test]
    fn values_are_skipped_whole_and_checked() {
        for ok in [
            "1",
            "-0.5e+3",
            "\"a\\u00e9\\n\"",
            "[1, [2, {\"a\": null}], true]",
            "{}",
            "[]",
            "{\"x\": {\"y\": []}}",
        ] {
            assert_eq!(skip(ok), Ok(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "01",
            "1.",
            "-",
            "[1,]",
            "{\"a\" 1}",
            "{\"a\":1,}",
            "\"\\x\"",
            "tru",
            "[1 2]",
            "\"\t\"",
        ] {
            assert!(matches!(skip(bad), Err(Stop::Bad { .. })), "{bad}");
        }
    }

    #[test]
    fn a_window_that_ends_inside_a_value_asks_for_more() {
        for part in ["[1, 2", "\"abc", "12", "tr", "{\"a\":", "\"\\u00", "[\"x\\"] {
            assert_eq!(
                Cursor::new(part.as_bytes(), false).value(),
                Err(Stop::More),
                "{part}"
            );
        }
    }

    #[test]
    fn deep_nesting_is_walked_without_recursion() {
        let deep = format!("{}1{}", "[{\"a\":".repeat(300_000), "}]".repeat(300_000));
        assert!(skip(&deep).is_ok_and(|text| text.len() == deep.len()));
        let unclosed = format!("{}{}]", "[".repeat(1_000_000), "]".repeat(999_998));
        assert!(matches!(skip(&unclosed), Err(Stop::Bad { .. })));
        let crossed = format!("{}{}", "[".repeat(500), "}".repeat(500));
        assert!(matches!(skip(&crossed), Err(Stop::Bad { .. })));
    }

    #[test]
    fn digit_runs_are_measured_eight_bytes_at_a_time() {
        for text in [
            "",
            "1",
            "12345678",
            "123456789x",
            "0123456789012345678:",
            "12/3",
            "9é1",
        ] {
            let expected = text.bytes().take_while(u8::is_ascii_digit).count();
            assert_eq!(digits(text.as_bytes(), 0), expected, "{text}");
        }
        for b in 0..=255u8 {
            let mut text = *b"12345670";
            text[3] = b;
            let expected = if b.is_ascii_digit() { 8 } else { 3 };
            assert_eq!(digits(&text, 0), expected, "{b}");
        }
    }

    #[test]
    fn strings_decode_their_escapes() {
        let mut c = Cursor::new(br#""a\"b\u00e9\ud83d\ude00" "\ud800""#, true);
        let s = c.string().unwrap();
        assert_eq!(s.decode().as_deref(), Some("a\"bé😀"));
        c.ws();
        assert_eq!(c.string().unwrap().decode(), None, "half a surrogate pair");
        let mut c = Cursor::new(b"\"caf\xc3\xa9\" \"\xff\"", true);
        assert_eq!(c.string().unwrap().plain(), Some("café"));
        c.ws();
        assert!(c.string().is_err());
    }

    #[test]
    fn a_window_takes_blocks_and_holds_a_long_value_whole() {
        let text = format!("[\"{}\", 1]", "x".repeat(100));
        let mut feed = text.as_bytes();
        let mut ahead = Ahead::new(16, 4);
        let mut w = Window::new(64);
        assert!(w.take(&mut ahead, &mut feed).unwrap());
        assert_eq!(w.bytes(), (&text.as_bytes()[..16], false));
        w.consume(14);
        assert!(w.take(&mut ahead, &mut feed).unwrap());
        assert_eq!(
            w.bytes().0,
            &text.as_bytes()[14..32],
            "two bytes kept in the gap"
        );
        assert_eq!(w.offset(0), 14);
        for _ in 0..2 {
            assert!(w.take(&mut ahead, &mut feed).unwrap());
        }
        assert_eq!(w.bytes().0, &text.as_bytes()[14..64], "longer than a block");
        assert!(w.take(&mut ahead, &mut feed).unwrap());
        assert!(!w.take(&mut ahead, &mut feed).unwrap(), "past the limit");
        w.consume(60);
        while !w.bytes().1 {
            assert!(w.take(&mut ahead, &mut feed).unwrap());
        }
        assert_eq!(w.bytes().0, &text.as_bytes()[74..]);
        assert_eq!(w.offset(0), 74);
    }
}
