//! Python's pickle, for plain data only: [`read`] parses any protocol (0 to 5) into values
//! without ever running code, [`write`](mod@write) writes protocol 4 the way CPython's pickler
//! does. Both use the one opcode table, [`op`]. Memory snapshots ([`super::torch_snapshot`]) are
//! pickles.

pub mod read;
pub mod write;

/// The opcodes, by pickletools' names.
pub mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const FLOAT: u8 = b'F';
    pub const INT: u8 = b'I';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const LONG: u8 = b'L';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const PERSID: u8 = b'P';
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const STRING: u8 = b'S';
    pub const BINSTRING: u8 = b'T';
    pub const SHORT_BINSTRING: u8 = b'U';
    pub const UNICODE: u8 = b'V';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const BUILD: u8 = b'b';
    pub const GLOBAL: u8 = b'c';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const GET: u8 = b'g';
    pub const BINGET: u8 = b'h';
    pub const INST: u8 = b'i';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const OBJ: u8 = b'o';
    pub const PUT: u8 = b'p';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const PROTO: u8 = 0x80;
    pub const NEWOBJ: u8 = 0x81;
    pub const EXT1: u8 = 0x82;
    pub const EXT2: u8 = 0x83;
    pub const EXT4: u8 = 0x84;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const NEWOBJ_EX: u8 = 0x92;
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
    pub const BYTEARRAY8: u8 = 0x96;
    pub const NEXT_BUFFER: u8 = 0x97;
    pub const READONLY_BUFFER: u8 = 0x98;
}

#[cfg(test)]
mod tests {
    use super::read::{parse, Value};
    use super::write::PickleWriter;

    /// Every kind of value the writer makes, read back: nested containers, memoized strings,
    /// integers at each opcode's limits, floats, booleans, `None`, a batch-sized list and a
    /// dict written once and fetched again through the memo.
    #[test]
    fn what_the_writer_writes_the_reader_reads() {
        let ints = [
            0,
            255,
            256,
            65_535,
            65_536,
            -1,
            i64::from(i32::MIN),
            1 << 31,
            140_480_226_525_184,
            i64::MIN,
            i64::MAX,
        ];
        let mut w = PickleWriter::new();
        w.begin_dict();
        w.key("ints");
        w.begin_list();
        for v in ints {
            w.int(v);
        }
        w.end_list();
        w.key("max");
        w.uint(u64::MAX);
        w.key("text");
        w.begin_list();
        for s in ["forward", "forward", "", "é ✓", "forward"] {
            w.string(s);
        }
        w.end_list();
        w.key("scalars");
        w.begin_list();
        w.float(0.25);
        w.bool(true);
        w.bool(false);
        w.none();
        w.int_tuple(&[0, 0]);
        w.int_tuple(&[1, 2, 3, 4]);
        w.end_list();
        w.key("many");
        w.begin_list();
        for i in 0..2500 {
            w.int(i);
        }
        w.end_list();
        w.key("shared");
        w.begin_list();
        w.begin_dict();
        w.key("name");
        w.string("layers.0");
        let frame = w.end_dict_memo();
        w.get(frame);
        w.end_list();
        w.end_dict();
        let bytes = w.finish();

        let p = parse(&bytes).unwrap();
        let root = p.root();
        let ints_read: Vec<i64> = p
            .seq(p.get(root, "ints").unwrap())
            .unwrap()
            .iter()
            .map(|&v| p.int(v).unwrap())
            .collect();
        assert_eq!(ints_read, ints);
        // u64::MAX does not fit an i64: a big integer, 9 bytes little-endian with a sign byte.
        let max = p.get(root, "max").unwrap();
        assert!(matches!(max, Value::BigInt(_)));
        assert_eq!(
            p.big_int(max),
            Some(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0][..])
        );
        let text: Vec<&str> = p
            .seq(p.get(root, "text").unwrap())
            .unwrap()
            .iter()
            .map(|&v| p.str(v).unwrap())
            .collect();
        assert_eq!(text, ["forward", "forward", "", "é ✓", "forward"]);
        let scalars = p.seq(p.get(root, "scalars").unwrap()).unwrap();
        assert_eq!(
            &scalars[..4],
            &[
                Value::Float(0.25),
                Value::Bool(true),
                Value::Bool(false),
                Value::None
            ]
        );
        let pair: Vec<i64> = p
            .seq(scalars[4])
            .unwrap()
            .iter()
            .map(|&v| p.int(v).unwrap())
            .collect();
        assert_eq!(pair, [0, 0]);
        assert!(matches!(scalars[4], Value::Tuple(_)));
        let four: Vec<i64> = p
            .seq(scalars[5])
            .unwrap()
            .iter()
            .map(|&v| p.int(v).unwrap())
            .collect();
        assert_eq!(four, [1, 2, 3, 4]);
        let many = p.seq(p.get(root, "many").unwrap()).unwrap();
        assert_eq!(many.len(), 2500);
        assert_eq!(many[2499], Value::Int(2499));
        let shared = p.seq(p.get(root, "shared").unwrap()).unwrap();
        assert_eq!(
            shared[0], shared[1],
            "one dict, fetched again from the memo"
        );
        assert_eq!(p.str(p.get(shared[0], "name").unwrap()), Some("layers.0"));
    }
}
