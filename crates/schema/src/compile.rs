//! From a JSON input schema to the compiled node graph that validation walks.

use std::collections::HashMap;

use regex::Regex;
use serde_json::Value as J;

use crate::error::{SchemaError, SchemaErrorKind as K};
use crate::num::Num;
use crate::{InputSchema, Options};

pub(crate) type NodeId = u32;

/// The root schema's node.
pub(crate) const ROOT: NodeId = 0;

/// How deep the compiler follows a schema's own JSON nesting.
const MAX_SCHEMA_DEPTH: usize = 128;

/// Type bits, for `type` and for the "expected ..." of a message.
pub(crate) mod ty {
    pub(crate) const NULL: u16 = 1;
    pub(crate) const BOOL: u16 = 2;
    pub(crate) const INT: u16 = 4;
    pub(crate) const NUM: u16 = 8;
    pub(crate) const STR: u16 = 16;
    pub(crate) const ARR: u16 = 32;
    pub(crate) const OBJ: u16 = 64;
    /// Only in "expected": a string schema with `contentEncoding: "base64"` also takes bytes.
    pub(crate) const BYTES: u16 = 128;

    pub(crate) fn of_name(name: &str) -> Option<u16> {
        Some(match name {
            "null" => NULL,
            "boolean" => BOOL,
            "integer" => INT,
            "number" => NUM,
            "string" => STR,
            "array" => ARR,
            "object" => OBJ,
            _ => return None,
        })
    }

