//! Itanium C++ ABI demangling spelled the way NVIDIA's `cu++filt` spells it, which is how Nsight
//! Systems fills `demangledName`: template parameters in a template function's signature stay
//! symbolic (`(int, T2, T3)`, `const T1 &`), integer and enum template arguments carry their type
//! (`(int)4`, `(unsigned long)2`, `(bool)0`), `const` goes before the type, pointers and references
//! are spaced (`char *`, `T1 &`), template arguments close without a space (`<A<int>>`),
//! anonymous namespaces read `<unnamed>`, lambdas `[lambda(float) (instance 1)]` and the call
//! operator `operator ()`.
//!
//! It covers what kernel names use: nested, local and unscoped names, substitutions, template
//! arguments with literals and packs, lambdas, operators, constructors, cv- and ref-qualified,
//! pointer, reference, array, function and pointer-to-member types, pack expansions. Expressions
//! in template arguments (`X...E`), `decltype` and the special names (vtables, guards) are not
//! handled: [`demangle`] returns `None` and the caller falls back to another demangler. It is
//! checked against every kernel name of the project's Nsight Systems captures
//! (`fixtures/collect/kernel_names_nsys.tsv`). Nothing here allocates on or touches a device.

/// `mangled` as `cu++filt` prints it, or `None` when it is not an Itanium name this module can
/// read.
pub fn demangle(mangled: &str) -> Option<String> {
    let body = mangled.strip_prefix("_Z")?;
    // A clone suffix (`.constprop.0`) follows the encoding.
    let (body, clone) = match body.find('.') {
        Some(i) => (&body[..i], Some(&body[i..])),
        None => (body, None),
    };
    let mut p = Parser {
        s: body.as_bytes(),
        pos: 0,
        subs: Vec::new(),
        depth: 0,
    };
    let out = p.encoding()?;
    if p.pos != p.s.len() {
        return None;
    }
    Some(match clone {
        Some(c) => format!("{out} [clone {c}]"),
        None => out,
    })
}

/// A type as the printer needs it: declarators (pointer, reference, function, array) kept apart
/// so that they are spelled around the name they modify.
#[derive(Clone, Debug, PartialEq)]
enum Ty {
    /// Printed as is: builtins, class names, template parameters.
    Plain(String),
    Ptr(Box<Ty>),
    LRef(Box<Ty>),
    RRef(Box<Ty>),
    /// `const`, `volatile`, `__restrict__` (in that order in the string).
    Qual(Box<Ty>, String),
    Func {
        ret: Box<Ty>,
        params: Vec<Ty>,
        quals: String,
    },
    Array(Box<Ty>, String),
    MemberPtr(Box<Ty>, Box<Ty>),
    Pack(Box<Ty>),
}

impl Ty {
    fn print(&self) -> String {
        match self {
            Ty::Plain(s) => s.clone(),
            Ty::Ptr(t) => match &**t {
                Ty::Func { ret, params, quals } => {
                    format!("{} (*)({}){quals}", ret.print(), print_params(params))
                }
                Ty::Array(e, d) => format!("{} (*)[{d}]", e.print()),
                inner => suffix(inner.print(), "*"),
            },
            Ty::LRef(t) => suffix(t.print(), "&"),
            Ty::RRef(t) => suffix(t.print(), "&&"),
            Ty::Qual(t, q) => match &**t {
                Ty::Ptr(_) | Ty::LRef(_) | Ty::RRef(_) | Ty::MemberPtr(..) => {
                    format!("{}{q}", t.print())
                }
                Ty::Func { .. } => format!("{} {q}", t.print()),
                _ => format!("{q} {}", t.print()),
            },
            Ty::Func { ret, params, quals } => {
                format!("{} ({}){quals}", ret.print(), print_params(params))
            }
            Ty::Array(t, d) => format!("{} [{d}]", t.print()),
            Ty::MemberPtr(class, member) => match &**member {
                Ty::Func { ret, params, quals } => format!(
                    "{} ({}::*)({}){quals}",
                    ret.print(),
                    class.print(),
                    print_params(params)
                ),
                m => format!("{} {}::*", m.print(), class.print()),
            },
            Ty::Pack(t) => format!("{}...", t.print()),
        }
    }
}

