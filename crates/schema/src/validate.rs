//! Validation of a call's arguments against a compiled schema.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasherDefault;
use std::fmt::Write as _;

use wasi_python_protocol::{Map, Value};

use crate::{Bounds, InputSchema};
use crate::compile::{
    ArrayKeys, Extra, Keys, Node, NodeId, NumberKeys, ObjectKeys, ROOT, StringKeys, is_identifier,
    ty,
};
use crate::error::{ArgumentError, ArgumentErrorKind as A, cut};
use crate::instance::{self, Inst};
use crate::num::{self, NumRef};

/// How deep argument values may nest; the arguments object is level 1. (A frame nests at most
/// 64 levels, the frame object and `args` included.)
pub(crate) const MAX_NESTING: usize = 64;

/// How many schema applications may be in progress at once along one path.
const MAX_FRAMES: u32 = 512;

/// Arrays up to this long are checked for `uniqueItems` pair by pair; longer ones by hash.
const PAIRWISE_UNIQUE: usize = 16;

/// Bytes of text that count as one step, where a check reads a string (a pattern, a length).
const TEXT_BYTES_PER_STEP: u64 = 64;

/// How often (in steps) a check asks [`Bounds::stop`] whether to give up.
const STOP_EVERY: u64 = 1024;

/// Enum values listed in a message.
const ENUM_LISTED: usize = 10;

/// A failure as far as combinators need to know it; the message, when wanted, is in
/// [`Ctx::err`].
#[derive(Debug, Clone, Copy)]
struct Fail {
    kind: A,
    /// The instance depth of the failing value (0 is the arguments object).
    level: u32,
    /// For `WrongType`: the types that would have been accepted.
    expected: u16,
}

struct Ctx<'s> {
    /// Whether failures should render their message into `err`.
    detail: bool,
    err: Option<ArgumentError>,
    frames: u32,
    /// Set when the check must end whatever the value: every caller returns at once.
    abort: Option<A>,
    /// Work done so far, and the most allowed ([`Bounds::max_steps`]).
    steps: u64,
    max_steps: u64,
    stop: Option<&'s dyn Fn() -> bool>,
    /// Whether the arguments hold bytes anywhere.
    has_bytes: bool,
    /// Addresses of the bytes values some passing schema with `contentEncoding: "base64"`
    /// applied to. Failing branches truncate their marks away.
    marks: Vec<usize>,
}

/// What a check returns once `ctx.abort` is set (its kind is `ctx.abort`'s).
const ABORTED: Fail = Fail {
    kind: A::TooDeep,
    level: 0,
    expected: 0,
};

impl Ctx<'_> {
    /// Counts `n` steps of work; false (with `abort` set) once the check must end:
    /// past `max_steps`, or when `stop` says so (asked every [`STOP_EVERY`] steps).
    fn charge(&mut self, n: u64) -> bool {
        if self.abort.is_some() {
            return false;
        }
        let before = self.steps;
        self.steps = self.steps.saturating_add(n);
        if self.steps > self.max_steps {
            self.abort = Some(A::TooComplex);
            return false;
        }
        if let Some(stop) = self.stop
            && before / STOP_EVERY != self.steps / STOP_EVERY
            && stop()
        {
            self.abort = Some(A::Stopped);
            return false;
        }
        true
    }
}

#[derive(Clone, Copy)]
enum Seg<'a> {
    Root,
    Key(&'a str),
    Index(usize),
}

/// Where a value is, as a chain on the stack; rendered only for a message.
#[derive(Clone, Copy)]
struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
    level: u32,
}

impl<'a> Path<'a> {
    const ROOT: Path<'static> = Path {
        parent: None,
        seg: Seg::Root,
        level: 0,
    };

    fn child(&'a self, seg: Seg<'a>) -> Path<'a> {
        Path {
            parent: Some(self),
            seg,
            level: self.level + 1,
        }
    }

    fn is_root(&self) -> bool {
        self.parent.is_none()
    }

    fn render(&self) -> String {
        let mut segs = Vec::with_capacity(self.level as usize);
        let mut at = Some(self);
        while let Some(p) = at {
            segs.push(p.seg);
            at = p.parent;
        }
        let mut out = String::new();
        for seg in segs.iter().rev() {
            match *seg {
                Seg::Root => {}
                Seg::Key(k) if out.is_empty() => {
                    let _ = write!(out, "{}", cut(k));
                }
                Seg::Key(k) if is_identifier(k) => {
                    let _ = write!(out, ".{}", cut(k));
                }
                Seg::Key(k) => {
                    let _ = write!(out, "[{}]", Value2Json(&cut(k).to_string()));
                }
                Seg::Index(i) => {
                    let _ = write!(out, "[{i}]");
                }
            }
        }
        out
    }
}