    /// `"an integer or null"`.
    pub(crate) fn describe(set: u16) -> String {
        let names: Vec<&str> = [
            (BOOL, "a boolean"),
            (INT, "an integer"),
            (NUM, "a number"),
            (STR, "a string"),
            (BYTES, "bytes"),
            (ARR, "an array"),
            (OBJ, "an object"),
            (NULL, "null"),
        ]
        .into_iter()
        .filter(|&(bit, _)| set & bit != 0 && !(bit == INT && set & NUM != 0))
        .map(|(_, name)| name)
        .collect();
        match names.split_last() {
            None => "nothing".to_owned(),
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Bool(bool),
    Keys(Box<Keys>),
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Keys {
    pub(crate) types: Option<u16>,
    /// `contentEncoding: "base64"`.
    pub(crate) base64: bool,
    pub(crate) enum_: Option<Vec<J>>,
    pub(crate) const_: Option<J>,
    pub(crate) object: Option<Box<ObjectKeys>>,
    pub(crate) array: Option<Box<ArrayKeys>>,
    pub(crate) number: Option<Box<NumberKeys>>,
    pub(crate) string: Option<Box<StringKeys>>,
    pub(crate) ref_: Option<NodeId>,
    pub(crate) all_of: Vec<NodeId>,
    pub(crate) any_of: Vec<NodeId>,
    pub(crate) one_of: Vec<NodeId>,
    pub(crate) not: Option<NodeId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extra {
    /// Anything (`true`, absent, or not checked because of ignored `patternProperties`).
    Any,
    /// `false`.
    Forbid,
    Schema(NodeId),
}

#[derive(Debug, Clone)]
pub(crate) struct ObjectKeys {
    /// Whether the `properties` keyword is present (even if empty).
    pub(crate) has_properties: bool,
    /// Name, schema, and whether `required` names it.
    pub(crate) properties: Vec<(Box<str>, NodeId, bool)>,
    /// Name -> index into `properties`, when there are many.
    pub(crate) index: Option<HashMap<Box<str>, usize>>,
    pub(crate) required: Vec<Box<str>>,
    /// How many `required` names are properties; the others are looked up one by one.
    pub(crate) required_props: usize,
    pub(crate) additional: Extra,
    pub(crate) min: Option<u64>,
    pub(crate) max: Option<u64>,
}

impl ObjectKeys {
    pub(crate) fn lookup(&self, key: &str) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(key).copied(),
            None => self
                .properties
                .iter()
                .position(|(name, _, _)| &**name == key),
        }
    }

    pub(crate) fn checks_keys(&self) -> bool {
        !self.properties.is_empty() || self.additional != Extra::Any
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ArrayKeys {
    pub(crate) prefix: Vec<NodeId>,
    pub(crate) items: Extra,
    pub(crate) min: Option<u64>,
    pub(crate) max: Option<u64>,
    pub(crate) unique: bool,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct NumberKeys {
    pub(crate) minimum: Option<Num>,
    pub(crate) maximum: Option<Num>,
    pub(crate) exclusive_minimum: Option<Num>,
    pub(crate) exclusive_maximum: Option<Num>,
    pub(crate) multiple_of: Option<Num>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct StringKeys {
    pub(crate) min: Option<u64>,
    pub(crate) max: Option<u64>,
    pub(crate) pattern: Option<(Regex, Box<str>)>,
}

/// Properties beyond this many are found through a hash map.
const INDEX_FROM: usize = 9;

/// Python's keywords (3.15); soft keywords (`match`, `case`, `type`, `_`) are fine as names.
const PYTHON_KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Annotations: accepted anywhere, never asserted, their values not checked.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "format",
    "contentMediaType",
];

pub(crate) fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn err(kind: K, pointer: &str, message: impl Into<String>) -> SchemaError {
    SchemaError::new(kind, pointer, message.into())
}

fn malformed(pointer: &str, keyword: &str, takes: &str) -> SchemaError {
    err(K::Malformed, pointer, format!("'{keyword}' takes {takes}"))
}

struct Compiler {
    opts: Options,
    nodes: Vec<Option<Node>>,
    pointers: Vec<String>,
    defs: HashMap<(&'static str, String), NodeId>,
}

pub(crate) fn compile(schema: &J, opts: Options) -> Result<InputSchema, SchemaError> {
    let Some(root) = schema.as_object() else {
        return Err(err(
            K::NotAnObject,
            "",
            "the input schema must be a JSON object",
        ));
    };
    let mut c = Compiler {
        opts,
        nodes: Vec::new(),
        pointers: Vec::new(),
        defs: HashMap::new(),
    };
    let root_id = c.reserve(String::new());
    debug_assert_eq!(root_id, ROOT);

    // Reserve every definition first, so `$ref`s resolve wherever they appear.
    let mut pending = Vec::new();
    for section in ["$defs", "definitions"] {
        let Some(defs) = root.get(section) else {
            continue;
        };
        let pointer = format!("/{section}");
        let Some(defs) = defs.as_object() else {
            return Err(malformed(&pointer, section, "an object of schemas"));
        };
        for (name, sub) in defs {
            let pointer = format!("{pointer}/{}", escape(name));
            let id = c.reserve(pointer.clone());
            c.defs.insert((section, name.clone()), id);
            pending.push((id, sub, pointer));
        }
    }
    c.fill(ROOT, schema, "", 0)?;
    for (id, sub, pointer) in pending {
        c.fill(id, sub, &pointer, 1)?;
    }
    let nodes: Vec<Node> = c
        .nodes
        .into_iter()
        .map(|n| n.unwrap_or(Node::Bool(true)))
        .collect();
    check_cycles(&nodes, &c.pointers)?;
    let (property_names, required) = top_level(&nodes, &c.pointers)?;
    Ok(InputSchema::from_parts(nodes, property_names, required))
}

impl Compiler {
    fn reserve(&mut self, pointer: String) -> NodeId {
        self.nodes.push(None);
        self.pointers.push(pointer);
        NodeId::try_from(self.nodes.len() - 1).unwrap_or(NodeId::MAX)
    }

    fn sub(&mut self, v: &J, pointer: String, depth: usize) -> Result<NodeId, SchemaError> {
        let id = self.reserve(pointer.clone());
        self.fill(id, v, &pointer, depth)?;
        Ok(id)
    }

    fn subs(
        &mut self,
        v: &J,
        pointer: &str,
        keyword: &str,
        depth: usize,
    ) -> Result<Vec<NodeId>, SchemaError> {
        match v.as_array() {
            Some(list) if !list.is_empty() => list
                .iter()
                .enumerate()
                .map(|(i, s)| self.sub(s, format!("{pointer}/{i}"), depth + 1))
                .collect(),
            _ => Err(malformed(pointer, keyword, "a non-empty array of schemas")),
        }
    }

    fn extra(&mut self, v: &J, pointer: &str, depth: usize) -> Result<Extra, SchemaError> {
        Ok(match v {
            J::Bool(true) => Extra::Any,
            J::Bool(false) => Extra::Forbid,
            _ => Extra::Schema(self.sub(v, pointer.to_owned(), depth + 1)?),
        })
    }

    fn fill(&mut self, id: NodeId, v: &J, pointer: &str, depth: usize) -> Result<(), SchemaError> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(err(
                K::TooDeep,
                pointer,
                format!("the schema nests deeper than {MAX_SCHEMA_DEPTH} levels"),
            ));
        }
        let node = match v {
            J::Bool(b) => Node::Bool(*b),
            J::Object(map) => Node::Keys(Box::new(self.keys(map, pointer, depth)?)),
            _ => {
                return Err(err(
                    K::Malformed,
                    pointer,
                    "a schema must be an object or a boolean",
                ));
            }
        };
        self.nodes[id as usize] = Some(node);
        Ok(())
    }

    fn keys(
        &mut self,
        map: &serde_json::Map<String, J>,
        pointer: &str,
        depth: usize,
    ) -> Result<Keys, SchemaError> {
        let is_root = pointer.is_empty();
        let mut k = Keys::default();
        let mut object = ObjectKeys {
            has_properties: false,
            properties: Vec::new(),
            index: None,
            required: Vec::new(),
            required_props: 0,
            additional: Extra::Any,
            min: None,
            max: None,
        };
        let mut has_object = false;
        let mut array = ArrayKeys {
            prefix: Vec::new(),
            items: Extra::Any,
            min: None,
            max: None,
            unique: false,
        };
        let mut has_array = false;
        let mut number = NumberKeys::default();
        let mut has_number = false;
        let mut string = StringKeys::default();
        let mut has_string = false;
        let mut pattern_properties = false;

        for (key, value) in map {
            let at = format!("{pointer}/{}", escape(key));
            let at = at.as_str();
            match key.as_str() {
                a if ANNOTATIONS.contains(&a) => {}
                "$defs" | "definitions" | "$id" if is_root => {}
                "type" => k.types = Some(types(value, at)?),
                "enum" => match value.as_array() {
                    Some(list) => k.enum_ = Some(list.clone()),
                    None => return Err(malformed(at, key, "an array")),
                },
                "const" => k.const_ = Some(value.clone()),
                "properties" => {
                    let Some(props) = value.as_object() else {
                        return Err(malformed(at, key, "an object of schemas"));
                    };
                    object.has_properties = true;
                    for (name, sub) in props {
                        let id = self.sub(sub, format!("{at}/{}", escape(name)), depth + 1)?;
                        object.properties.push((name.as_str().into(), id, false));
                    }
                    has_object = true;
                }
                "required" => {
                    let names = value.as_array().and_then(|list| {
                        list.iter()
                            .map(|n| n.as_str().map(Box::<str>::from))
                            .collect::<Option<Vec<_>>>()
                    });
                    let Some(names) = names else {
                        return Err(malformed(at, key, "an array of strings"));
                    };
                    for (i, name) in names.iter().enumerate() {
                        if names[..i].contains(name) {
                            return Err(err(
                                K::Malformed,
                                &format!("{at}/{i}"),
                                format!("'required' names '{name}' twice"),
                            ));
                        }
                    }
                    object.required = names;
                    has_object = true;
                }
                "additionalProperties" => {
                    object.additional = self.extra(value, at, depth)?;
                    has_object = true;
                }
                "minProperties" => {
                    object.min = Some(count(value, at, key)?);
                    has_object = true;
                }
                "maxProperties" => {
                    object.max = Some(count(value, at, key)?);
                    has_object = true;
                }
                "items" => {
                    array.items = self.extra(value, at, depth)?;
                    has_array = true;
                }
                "prefixItems" => {
                    array.prefix = self.subs(value, at, key, depth)?;
                    has_array = true;
                }
                "minItems" => {
                    array.min = Some(count(value, at, key)?);
                    has_array = true;
                }
                "maxItems" => {
                    array.max = Some(count(value, at, key)?);
                    has_array = true;
                }
                "uniqueItems" => {
                    array.unique = value
                        .as_bool()
                        .ok_or_else(|| malformed(at, key, "a boolean"))?;
                    has_array = true;
                }
                "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf" => {
                    let n = value
                        .as_number()
                        .and_then(Num::of_json)
                        .ok_or_else(|| malformed(at, key, "a number"))?;
                    let slot = match key.as_str() {
                        "minimum" => &mut number.minimum,
                        "maximum" => &mut number.maximum,
                        "exclusiveMinimum" => &mut number.exclusive_minimum,
                        "exclusiveMaximum" => &mut number.exclusive_maximum,
                        _ => {
                            if !n.is_positive() {
                                return Err(malformed(at, key, "a number greater than 0"));
                            }
                            &mut number.multiple_of
                        }
                    };
                    *slot = Some(n);
                    has_number = true;
                }
                "minLength" => {
                    string.min = Some(count(value, at, key)?);
                    has_string = true;
                }
                "maxLength" => {
                    string.max = Some(count(value, at, key)?);
                    has_string = true;
                }
                "pattern" => {
                    let Some(text) = value.as_str() else {
                        return Err(malformed(at, key, "a string"));
                    };
                    let re = Regex::new(text).map_err(|e| {
                        err(
                            K::BadPattern,
                            at,
                            format!("'pattern' is not a valid regular expression: {e}"),
                        )
                    })?;
                    string.pattern = Some((re, text.into()));
                    has_string = true;
                }
                "contentEncoding" => match value.as_str() {
                    Some("base64") => k.base64 = true,
                    Some(other) => {
                        return Err(err(
                            K::UnsupportedEncoding,
                            at,
                            format!(
                                "'contentEncoding' \"{other}\" is not supported; only \"base64\" is"
                            ),
                        ));
                    }
                    None => return Err(malformed(at, key, "a string")),
                },
                "allOf" => k.all_of = self.subs(value, at, key, depth)?,
                "anyOf" => k.any_of = self.subs(value, at, key, depth)?,
                "oneOf" => k.one_of = self.subs(value, at, key, depth)?,
                "not" => k.not = Some(self.sub(value, at.to_owned(), depth + 1)?),
                "$ref" => {
                    let Some(target) = value.as_str() else {
                        return Err(malformed(at, key, "a string"));
                    };
                    k.ref_ = Some(self.resolve(target).ok_or_else(|| {
                        err(
                            K::UnresolvedRef,
                            at,
                            format!(
                                "'$ref' \"{target}\" is not one of this schema's definitions; \
                                 only \"#\", \"#/$defs/<name>\" and \"#/definitions/<name>\" resolve"
                            ),
                        )
                    })?);
                }
                "patternProperties" if self.opts.validates_input => pattern_properties = true,
                _ if self.opts.validates_input => {}
                _ => {
                    return Err(err(
                        K::UnknownKeyword,
                        at,
                        format!(
                            "'{key}' is outside the protocol's JSON Schema subset (validates_input=True lets it through)"
                        ),
                    ));
                }
            }
        }

        if has_object {
            for (name, _, required) in &mut object.properties {
                *required = object.required.contains(name);
            }
            object.required_props = object.properties.iter().filter(|p| p.2).count();
            if object.properties.len() >= INDEX_FROM {
                object.index = Some(
                    object
                        .properties
                        .iter()
                        .enumerate()
                        .map(|(i, p)| (p.0.clone(), i))
                        .collect(),
                );
            }
            if pattern_properties {
                // The ignored `patternProperties` decides which keys count as additional.
                object.additional = Extra::Any;
            }
            k.object = Some(Box::new(object));
        }
        if has_array {
            k.array = Some(Box::new(array));
        }
        if has_number {
            k.number = Some(Box::new(number));
        }
        if has_string {
            k.string = Some(Box::new(string));
        }
        Ok(k)
    }

    /// `#`, `#/$defs/<name>` or `#/definitions/<name>` (a URI fragment holding a JSON pointer).
    fn resolve(&self, target: &str) -> Option<NodeId> {
        let fragment = percent_decode(target.strip_prefix('#')?)?;
        if fragment.is_empty() {
            return Some(ROOT);
        }
        let mut tokens = fragment.strip_prefix('/')?.split('/');
        let section = match tokens.next()? {
            "$defs" => "$defs",
            "definitions" => "definitions",
            _ => return None,
        };
        let name = tokens.next()?.replace("~1", "/").replace("~0", "~");
        if tokens.next().is_some() {
            return None;
        }
        self.defs.get(&(section, name)).copied()
    }
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn types(v: &J, at: &str) -> Result<u16, SchemaError> {
    let one = |n: &J| -> Result<u16, SchemaError> {
        let name = n
            .as_str()
            .ok_or_else(|| malformed(at, "type", "a type name or an array of them"))?;
        ty::of_name(name).ok_or_else(|| {
            err(
                K::Malformed,
                at,
                format!("'type' \"{name}\" is not one of null, boolean, integer, number, string, array, object"),
            )
        })
    };
    match v {
        J::Array(list) if !list.is_empty() => {
            let mut set = 0;
            for n in list {
                let bit = one(n)?;
                if set & bit != 0 {
                    return Err(err(K::Malformed, at, "'type' names a type twice"));
                }
                set |= bit;
            }
            Ok(set)
        }
        J::Array(_) => Err(malformed(
            at,
            "type",
            "a type name or a non-empty array of them",
        )),
        _ => one(v),
    }
}

fn count(v: &J, at: &str, keyword: &str) -> Result<u64, SchemaError> {
    let n = match v.as_u64() {
        Some(n) => Some(n),
        None => v
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 18_446_744_073_709_551_616.0)
            .map(|f| f as u64),
    };
    n.ok_or_else(|| malformed(at, keyword, "a non-negative integer"))
}

/// `$ref`/`allOf`/`anyOf`/`oneOf`/`not` edges apply another schema to the same value; a loop of
/// them would never end.
fn check_cycles(nodes: &[Node], pointers: &[String]) -> Result<(), SchemaError> {
    fn edges(node: &Node) -> Vec<NodeId> {
        match node {
            Node::Bool(_) => Vec::new(),
            Node::Keys(k) => k
                .ref_
                .iter()
                .chain(&k.all_of)
                .chain(&k.any_of)
                .chain(&k.one_of)
                .chain(k.not.iter())
                .copied()
                .collect(),
        }
    }
    // 0 unvisited, 1 on the stack, 2 done.
    let mut state = vec![0u8; nodes.len()];
    for start in 0..nodes.len() {
        if state[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, Vec<NodeId>, usize)> = vec![(start, edges(&nodes[start]), 0)];
        state[start] = 1;
        while let Some((node, out, next)) = stack.last_mut() {
            if let Some(&to) = out.get(*next) {
                *next += 1;
                let to = to as usize;
                match state[to] {
                    0 => {
                        state[to] = 1;
                        stack.push((to, edges(&nodes[to]), 0));
                    }
                    1 => {
                        return Err(err(
                            K::RefCycle,
                            &pointers[*node],
                            format!(
                                "this schema applies '#{}' to the same value in a loop that never descends",
                                pointers[to]
                            ),
                        ));
                    }
                    _ => {}
                }
            } else {
                state[*node] = 2;
                stack.pop();
            }
        }
    }
    Ok(())
}

/// The top-level property names and required names.
type Top = (Vec<Box<str>>, Vec<Box<str>>);

/// The schema whose `properties` are the guest function's parameters: the root, or what the
/// root's `$ref` leads to when the root has neither `type` nor `properties` (pydantic emits
/// `{"$defs": ..., "$ref": "#/$defs/Model"}` for a recursive model).
fn top_level(nodes: &[Node], pointers: &[String]) -> Result<Top, SchemaError> {
    let not_object = || {
        err(
            K::NotAnObject,
            "",
            "the input schema must be an object schema (\"type\": \"object\", or \"properties\" without a type)",
        )
    };
    let mut id = ROOT;
    let mut hops = 0;
    let (keys, pointer) = loop {
        let Node::Keys(k) = &nodes[id as usize] else {
            return Err(not_object());
        };
        let has_properties = k.object.as_ref().is_some_and(|o| o.has_properties);
        match (k.types, k.ref_) {
            (Some(ty::OBJ), _) => break (k, &pointers[id as usize]),
            (None, _) if has_properties => break (k, &pointers[id as usize]),
            (None, Some(to)) if hops < nodes.len() => {
                id = to;
                hops += 1;
            }
            _ => return Err(not_object()),
        }
    };
    let Some(object) = &keys.object else {
        return Ok((Vec::new(), Vec::new()));
    };
    for (name, _, _) in &object.properties {
        let at = format!("{pointer}/properties/{}", escape(name));
        if !is_identifier(name) {
            return Err(err(
                K::NotAnIdentifier,
                &at,
                format!(
                    "the property name {} is not a Python identifier (ASCII letters, digits and '_', not starting with a digit)",
                    serde_json::Value::from(&**name)
                ),
            ));
        }
        if PYTHON_KEYWORDS.contains(&&**name) {
            return Err(err(
                K::PythonKeyword,
                &at,
                format!("the property name '{name}' is a Python keyword"),
            ));
        }
    }
    for (i, name) in object.required.iter().enumerate() {
        if object.lookup(name).is_none() {
            return Err(err(
                K::RequiredNotAProperty,
                &format!("{pointer}/required/{i}"),
                format!("'required' names '{name}', which is not one of the properties"),
            ));
        }
    }
    let names = object.properties.iter().map(|p| p.0.clone()).collect();
    Ok((names, object.required.clone()))
}