/// `char` + `*` is `char *`; `char *` + `*` is `char **`.
fn suffix(inner: String, op: &str) -> String {
    if inner.ends_with('*') || inner.ends_with('&') {
        format!("{inner}{op}")
    } else {
        format!("{inner} {op}")
    }
}

/// A parameter list; a lone `void` is an empty list.
fn print_params(params: &[Ty]) -> String {
    if params.len() == 1 && params[0] == Ty::Plain("void".to_owned()) {
        return String::new();
    }
    params.iter().map(Ty::print).collect::<Vec<_>>().join(", ")
}

/// What the rest of an encoding needs to know about its name.
#[derive(Clone, Debug, Default)]
struct Name {
    text: String,
    /// The name ends with template arguments: a function of this name mangles its return type.
    template_args: bool,
    /// A constructor, destructor or conversion operator (no return type even when templated).
    ctor_dtor_conv: bool,
    /// ` const`, ` &` and the like after the parameter list (member functions).
    quals: String,
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    subs: Vec<Ty>,
    depth: u32,
}

/// Deep enough for any real name; bounds the recursion on hostile input.
const MAX_DEPTH: u32 = 256;

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn peek_at(&self, n: usize) -> Option<u8> {
        self.s.get(self.pos + n).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_str(&mut self, t: &str) -> bool {
        if self
            .s
            .get(self.pos..)
            .is_some_and(|r| r.starts_with(t.as_bytes()))
        {
            self.pos += t.len();
            true
        } else {
            false
        }
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn number(&mut self) -> Option<u64> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        std::str::from_utf8(&self.s[start..self.pos])
            .ok()?
            .parse()
            .ok()
    }

    /// `<encoding> ::= <name> <bare-function-type>` (a data name has no types after it).
    fn encoding(&mut self) -> Option<String> {
        self.enter()?;
        let name = self.name()?;
        let out = if self.peek().is_none() || self.peek() == Some(b'E') {
            name.text
        } else {
            let ret = if name.template_args && !name.ctor_dtor_conv {
                Some(self.ty()?)
            } else {
                None
            };
            let params = self.params()?;
            let call = format!("{}({}){}", name.text, print_params(&params), name.quals);
            match ret {
                Some(r) => format!("{} {call}", r.print()),
                None => call,
            }
        };
        self.leave();
        Some(out)
    }

    /// Types up to the end of the input or an `E`.
    fn params(&mut self) -> Option<Vec<Ty>> {
        let mut params = Vec::new();
        while self.peek().is_some() && self.peek() != Some(b'E') && self.peek() != Some(b'.') {
            params.push(self.ty()?);
        }
        if params.is_empty() {
            return None;
        }
        Some(params)
    }

    fn name(&mut self) -> Option<Name> {
        self.enter()?;
        let r = match self.peek()? {
            b'N' => self.nested_name(),
            b'Z' => self.local_name(),
            _ => {
                let (mut n, is_sub) = self.unscoped_name()?;
                if self.peek() == Some(b'I') {
                    if !is_sub {
                        self.subs.push(Ty::Plain(n.text.clone()));
                    }
                    let args = self.template_args()?;
                    n.text.push_str(&args);
                    n.template_args = true;
                    Some(n)
                } else if is_sub {
                    None
                } else {
                    Some(n)
                }
            }
        };
        self.leave();
        r
    }

    /// `<unscoped-name>` (with `St`), or a substitution; the flag says which.
    fn unscoped_name(&mut self) -> Option<(Name, bool)> {
        if self.peek() == Some(b'S') && self.peek_at(1) != Some(b't') {
            let t = self.substitution()?;
            return Some((
                Name {
                    text: t.print(),
                    ..Name::default()
                },
                true,
            ));
        }
        let std = self.eat_str("St");
        let mut n = self.unqualified_name(None)?;
        if std {
            n.text = format!("std::{}", n.text);
        }
        Some((n, false))
    }

    /// `N [<CV-qualifiers>] [<ref-qualifier>] <prefix> <unqualified-name> E`
    fn nested_name(&mut self) -> Option<Name> {
        if !self.eat(b'N') {
            return None;
        }
        let quals = self.cv_qualifiers();
        let ref_qual = if self.eat(b'R') {
            " &"
        } else if self.eat(b'O') {
            " &&"
        } else {
            ""
        };
        let mut so_far: Option<String> = None;
        let mut last = Name::default();
        let mut pushed = 0usize;
        loop {
            if self.eat(b'E') {
                break;
            }
            let c = self.peek()?;
            if c == b'T' {
                let t = self.template_param()?;
                so_far = Some(join(so_far.as_deref(), &t));
                last = Name {
                    text: t,
                    ..Name::default()
                };
            } else if c == b'I' {
                let base = so_far.as_ref()?.clone();
                let args = self.template_args()?;
                so_far = Some(format!("{base}{args}"));
                last.template_args = true;
            } else if c == b'S' && self.peek_at(1) != Some(b't') {
                let t = self.substitution()?.print();
                let first = so_far.is_none();
                so_far = Some(join(so_far.as_deref(), &t));
                last = Name {
                    text: t,
                    ..Name::default()
                };
                if first {
                    continue;
                }
            } else if c == b'S' {
                self.pos += 2;
                so_far = Some(join(so_far.as_deref(), "std"));
                continue;
            } else {
                let n = self.unqualified_name(so_far.as_deref())?;
                so_far = Some(join(so_far.as_deref(), &n.text));
                last = n;
            }
            if let Some(s) = &so_far {
                self.subs.push(Ty::Plain(s.clone()));
                pushed += 1;
            }
        }
        // The whole name is a candidate only where it is used as a type (the caller pushes it).
        if pushed > 0 {
            self.subs.pop();
        }
        let text = so_far?;
        Some(Name {
            text,
            template_args: last.template_args,
            ctor_dtor_conv: last.ctor_dtor_conv,
            quals: format!("{quals}{ref_qual}").replace("  ", " "),
        })
    }

    /// ` const`, ` volatile`, ` __restrict__` (leading space each), as the suffix of a member
    /// function or the qualifier of a type.
    fn cv_qualifiers(&mut self) -> String {
        let mut q = String::new();
        if self.eat(b'r') {
            q.push_str(" __restrict__");
        }
        if self.eat(b'V') {
            q.push_str(" volatile");
        }
        if self.eat(b'K') {
            q.push_str(" const");
        }
        // Spelled const first, as C++ writes them.
        let mut parts: Vec<&str> = q.split_whitespace().collect();
        parts.reverse();
        if parts.is_empty() {
            String::new()
        } else {
            format!(" {}", parts.join(" "))
        }
    }

    /// `Z <function encoding> E <entity name> [<discriminator>]`, or a string literal's `s`.
    fn local_name(&mut self) -> Option<Name> {
        if !self.eat(b'Z') {
            return None;
        }
        let function = self.encoding()?;
        if !self.eat(b'E') {
            return None;
        }
        if self.eat(b's') {
            self.discriminator();
            return Some(Name {
                text: format!("{function}::string literal"),
                ..Name::default()
            });
        }
        let mut entity = self.name()?;
        self.discriminator();
        entity.text = format!("{function}::{}", entity.text);
        Some(entity)
    }

    fn discriminator(&mut self) {
        if self.peek() == Some(b'_') {
            let save = self.pos;
            self.pos += 1;
            if self.eat(b'_') {
                if self.number().is_some() && self.eat(b'_') {
                    return;
                }
            } else if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
                return;
            }
            self.pos = save;
        }
    }

    /// A source name, operator, constructor/destructor or unnamed type (lambda).
    fn unqualified_name(&mut self, scope: Option<&str>) -> Option<Name> {
        let c = self.peek()?;
        let mut n = if c.is_ascii_digit() {
            Name {
                text: self.source_name()?,
                ..Name::default()
            }
        } else if c == b'U' {
            Name {
                text: self.unnamed_type()?,
                ..Name::default()
            }
        } else if c == b'C' && matches!(self.peek_at(1), Some(b'1'..=b'5')) {
            self.pos += 2;
            Name {
                text: last_component(scope?).to_owned(),
                ctor_dtor_conv: true,
                ..Name::default()
            }
        } else if c == b'D' && matches!(self.peek_at(1), Some(b'0'..=b'5')) {
            self.pos += 2;
            Name {
                text: format!("~{}", last_component(scope?)),
                ctor_dtor_conv: true,
                ..Name::default()
            }
        } else if c.is_ascii_lowercase() {
            self.operator_name()?
        } else {
            return None;
        };
        // ABI tags.
        while self.eat(b'B') {
            let tag = self.source_name()?;
            n.text = format!("{}[abi:{tag}]", n.text);
        }
        Some(n)
    }

    fn source_name(&mut self) -> Option<String> {
        let len = self.number()? as usize;
        let end = self.pos.checked_add(len)?;
        if len == 0 || end > self.s.len() {
            return None;
        }
        let id = std::str::from_utf8(&self.s[self.pos..end]).ok()?;
        self.pos = end;
        Some(if id.starts_with("_GLOBAL__N") {
            "<unnamed>".to_owned()
        } else {
            id.to_owned()
        })
    }

    /// `Ul <lambda-sig> E [<number>] _` or `Ut [<number>] _`.
    fn unnamed_type(&mut self) -> Option<String> {
        if self.eat_str("Ul") {
            let params = self.params()?;
            if !self.eat(b'E') {
                return None;
            }
            let n = self.number().map_or(1, |n| n + 2);
            if !self.eat(b'_') {
                return None;
            }
            Some(format!(
                "[lambda({}) (instance {n})]",
                print_params(&params)
            ))
        } else if self.eat_str("Ut") {
            let n = self.number().map_or(1, |n| n + 2);
            if !self.eat(b'_') {
                return None;
            }
            Some(format!("[unnamed type (instance {n})]"))
        } else {
            None
        }
    }

    fn operator_name(&mut self) -> Option<Name> {
        let code = self.s.get(self.pos..self.pos + 2)?;
        if code == b"cv" {
            self.pos += 2;
            let t = self.ty()?;
            return Some(Name {
                text: format!("operator {}", t.print()),
                ctor_dtor_conv: true,
                ..Name::default()
            });
        }
        if code == b"li" {
            self.pos += 2;
            let id = self.source_name()?;
            return Some(Name {
                text: format!("operator \"\" {id}"),
                ..Name::default()
            });
        }
        let sym = match code {
            b"nw" => "new",
            b"na" => "new[]",
            b"dl" => "delete",
            b"da" => "delete[]",
            b"ps" | b"pl" => "+",
            b"ng" | b"mi" => "-",
            b"ad" | b"an" => "&",
            b"de" | b"ml" => "*",
            b"co" => "~",
            b"dv" => "/",
            b"rm" => "%",
            b"or" => "|",
            b"eo" => "^",
            b"aS" => "=",
            b"pL" => "+=",
            b"mI" => "-=",
            b"mL" => "*=",
            b"dV" => "/=",
            b"rM" => "%=",
            b"aN" => "&=",
            b"oR" => "|=",
            b"eO" => "^=",
            b"ls" => "<<",
            b"rs" => ">>",
            b"lS" => "<<=",
            b"rS" => ">>=",
            b"eq" => "==",
            b"ne" => "!=",
            b"lt" => "<",
            b"gt" => ">",
            b"le" => "<=",
            b"ge" => ">=",
            b"ss" => "<=>",
            b"nt" => "!",
            b"aa" => "&&",
            b"oo" => "||",
            b"pp" => "++",
            b"mm" => "--",
            b"cm" => ",",
            b"pm" => "->*",
            b"pt" => "->",
            b"cl" => "()",
            b"ix" => "[]",
            b"qu" => "?",
            _ => return None,
        };
        self.pos += 2;
        Some(Name {
            text: format!("operator {sym}"),
            ..Name::default()
        })
    }

    /// `T_` is the first template parameter, `T0_` the second: `cu++filt` counts from 1.
    fn template_param(&mut self) -> Option<String> {
        if !self.eat(b'T') {
            return None;
        }
        let n = if self.eat(b'_') {
            1
        } else {
            let n = self.number()?;
            if !self.eat(b'_') {
                return None;
            }
            n + 2
        };
        Some(format!("T{n}"))
    }

    /// `I <template-arg>+ E`, printed `<a, b>`.
    fn template_args(&mut self) -> Option<String> {
        if !self.eat(b'I') {
            return None;
        }
        self.enter()?;
        let mut args = Vec::new();
        while !self.eat(b'E') {
            if let Some(a) = self.template_arg()? {
                args.push(a);
            }
        }
        self.leave();
        Some(format!("<{}>", args.join(", ")))
    }

    /// One argument; `None` inside for an empty pack.
    fn template_arg(&mut self) -> Option<Option<String>> {
        match self.peek()? {
            b'L' => Some(Some(self.literal()?)),
            b'J' => {
                self.pos += 1;
                let mut items = Vec::new();
                while !self.eat(b'E') {
                    if let Some(a) = self.template_arg()? {
                        items.push(a);
                    }
                }
                Some((!items.is_empty()).then(|| items.join(", ")))
            }
            // Expressions are not read (see the module documentation).
            b'X' => None,
            _ => Some(Some(self.ty()?.print())),
        }
    }

    /// `L <type> <value> E`, printed `(type)value`, or `L _Z <encoding> E`.
    fn literal(&mut self) -> Option<String> {
        if !self.eat(b'L') {
            return None;
        }
        if self.eat_str("_Z") {
            let e = self.encoding()?;
            return self.eat(b'E').then_some(e);
        }
        if self.eat_str("DnE") {
            return Some("nullptr".to_owned());
        }
        let t = self.ty()?.print();
        let neg = self.eat(b'n');
        let start = self.pos;
        while self.peek().is_some_and(|c| c != b'E') {
            self.pos += 1;
        }
        let value = std::str::from_utf8(&self.s[start..self.pos])
            .ok()?
            .to_owned();
        if !self.eat(b'E') || value.is_empty() {
            return None;
        }
        Some(format!("({t}){}{value}", if neg { "-" } else { "" }))
    }

    /// `S_`, `S<seq-id>_` and the abbreviations `St`, `Sa`, `Sb`, `Ss`, `Si`, `So`, `Sd`.
    fn substitution(&mut self) -> Option<Ty> {
        if !self.eat(b'S') {
            return None;
        }
        let special = match self.peek()? {
            b'a' => Some("std::allocator"),
            b'b' => Some("std::basic_string"),
            b's' => Some("std::string"),
            b'i' => Some("std::istream"),
            b'o' => Some("std::ostream"),
            b'd' => Some("std::iostream"),
            b't' => Some("std"),
            _ => None,
        };
        if let Some(s) = special {
            self.pos += 1;
            return Some(Ty::Plain(s.to_owned()));
        }
        let index = if self.eat(b'_') {
            0
        } else {
            let mut v: usize = 0;
            loop {
                let c = self.peek()?;
                self.pos += 1;
                let d = match c {
                    b'0'..=b'9' => (c - b'0') as usize,
                    b'A'..=b'Z' => (c - b'A') as usize + 10,
                    b'_' => break,
                    _ => return None,
                };
                v = v.checked_mul(36)?.checked_add(d)?;
            }
            v + 1
        };
        self.subs.get(index).cloned()
    }

    fn ty(&mut self) -> Option<Ty> {
        self.enter()?;
        let t = self.ty_inner();
        self.leave();
        t
    }

    fn ty_inner(&mut self) -> Option<Ty> {
        let c = self.peek()?;
        if let Some(b) = self.builtin() {
            return Some(Ty::Plain(b.to_owned()));
        }
        let t = match c {
            b'r' | b'V' | b'K' => {
                let q = self.cv_qualifiers();
                let inner = self.ty()?;
                Ty::Qual(Box::new(inner), q.trim_start().to_owned())
            }
            b'P' => {
                self.pos += 1;
                Ty::Ptr(Box::new(self.ty()?))
            }
            b'R' => {
                self.pos += 1;
                Ty::LRef(Box::new(self.ty()?))
            }
            b'O' => {
                self.pos += 1;
                Ty::RRef(Box::new(self.ty()?))
            }
            b'F' => {
                self.pos += 1;
                self.eat(b'Y');
                let ret = self.ty()?;
                let mut params = Vec::new();
                while self.peek() != Some(b'E') {
                    if self.eat(b'R') || self.eat(b'O') {
                        continue;
                    }
                    params.push(self.ty()?);
                }
                self.pos += 1;
                Ty::Func {
                    ret: Box::new(ret),
                    params,
                    quals: String::new(),
                }
            }
            b'A' => {
                self.pos += 1;
                let start = self.pos;
                while self.peek().is_some_and(|c| c != b'_') {
                    self.pos += 1;
                }
                let dim = std::str::from_utf8(&self.s[start..self.pos])
                    .ok()?
                    .to_owned();
                if !self.eat(b'_') {
                    return None;
                }
                Ty::Array(Box::new(self.ty()?), dim)
            }
            b'M' => {
                self.pos += 1;
                let class = self.ty()?;
                let member = self.ty()?;
                Ty::MemberPtr(Box::new(class), Box::new(member))
            }
            b'T' => {
                let p = Ty::Plain(self.template_param()?);
                if self.peek() == Some(b'I') {
                    self.subs.push(p.clone());
                    let args = self.template_args()?;
                    Ty::Plain(format!("{}{args}", p.print()))
                } else {
                    p
                }
            }
            b'D' if self.peek_at(1) == Some(b'p') => {
                self.pos += 2;
                Ty::Pack(Box::new(self.ty()?))
            }
            b'S' if self.peek_at(1) != Some(b't') => {
                let sub = self.substitution()?;
                if self.peek() != Some(b'I') {
                    return Some(sub);
                }
                let args = self.template_args()?;
                Ty::Plain(format!("{}{args}", sub.print()))
            }
            b'N' | b'Z' | b'S' | b'0'..=b'9' => Ty::Plain(self.name()?.text),
            b'U' => {
                // Vendor qualifier: `U <source-name> <type>`.
                self.pos += 1;
                let q = self.source_name()?;
                let inner = self.ty()?;
                Ty::Plain(format!("{} {q}", inner.print()))
            }
            _ => return None,
        };
        self.subs.push(t.clone());
        Some(t)
    }

    /// Builtin types (never substitution candidates).
    fn builtin(&mut self) -> Option<&'static str> {
        let one = match self.peek()? {
            b'v' => "void",
            b'w' => "wchar_t",
            b'b' => "bool",
            b'c' => "char",
            b'a' => "signed char",
            b'h' => "unsigned char",
            b's' => "short",
            b't' => "unsigned short",
            b'i' => "int",
            b'j' => "unsigned int",
            b'l' => "long",
            b'm' => "unsigned long",
            b'x' => "long long",
            b'y' => "unsigned long long",
            b'n' => "__int128",
            b'o' => "unsigned __int128",
            b'f' => "float",
            b'd' => "double",
            b'e' => "long double",
            b'g' => "__float128",
            b'z' => "...",
            b'D' => {
                let two = match self.peek_at(1)? {
                    b'n' => "decltype(nullptr)",
                    b'i' => "char32_t",
                    b's' => "char16_t",
                    b'u' => "char8_t",
                    b'a' => "auto",
                    b'c' => "decltype(auto)",
                    b'h' => "half",
                    _ => return None,
                };
                self.pos += 2;
                return Some(two);
            }
            _ => return None,
        };
        self.pos += 1;
        Some(one)
    }
}

