//! One trace event read from its text: the fields the reader uses, borrowed from the window the
//! event lies in, and its `args` read only when the event is one the model keeps.
//!
//! The rules are those of the serde structs this reader used before (and so of any reader built
//! on serde_json): `ph`, `cat` and `name` are strings or `null`, anything else refuses the trace,
//! as does a field given twice; `null` counts as absent; `args` that serde_json would not read
//! into its fields (a field given twice, a number beyond `f64`, half a surrogate pair) count as no
//! `args` at all. The common values (integers, strings without escapes, lists of them) are read
//! from their text; any other goes through serde_json, so that it means what it meant.

use std::borrow::Cow;

use serde_json::Value;

use crate::formats::json_scan::{Cursor, Scan, Str};

/// The fields of an event the reader looks at; `None` where absent or `null`. Values other than
/// the three strings are their JSON text.
#[derive(Default)]
pub struct Event<'a> {
    pub ph: Option<Cow<'a, str>>,
    pub cat: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub pid: Option<&'a [u8]>,
    pub tid: Option<&'a [u8]>,
    pub ts: Option<&'a [u8]>,
    pub dur: Option<&'a [u8]>,
    pub args: Option<&'a [u8]>,
}

/// An event's key, decoded where it has escapes; `None` for one that decodes to no text.
fn key_text<'a>(key: Str<'a>) -> Option<Cow<'a, [u8]>> {
    if !key.escaped() {
        return Some(Cow::Borrowed(key.raw()));
    }
    key.decode()
        .map(|k| Cow::Owned(k.into_owned().into_bytes()))
}

/// The event fields' keys, in the order of the bits that mark them given.
const FIELDS: [&[u8]; 8] = [
    b"ph", b"cat", b"name", b"pid", b"tid", b"ts", b"dur", b"args",
];

/// The field whose key, written without escapes, starts `rest` (from its opening quote), and
/// the length of the key with its quotes: one comparison of the first eight bytes.
#[inline]
fn known_key(rest: &[u8]) -> Option<(usize, usize)> {
    // The keys quoted, in the low bytes of a little-endian word, and their masks.
    const fn quoted(key: &[u8]) -> (u64, u64) {
        let mut word = b'"' as u64;
        let mut i = 0;
        while i < key.len() {
            word |= (key[i] as u64) << (8 * (i + 1));
            i += 1;
        }
        word |= (b'"' as u64) << (8 * (key.len() + 1));
        let mask = u64::MAX >> (64 - 8 * (key.len() + 2));
        (word, mask)
    }
    const QUOTED: [(u64, u64); 8] = [
        quoted(FIELDS[0]),
        quoted(FIELDS[1]),
        quoted(FIELDS[2]),
        quoted(FIELDS[3]),
        quoted(FIELDS[4]),
        quoted(FIELDS[5]),
        quoted(FIELDS[6]),
        quoted(FIELDS[7]),
    ];
    let word = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    let field = QUOTED.iter().position(|&(key, mask)| word & mask == key)?;
    Some((field, FIELDS[field].len() + 2))
}

/// Read one event, from its `{`.
pub fn event<'a>(c: &mut Cursor<'a>) -> Scan<Event<'a>> {
    if c.peek()? != b'{' {
        return c.bad("an event that is not an object");
    }
    c.set_pos(c.pos() + 1);
    c.ws();
    let mut e = Event::default();
    if c.eat(b'}')? {
        return Ok(e);
    }
    // Bit i: field i (in the order of `FIELDS`) was given.
    let mut given = 0u8;
    loop {
        let key_at = c.pos();
        let field = match known_key(c.rest()) {
            Some((field, len)) => {
                c.set_pos(key_at + len);
                c.ws();
                c.expect(b':', "expected `:` after a key")?;
                c.ws();
                Some(field)
            }
            None => {
                let Some(key) = key_text(c.key()?) else {
                    c.set_pos(key_at);
                    return c.bad("a key that is half a surrogate pair");
                };
                FIELDS.iter().position(|&f| f == &key[..])
            }
        };
        let Some(field) = field else {
            c.value()?;
            if c.next_or_close(b'}')? {
                continue;
            }
            return Ok(e);
        };
        if given & (1 << field) != 0 {
            c.set_pos(key_at);
            return c.bad(DUPLICATE[field]);
        }
        given |= 1 << field;
        match field {
            0 => e.ph = text(c, NOT_TEXT[0])?,
            1 => e.cat = text(c, NOT_TEXT[1])?,
            2 => e.name = text(c, NOT_TEXT[2])?,
            _ => {
                let raw = c.value()?;
                let raw = (raw != b"null").then_some(raw);
                match field {
                    3 => e.pid = raw,
                    4 => e.tid = raw,
                    5 => e.ts = raw,
                    6 => e.dur = raw,
                    _ => e.args = raw,
                }
            }
        }
        if !c.next_or_close(b'}')? {
            return Ok(e);
        }
    }
}