/// A string as a JSON string literal.
struct Value2Json<'a>(&'a str);

impl std::fmt::Display for Value2Json<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::Value::from(self.0).to_string())
    }
}

/// A schema constant for a message: compact JSON, cut to 64 characters.
fn show_json(v: &serde_json::Value) -> String {
    cut(&v.to_string()).to_string()
}

impl InputSchema {
    pub(crate) fn run(&self, args: &Map, bounds: &Bounds<'_>) -> Result<(), ArgumentError> {
        let scan = instance::scan(args, MAX_NESTING);
        if scan.too_deep {
            return Err(aborted(A::TooDeep, bounds));
        }
        let mut ctx = Ctx {
            detail: true,
            err: None,
            frames: 0,
            abort: None,
            steps: 0,
            max_steps: bounds.max_steps,
            stop: bounds.stop,
            has_bytes: scan.has_bytes,
            marks: Vec::new(),
        };
        // The scan walked every value once.
        ctx.charge(scan.values);
        let result = self.eval(ROOT, Inst::Object(args), &Path::ROOT, &mut ctx);
        if let Some(kind) = ctx.abort {
            return Err(aborted(kind, bounds));
        }
        if let Err(fail) = result {
            return Err(ctx.err.take().unwrap_or_else(|| {
                ArgumentError::new(
                    fail.kind,
                    String::new(),
                    "the arguments do not match the input schema".into(),
                )
            }));
        }
        if ctx.has_bytes {
            ctx.marks.sort_unstable();
            if let Some(path) = unmarked_bytes_in_map(args, &ctx.marks, &Path::ROOT) {
                let message = format!("argument '{path}': bytes are not accepted here");
                return Err(ArgumentError::new(A::Bytes, path, message));
            }
        }
        Ok(())
    }

    /// Records a failure: with its message when `ctx.detail`.
    fn fail(
        &self,
        ctx: &mut Ctx,
        p: &Path<'_>,
        kind: A,
        expected: u16,
        body: impl FnOnce() -> String,
    ) -> Fail {
        if ctx.detail {
            let path = p.render();
            let message = if p.is_root() {
                body()
            } else {
                format!("argument '{path}': {}", body())
            };
            ctx.err = Some(ArgumentError::new(kind, path, message));
        }
        Fail {
            kind,
            level: p.level,
            expected,
        }
    }

    /// A failure whose whole message is given (path included).
    fn fail_message(
        &self,
        ctx: &mut Ctx,
        p: &Path<'_>,
        kind: A,
        message: impl FnOnce(&str) -> String,
    ) -> Fail {
        if ctx.detail {
            let path = p.render();
            let message = message(&path);
            ctx.err = Some(ArgumentError::new(kind, path, message));
        }
        Fail {
            kind,
            level: p.level,
            expected: 0,
        }
    }

    /// Applies node `id` to `v`. `Ok(true)` when some applied schema with
    /// `contentEncoding: "base64"` passed on this very value.
    fn eval(&self, id: NodeId, v: Inst<'_>, p: &Path<'_>, ctx: &mut Ctx) -> Result<bool, Fail> {
        let k = match &self.nodes[id as usize] {
            Node::Bool(true) => return Ok(false),
            Node::Bool(false) => {
                return Err(self.fail(ctx, p, A::Forbidden, 0, || {
                    "no value is allowed here".into()
                }));
            }
            Node::Keys(k) => k,
        };
        if ctx.frames >= MAX_FRAMES {
            ctx.abort.get_or_insert(A::TooDeep);
            return Err(ABORTED);
        }
        if !ctx.charge(1) {
            return Err(ABORTED);
        }
        ctx.frames += 1;
        let result = self.eval_keys(k, v, p, ctx);
        ctx.frames -= 1;
        result
    }