/// `a::b` joined; the first component alone.
fn join(prefix: Option<&str>, name: &str) -> String {
    match prefix {
        Some(p) => format!("{p}::{name}"),
        None => name.to_owned(),
    }
}

/// The last `::` component of a scope, template arguments dropped (a constructor's name).
fn last_component(scope: &str) -> &str {
    let mut depth = 0i32;
    let bytes = scope.as_bytes();
    let mut start = 0;
    let mut end = scope.len();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' => {
                if depth == 0 {
                    end = i;
                }
                depth += 1;
            }
            b'>' => depth -= 1,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                start = i + 2;
                end = scope.len();
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    &scope[start..end.max(start)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_functions_and_pointers() {
        assert_eq!(
            demangle("_Z13embedding_fwdPKiPKfPfi").as_deref(),
            Some("embedding_fwd(const int *, const float *, float *, int)")
        );
        assert_eq!(demangle("_Z1fv").as_deref(), Some("f()"));
        assert_eq!(demangle("_Z1fPPc").as_deref(), Some("f(char **)"));
        assert_eq!(
            demangle("_Z1fPKc.constprop.0").as_deref(),
            Some("f(const char *) [clone .constprop.0]")
        );
    }

    #[test]
    fn template_parameters_stay_symbolic() {
        // From the H200 capture of PyTorch (fixtures/collect/kernel_names_nsys.tsv).
        assert_eq!(
            demangle("_ZN2at6native24vectorized_gather_kernelILi16ElEEvPcS2_PT0_illllb").as_deref(),
            Some("void at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, int, long, long, long, long, bool)")
        );
    }

    #[test]
    fn constructors_take_the_class_name() {
        assert_eq!(last_component("a::b<int>::Foo<float>"), "Foo");
        assert_eq!(demangle("_ZN1a3FooC2Ev").as_deref(), Some("a::Foo::Foo()"));
    }

    /// Every kernel of the project's Nsight Systems captures: `cu++filt`'s spelling (as nsys
    /// stored it in `demangledName`) and nsys's `shortName`, from the mangled name.
    #[test]
    fn every_captured_kernel_name_is_spelled_as_nsys_spells_it() {
        let table = include_str!("../../../fixtures/collect/kernel_names_nsys.tsv");
        let mut n = 0;
        for line in table.lines().filter(|l| !l.is_empty()) {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 3, "{line}");
            if !f[0].starts_with("_Z") {
                assert_eq!(demangle(f[0]), None);
                continue;
            }
            assert_eq!(demangle(f[0]).as_deref(), Some(f[1]), "{}", f[0]);
            assert_eq!(
                crate::trace::cupti::kernel_names(f[0]).short,
                f[2],
                "{}",
                f[0]
            );
            n += 1;
        }
        assert!(n >= 60, "only {n} mangled names in the table");
    }

    /// Every prefix of every captured name, and each with one byte changed: no panic, and a
    /// truncated name is refused rather than half printed.
    #[test]
    fn damaged_names_never_panic() {
        let table = include_str!("../../../fixtures/collect/kernel_names_nsys.tsv");
        for line in table.lines().filter(|l| l.starts_with("_Z")) {
            let m = line.split('\t').next().unwrap_or_default();
            for end in 0..m.len() {
                let _ = demangle(&m[..end]);
            }
            let bytes = m.as_bytes();
            for i in (2..bytes.len()).step_by(3) {
                for c in [
                    b'E', b'I', b'S', b'T', b'Z', b'0', b'_', b'L', b'N', b'C', b'D',
                ] {
                    let mut b = bytes.to_vec();
                    b[i] = c;
                    let _ = demangle(&String::from_utf8_lossy(&b));
                }
            }
        }
        assert_eq!(demangle("_ZN2at6native24vectorized_gather_kernelILi16ElEEvPcS2_PT0_illl"), Some(
            "void at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, int, long, long, long)".to_owned()
        ));
        assert_eq!(
            demangle("_ZN2at6native24vectorized_gather_kernelILi16ElEE"),
            Some("at::native::vectorized_gather_kernel<(int)16, long>".to_owned())
        );
        assert_eq!(
            demangle("_ZN2at6native24vectorized_gather_kernelILi16ElE"),
            None
        );
    }

    #[test]
    fn not_itanium_is_none() {
        assert_eq!(demangle("sm90_xmma_gemm_f32f32"), None);
        assert_eq!(demangle("_Z"), None);
        assert_eq!(demangle("_Z3foo"), Some("foo".to_owned()));
        assert_eq!(demangle("_ZN3fooE"), Some("foo".to_owned()));
    }
}