const DUPLICATE: [&str; 8] = [
    "an event with `ph` twice",
    "an event with `cat` twice",
    "an event with `name` twice",
    "an event with `pid` twice",
    "an event with `tid` twice",
    "an event with `ts` twice",
    "an event with `dur` twice",
    "an event with `args` twice",
];

const NOT_TEXT: [&str; 3] = [
    "an event whose `ph` is not a string",
    "an event whose `cat` is not a string",
    "an event whose `name` is not a string",
];

/// A string field: a string or `null`.
fn text<'a>(c: &mut Cursor<'a>, not_text: &'static str) -> Scan<Option<Cow<'a, str>>> {
    let at = c.pos();
    if c.peek()? == b'"' {
        let s = c.string()?;
        return match s.decode() {
            Some(s) => Ok(Some(s)),
            None => {
                c.set_pos(at);
                c.bad("a string that is half a surrogate pair")
            }
        };
    }
    if c.value()? == b"null" {
        return Ok(None);
    }
    c.set_pos(at);
    c.bad(not_text)
}

/// The `args` fields the model keeps.
#[derive(Default)]
pub struct Args<'a> {
    pub correlation: Option<Arg<'a>>,
    pub device: Option<Arg<'a>>,
    pub stream: Option<Arg<'a>>,
    pub bytes: Option<Arg<'a>>,
    pub grid: Option<Arg<'a>>,
    pub block: Option<Arg<'a>>,
    pub registers: Option<Arg<'a>>,
    pub shared_memory: Option<Arg<'a>>,
    pub external_id: Option<Arg<'a>>,
    pub name: Option<Arg<'a>>,
    pub input_dims: Option<Arg<'a>>,
    pub input_type: Option<Arg<'a>>,
    pub concrete_inputs: Option<Arg<'a>>,
    pub flops: Option<Arg<'a>>,
}