    fn eval_keys(&self, k: &Keys, v: Inst<'_>, p: &Path<'_>, ctx: &mut Ctx) -> Result<bool, Fail> {
        if let Some(types) = k.types
            && !type_ok(types, k.base64, v)
        {
            let expected = if k.base64 && types & ty::STR != 0 {
                types | ty::BYTES
            } else {
                types
            };
            return Err(self.fail(ctx, p, A::WrongType, expected, || {
                format!("expected {}, got {}", ty::describe(expected), v.got())
            }));
        }
        if let Some(values) = &k.enum_
            && ctx.charge(values.len() as u64)
            && !values.iter().any(|j| instance::eq_json(v, j))
        {
            return Err(self.fail(ctx, p, A::Enum, 0, || {
                let mut listed: Vec<String> =
                    values.iter().take(ENUM_LISTED).map(show_json).collect();
                if values.len() > ENUM_LISTED {
                    listed.push("…".into());
                }
                match values.len() {
                    0 => "no value is allowed here (the enum is empty)".into(),
                    1 => format!("must be {}", listed[0]),
                    _ => format!("must be one of {}", listed.join(", ")),
                }
            }));
        }
        if let Some(c) = &k.const_
            && !instance::eq_json(v, c)
        {
            return Err(self.fail(ctx, p, A::Const, 0, || format!("must be {}", show_json(c))));
        }
        match v {
            Inst::Object(m) => {
                if let Some(o) = &k.object {
                    self.eval_object(o, m, p, ctx)?;
                }
            }
            Inst::Array(a) => {
                if let Some(ar) = &k.array {
                    self.eval_array(ar, a, p, ctx)?;
                }
            }
            Inst::Num(n, _) => {
                if let Some(nk) = &k.number {
                    self.eval_number(nk, n, p, ctx)?;
                }
            }
            Inst::Str(s) => {
                if let Some(sk) = &k.string {
                    self.eval_string(sk, s, None, p, ctx)?;
                }
            }
            Inst::Bytes(b) => {
                if let Some(sk) = &k.string {
                    // Bytes read as their base64 text, which is what crosses the wire.
                    let text = if sk.pattern.is_some() {
                        instance::base64(b)
                    } else {
                        String::new()
                    };
                    self.eval_string(sk, &text, Some(instance::base64_len(b.len())), p, ctx)?;
                }
            }
            _ => {}
        }
        let mut seen = k.base64;
        if let Some(r) = k.ref_ {
            seen |= self.eval(r, v, p, ctx)?;
        }
        for &s in &k.all_of {
            seen |= self.eval(s, v, p, ctx)?;
        }
        if !k.any_of.is_empty() {
            seen |= self.eval_alternatives(&k.any_of, false, v, p, ctx)?;
        }
        if !k.one_of.is_empty() {
            seen |= self.eval_alternatives(&k.one_of, true, v, p, ctx)?;
        }
        if let Some(n) = k.not {
            let detail = std::mem::replace(&mut ctx.detail, false);
            let marks = ctx.marks.len();
            let r = self.eval(n, v, p, ctx);
            ctx.detail = detail;
            ctx.marks.truncate(marks);
            if ctx.abort.is_some() {
                return Err(ABORTED);
            }
            if r.is_ok() {
                return Err(self.fail(ctx, p, A::Combinator, 0, || {
                    "matches the schema under 'not', which it must not".into()
                }));
            }
        }
        Ok(seen)
    }

    /// `anyOf` (`one == false`) or `oneOf`.
    fn eval_alternatives(
        &self,
        branches: &[NodeId],
        one: bool,
        v: Inst<'_>,
        p: &Path<'_>,
        ctx: &mut Ctx,
    ) -> Result<bool, Fail> {
        let detail = std::mem::replace(&mut ctx.detail, false);
        let mut passes = 0;
        let mut seen = false;
        // Why the branches failed: types they wanted here, and the failures past the type.
        let mut expected = 0;
        let mut deep: Option<(NodeId, Fail)> = None;
        let mut deep_count = 0;
        for &b in branches {
            let marks = ctx.marks.len();
            match self.eval(b, v, p, ctx) {
                Ok(s) => {
                    passes += 1;
                    seen |= s;
                    // Bytes anywhere need every passing branch's marks (annotations are
                    // collected from all of them); otherwise the first pass settles `anyOf`.
                    if !one && !ctx.has_bytes {
                        break;
                    }
                }
                Err(_) if ctx.abort.is_some() => {
                    ctx.detail = detail;
                    return Err(ABORTED);
                }
                Err(f) => {
                    ctx.marks.truncate(marks);
                    if f.level == p.level && f.kind == A::WrongType {
                        expected |= f.expected;
                    } else if !(f.level == p.level && f.kind == A::Forbidden) {
                        deep_count += 1;
                        deep = Some((b, f));
                    }
                }
            }
        }
        ctx.detail = detail;
        let which = if one { "oneOf" } else { "anyOf" };
        match passes {
            0 => {}
            1 => return Ok(seen),
            _ if !one => return Ok(seen),
            _ => {
                return Err(self.fail(ctx, p, A::Combinator, 0, || {
                    format!("matches more than one of the {which} alternatives, and must match exactly one")
                }));
            }
        }
        // Nothing passed. Blame the one branch the value got past the type of, if there is one;
        // else, if the branches only disagreed on type, say which types would do.
        if let (1, Some((b, f))) = (deep_count, deep) {
            if !ctx.detail {
                return Err(f);
            }
            let marks = ctx.marks.len();
            let r = self.eval(b, v, p, ctx);
            ctx.marks.truncate(marks);
            match r {
                Err(f) => return Err(f),
                Ok(_) if ctx.abort.is_some() => return Err(ABORTED),
                Ok(_) => {}
            }
        }
        if deep_count == 0 && expected != 0 {
            return Err(self.fail(ctx, p, A::WrongType, expected, || {
                format!("expected {}, got {}", ty::describe(expected), v.got())
            }));
        }
        Err(self.fail(ctx, p, A::Combinator, 0, || {
            format!("does not match any of the {which} alternatives")
        }))
    }

    /// A value inside an object or array: evaluate it, and mark it if it is bytes a
    /// base64 schema accepted.
    fn eval_child(
        &self,
        id: NodeId,
        value: &Value,
        p: &Path<'_>,
        ctx: &mut Ctx,
    ) -> Result<(), Fail> {
        let v = Inst::of(value);
        let seen = self.eval(id, v, p, ctx)?;
        if seen && matches!(v, Inst::Bytes(_)) {
            ctx.marks.push(std::ptr::from_ref(value) as usize);
        }
        Ok(())
    }

    fn eval_object(
        &self,
        o: &ObjectKeys,
        m: &Map,
        p: &Path<'_>,
        ctx: &mut Ctx,
    ) -> Result<(), Fail> {
        let mut required_found = 0;
        if o.checks_keys() || o.required_props > 0 {
            for (key, value) in &m.0 {
                let child = p.child(Seg::Key(key));
                match o.lookup(key) {
                    Some(i) => {
                        let (_, id, required) = &o.properties[i];
                        required_found += usize::from(*required);
                        self.eval_child(*id, value, &child, ctx)?;
                    }
                    None => match o.additional {
                        Extra::Any => {}
                        Extra::Forbid => {
                            return Err(self.fail_message(
                                ctx,
                                &child,
                                A::UnknownArgument,
                                |path| {
                                    if p.is_root() {
                                        format!("unknown argument '{path}'")
                                    } else {
                                        format!(
                                            "argument '{}': unknown key '{}'",
                                            p.render(),
                                            cut(key)
                                        )
                                    }
                                },
                            ));
                        }
                        Extra::Schema(id) => self.eval_child(id, value, &child, ctx)?,
                    },
                }
            }
        }
        if (required_found < o.required_props || o.required.len() > o.required_props)
            && let Some(missing) = o.required.iter().find(|name| m.get(name).is_none())
        {
            let child = p.child(Seg::Key(missing));
            return Err(self.fail_message(ctx, &child, A::MissingArgument, |path| {
                if p.is_root() {
                    format!("missing required argument '{path}'")
                } else {
                    format!(
                        "argument '{}': missing required key '{}'",
                        p.render(),
                        cut(missing)
                    )
                }
            }));
        }
        let (what, one) = if p.is_root() {
            ("arguments", "argument")
        } else {
            ("keys", "key")
        };
        let n = m.len() as u64;
        if let Some(min) = o.min.filter(|&min| n < min) {
            return Err(self.fail(ctx, p, A::Length, 0, || {
                format!(
                    "must have at least {min} {}, got {n}",
                    if min == 1 { one } else { what }
                )
            }));
        }
        if let Some(max) = o.max.filter(|&max| n > max) {
            return Err(self.fail(ctx, p, A::Length, 0, || {
                format!(
                    "must have at most {max} {}, got {n}",
                    if max == 1 { one } else { what }
                )
            }));
        }
        Ok(())
    }