impl<'a> Args<'a> {
    /// Read `args` from its text (already checked as JSON); no fields where they are not an
    /// object of fields serde_json would read.
    pub fn read(raw: Option<&'a [u8]>) -> Args<'a> {
        raw.and_then(Args::fields).unwrap_or_default()
    }

    fn fields(raw: &'a [u8]) -> Option<Args<'a>> {
        let mut c = Cursor::new(raw, true);
        let mut args = Args::default();
        if !c.eat(b'{').ok()? {
            return None;
        }
        c.ws();
        if c.eat(b'}').ok()? {
            return Some(args);
        }
        let mut given = 0u16;
        loop {
            let key = key_text(c.key().ok()?)?;
            let (bit, slot) = match &key[..] {
                b"correlation" => (0, &mut args.correlation),
                b"device" => (1, &mut args.device),
                b"stream" => (2, &mut args.stream),
                b"bytes" => (3, &mut args.bytes),
                b"grid" => (4, &mut args.grid),
                b"block" => (5, &mut args.block),
                b"registers per thread" => (6, &mut args.registers),
                b"shared memory" => (7, &mut args.shared_memory),
                b"External id" => (8, &mut args.external_id),
                b"name" => (9, &mut args.name),
                b"Input Dims" => (10, &mut args.input_dims),
                b"Input type" => (11, &mut args.input_type),
                b"Concrete Inputs" => (12, &mut args.concrete_inputs),
                b"flops" => (13, &mut args.flops),
                _ => {
                    c.value().ok()?;
                    if c.next_or_close(b'}').ok()? {
                        continue;
                    }
                    return Some(args);
                }
            };
            if given & (1 << bit) != 0 {
                return None;
            }
            given |= 1 << bit;
            let raw = c.value().ok()?;
            if raw != b"null" {
                *slot = Some(Arg::new(raw)?);
            }
            if !c.next_or_close(b'}').ok()? {
                return Some(args);
            }
        }
    }
}

/// A value of `args`: its text where that is read directly, else the value serde_json reads.
pub enum Arg<'a> {
    Text(&'a [u8]),
    Json(Value),
}

impl<'a> Arg<'a> {
    /// `None` where serde_json would not read the value as a field of `args`.
    fn new(raw: &'a [u8]) -> Option<Arg<'a>> {
        if read_directly(raw) {
            return Some(Arg::Text(raw));
        }
        // Inside a list, as inside `args`: one level down, for serde_json's nesting limit.
        let listed = [&b"["[..], raw, b"]"].concat();
        let [value]: [Value; 1] = serde_json::from_slice(&listed).ok()?;
        Some(Arg::Json(value))
    }

    /// A non-negative integer from a JSON number or numeric string (a float's integer part).
    pub fn count(&self) -> Option<u64> {
        match self {
            Arg::Text(raw) => text_count(raw),
            Arg::Json(v) => as_u64(v),
        }
    }

    /// `[x, y, z]` grid or block dimensions, 0 for what is missing.
    pub fn dims(&self) -> [u32; 3] {
        let mut out = [0; 3];
        match self {
            Arg::Text(raw) => {
                let mut c = Cursor::new(raw, true);
                if c.eat(b'[') != Ok(true) {
                    return out;
                }
                c.ws();
                if c.eat(b']') != Ok(false) {
                    return out;
                }
                for o in &mut out {
                    let Ok(item) = c.value() else { break };
                    *o = text_count(item).unwrap_or(0) as u32;
                    if c.next_or_close(b']') != Ok(true) {
                        break;
                    }
                }
            }
            Arg::Json(Value::Array(items)) => {
                for (o, item) in out.iter_mut().zip(items) {
                    *o = as_u64(item).unwrap_or(0) as u32;
                }
            }
            Arg::Json(_) => {}
        }
        out
    }

    /// A list as compact JSON text (`[[4,8],[8,2]]`); `None` for anything else.
    pub fn list_text(&self) -> Option<Cow<'_, str>> {
        match self {
            Arg::Text(raw) if raw.first() == Some(&b'[') => match compact(raw) {
                Some(text) => Some(Cow::Owned(text)),
                None => Some(Cow::Owned(
                    serde_json::from_slice::<Value>(raw).ok()?.to_string(),
                )),
            },
            Arg::Json(v @ Value::Array(_)) => Some(Cow::Owned(v.to_string())),
            _ => None,
        }
    }

    /// A string's text.
    pub fn string(&self) -> Option<Cow<'_, str>> {
        match self {
            Arg::Text(raw) if raw.first() == Some(&b'"') => {
                std::str::from_utf8(&raw[1..raw.len() - 1])
                    .ok()
                    .map(Cow::Borrowed)
            }
            Arg::Json(Value::String(s)) => Some(Cow::Borrowed(s)),
            _ => None,
        }
    }
}

/// Whether a value's text can be read without serde_json: no escapes, no exponent, no run of
/// digits long enough to pass `f64`'s range, fewer brackets than serde_json's nesting limit. A
/// number of another shape is still read by serde_json ([`text_count`]), but it cannot fail
/// there.
fn read_directly(raw: &[u8]) -> bool {
    let mut run = 0;
    let mut after_digit = false;
    let mut brackets = 0;
    for &b in raw {
        match b {
            b'\\' => return false,
            b'[' | b'{' => {
                brackets += 1;
                if brackets >= 100 {
                    return false;
                }
                run = 0;
            }
            b'e' | b'E' if after_digit => return false,
            b'0'..=b'9' => {
                run += 1;
                if run > 300 {
                    return false;
                }
            }
            _ => run = 0,
        }
        after_digit = b.is_ascii_digit() || (b == b'.' && after_digit);
    }
    true
}

/// [`Arg::count`] of a value's text.
fn text_count(raw: &[u8]) -> Option<u64> {
    match raw.first()? {
        b'0'..=b'9' if raw.iter().all(u8::is_ascii_digit) => std::str::from_utf8(raw)
            .ok()?
            .parse()
            .ok()
            .or_else(|| serde_count(raw)),
        b'"' => std::str::from_utf8(&raw[1..raw.len() - 1])
            .ok()?
            .trim()
            .parse()
            .ok(),
        // Floats, negative numbers, integers past u64: as serde_json reads them.
        b'-' | b'0'..=b'9' => serde_count(raw),
        _ => None,
    }
}

fn serde_count(raw: &[u8]) -> Option<u64> {
    as_u64(&serde_json::from_slice(raw).ok()?)
}

/// A non-negative integer from a JSON number or numeric string.
pub fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A list of integers, strings, literals and lists as serde_json writes it (without
/// whitespace); `None` where it would write it otherwise (floats, objects, `-0`, integers near
/// the edges of 64 bits).
fn compact(raw: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut in_string = false;
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if in_string {
            in_string = b != b'"';
            out.push(b);
            i += 1;
            continue;
        }
        match b {
            b' ' | b'\n' | b'\r' | b'\t' => {}
            b'"' => {
                in_string = true;
                out.push(b);
            }
            b'{' | b'.' | b'e' | b'E' => return None,
            b'0'..=b'9' => {
                let end = raw[i..]
                    .iter()
                    .position(|b| !b.is_ascii_digit())
                    .map_or(raw.len(), |n| i + n);
                let negative_zero = &raw[i..end] == b"0" && out.last() == Some(&b'-');
                if end - i > 18 || negative_zero {
                    return None;
                }
                out.extend_from_slice(&raw[i..end]);
                i = end;
                continue;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event_of(text: &str) -> Scan<Event<'_>> {
        event(&mut Cursor::new(text.as_bytes(), true))
    }

    #[test]
    fn events_keep_their_fields_as_text() {
        let e = event_of(
            r#"{"ph": "X", "cat": "kernel", "name": "k\u00e9", "pid": 7, "tid": "stream 3",
                "ts": 1.5, "dur": null, "id": [1, {"a": 2}], "args": {"grid": [1, 2, 3]}}"#,
        )
        .unwrap();
        assert_eq!(e.name.as_deref(), Some("ké"));
        assert_eq!(e.pid, Some(&b"7"[..]));
        assert_eq!(e.tid, Some(&b"\"stream 3\""[..]));
        assert_eq!(e.dur, None);
        assert_eq!(Args::read(e.args).grid.unwrap().dims(), [1, 2, 3]);
    }

    #[test]
    fn what_serde_refused_is_refused() {
        assert!(event_of(r#"{"ph": 3}"#).is_err());
        assert!(event_of(r#"{"ph": "X", "ph": "X"}"#).is_err());
        assert!(event_of(r#"[1, 2]"#).is_err());
        // Args serde_json would not read are no args.
        for args in [
            r#"{"correlation": 1, "correlation": 2}"#,
            r#"{"correlation": 1, "device": 1e400}"#,
            r#"{"correlation": 1, "name": "\ud800"}"#,
            r#"[1, 2]"#,
            &format!(
                "{{\"correlation\": 1, \"grid\": {}{}}}",
                "[".repeat(127),
                "]".repeat(127)
            ),
        ] {
            assert!(
                Args::read(Some(args.as_bytes())).correlation.is_none(),
                "{args}"
            );
        }
        let args = br#"{"correlation": 1, "other": 1e400, "other": "\ud800"}"#;
        assert_eq!(Args::read(Some(args)).correlation.unwrap().count(), Some(1));
    }

    #[test]
    fn counts_read_as_serde_json_reads_them() {
        for (text, count) in [
            ("12", Some(12)),
            ("\" 12 \"", Some(12)),
            ("-3", None),
            ("-0", Some(0)),
            ("3.9", Some(3)),
            ("1e3", Some(1000)),
            ("18446744073709551616", Some(u64::MAX)),
            ("[1]", None),
            ("true", None),
        ] {
            let arg = Arg::new(text.as_bytes()).unwrap();
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(arg.count(), count, "{text}");
            assert_eq!(as_u64(&value), count, "{text}");
        }
    }

    #[test]
    fn lists_are_written_as_serde_json_writes_them() {
        for text in [
            "[[4, 8], [8, 2]]",
            r#"["float", "c10::BFloat16", "", "Scalar"]"#,
            "[[], [1], null, true, -5]",
            "[1.50, -0, 1e2, {\"b\": 1, \"a\": 2}]",
            "[123456789012345678901234]",
            "[\"\\u00e9\\/\"]",
        ] {
            let expected = serde_json::from_str::<Value>(text).unwrap().to_string();
            let arg = Arg::new(text.as_bytes()).unwrap();
            assert_eq!(arg.list_text().as_deref(), Some(&expected[..]), "{text}");
        }
    }
}