    fn eval_array(
        &self,
        ar: &ArrayKeys,
        a: &[Value],
        p: &Path<'_>,
        ctx: &mut Ctx,
    ) -> Result<(), Fail> {
        let n = a.len() as u64;
        let items = |count: u64| if count == 1 { "item" } else { "items" };
        let forbids_rest = ar.items == Extra::Forbid && a.len() > ar.prefix.len();
        let max = if forbids_rest {
            Some(
                ar.max
                    .map_or(ar.prefix.len() as u64, |m| m.min(ar.prefix.len() as u64)),
            )
        } else {
            ar.max
        };
        if let Some(min) = ar.min.filter(|&min| n < min) {
            return Err(self.fail(ctx, p, A::Length, 0, || {
                format!("must have at least {min} {}, got {n}", items(min))
            }));
        }
        if let Some(max) = max.filter(|&max| n > max) {
            return Err(self.fail(ctx, p, A::Length, 0, || {
                format!("must have at most {max} {}, got {n}", items(max))
            }));
        }
        for (i, value) in a.iter().enumerate() {
            let id = match ar.prefix.get(i) {
                Some(&id) => id,
                None => match ar.items {
                    Extra::Schema(id) => id,
                    // `Forbid` past the prefix was refused above.
                    Extra::Any | Extra::Forbid => break,
                },
            };
            self.eval_child(id, value, &p.child(Seg::Index(i)), ctx)?;
        }
        if ar.unique
            && let Some((i, j)) = self.duplicate(a, ctx)?
        {
            return Err(self.fail(ctx, p, A::NotUnique, 0, || {
                format!("items {i} and {j} are equal; items must be unique")
            }));
        }
        Ok(())
    }

    /// The first pair of equal items: the smallest `j` equal to an earlier item, and the
    /// first item `i` it equals. Linear in the array (expected): each item is hashed once
    /// and compared only with the first items of its hash's equal classes, so an array of
    /// 90,000 equal items costs one comparison, not 4 billion. `Err` when the check is
    /// aborted (past its step bound, or stopped).
    fn duplicate(&self, a: &[Value], ctx: &mut Ctx<'_>) -> Result<Option<(usize, usize)>, Fail> {
        if a.len() <= PAIRWISE_UNIQUE {
            if !ctx.charge((a.len() * a.len() / 2) as u64) {
                return Err(ABORTED);
            }
            for j in 1..a.len() {
                for i in 0..j {
                    if instance::eq(Inst::of(&a[i]), Inst::of(&a[j])) {
                        return Ok(Some((i, j)));
                    }
                }
            }
            return Ok(None);
        }
        // Hash → the first item with that hash; `more` holds the first items of further
        // classes with a hash already taken (distinct values collide only by chance: the
        // hasher is keyed per schema, so a guest cannot aim for it).
        let mut first: HashMap<u64, usize, BuildHasherDefault<KeyedHash>> =
            HashMap::with_capacity_and_hasher(a.len(), BuildHasherDefault::default());
        let mut more: Vec<(u64, usize)> = Vec::new();
        for (j, v) in a.iter().enumerate() {
            if !ctx.charge(1) {
                return Err(ABORTED);
            }
            let h = instance::hash(Inst::of(v), &self.hasher);
            let same = |&i: &usize| instance::eq(Inst::of(&a[i]), Inst::of(v));
            match first.entry(h) {
                Entry::Vacant(e) => {
                    e.insert(j);
                }
                Entry::Occupied(e) => {
                    if !ctx.charge(1 + more.len() as u64) {
                        return Err(ABORTED);
                    }
                    if same(e.get()) {
                        return Ok(Some((*e.get(), j)));
                    }
                    if let Some(&(_, i)) = more.iter().find(|(g, i)| *g == h && same(i)) {
                        return Ok(Some((i, j)));
                    }
                    more.push((h, j));
                }
            }
        }
        Ok(None)
    }

    fn eval_number(
        &self,
        nk: &NumberKeys,
        n: NumRef<'_>,
        p: &Path<'_>,
        ctx: &mut Ctx,
    ) -> Result<(), Fail> {
        let checks = [
            (nk.minimum, Ordering::Less, Ordering::Less, "at least"),
            (nk.maximum, Ordering::Greater, Ordering::Greater, "at most"),
            (
                nk.exclusive_minimum,
                Ordering::Less,
                Ordering::Equal,
                "greater than",
            ),
            (
                nk.exclusive_maximum,
                Ordering::Greater,
                Ordering::Equal,
                "less than",
            ),
        ];
        for (bound, bad, also_bad, words) in checks {
            if let Some(b) = bound {
                let o = num::cmp(n, b.as_ref());
                if o == bad || o == also_bad {
                    return Err(self.fail(ctx, p, A::OutOfRange, 0, || {
                        format!("must be {words} {b}, got {}", cut(&n.to_string()))
                    }));
                }
            }
        }
        if let Some(d) = nk.multiple_of
            && !num::is_multiple(n, d)
        {
            return Err(self.fail(ctx, p, A::NotMultiple, 0, || {
                format!("must be a multiple of {d}, got {}", cut(&n.to_string()))
            }));
        }
        Ok(())
    }

    /// `len` is given for bytes (their base64 text's length); `text` is only needed for a pattern.
    fn eval_string(
        &self,
        sk: &StringKeys,
        text: &str,
        len: Option<usize>,
        p: &Path<'_>,
        ctx: &mut Ctx,
    ) -> Result<(), Fail> {
        // Counting characters and matching a pattern read the whole text.
        if !ctx.charge(1 + text.len() as u64 / TEXT_BYTES_PER_STEP) {
            return Err(ABORTED);
        }
        if sk.min.is_some() || sk.max.is_some() {
            let n = len.unwrap_or_else(|| text.chars().count()) as u64;
            let chars = |count: u64| {
                if count == 1 {
                    "character"
                } else {
                    "characters"
                }
            };
            if let Some(min) = sk.min.filter(|&min| n < min) {
                return Err(self.fail(ctx, p, A::Length, 0, || {
                    format!("must be at least {min} {} long, got {n}", chars(min))
                }));
            }
            if let Some(max) = sk.max.filter(|&max| n > max) {
                return Err(self.fail(ctx, p, A::Length, 0, || {
                    format!("must be at most {max} {} long, got {n}", chars(max))
                }));
            }
        }
        if let Some((re, source)) = &sk.pattern
            && !re.is_match(text)
        {
            return Err(self.fail(ctx, p, A::Pattern, 0, || {
                format!("does not match the pattern {}", Value2Json(source))
            }));
        }
        Ok(())
    }
}

fn type_ok(types: u16, base64: bool, v: Inst<'_>) -> bool {
    let need = match v {
        Inst::Null => ty::NULL,
        Inst::Bool(_) => ty::BOOL,
        Inst::Num(_, instance::NumKind::Integer) => ty::INT | ty::NUM,
        Inst::Num(_, instance::NumKind::Float) => ty::NUM,
        Inst::Str(_) => ty::STR,
        Inst::Bytes(_) if base64 => ty::STR,
        Inst::Bytes(_) => 0,
        Inst::Array(_) => ty::ARR,
        Inst::Object(_) => ty::OBJ,
        Inst::Other => 0,
    };
    types & need != 0
}

/// The error of a check that ended before its verdict.
fn aborted(kind: A, bounds: &Bounds<'_>) -> ArgumentError {
    let message = match kind {
        A::TooComplex => format!(
            "too complex to check: checking them against the input schema took more than {} steps",
            bounds.max_steps
        ),
        A::Stopped => "not checked: the run was stopped (its deadline or cancel) while they were checked".into(),
        _ => format!(
            "the arguments nest deeper than {MAX_NESTING} levels, or recurse deeper than the input schema allows"
        ),
    };
    ArgumentError::new(kind, String::new(), message)
}

/// The map's keys are hashes already keyed (`InputSchema::hasher`): used as they are.
#[derive(Default)]
struct KeyedHash(u64);

impl std::hash::Hasher for KeyedHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys are hashed")
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The path of the first bytes value not among `marks` (sorted), if any.
fn unmarked_bytes_in_map(m: &Map, marks: &[usize], p: &Path<'_>) -> Option<String> {
    m.0.iter()
        .find_map(|(k, v)| unmarked_bytes(v, marks, &p.child(Seg::Key(k))))
}

fn unmarked_bytes(v: &Value, marks: &[usize], p: &Path<'_>) -> Option<String> {
    match v {
        Value::Bytes(_) => marks
            .binary_search(&(std::ptr::from_ref(v) as usize))
            .is_err()
            .then(|| p.render()),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| unmarked_bytes(x, marks, &p.child(Seg::Index(i)))),
        Value::Object(m) => unmarked_bytes_in_map(m, marks, p),
        _ => None,
    }
}
