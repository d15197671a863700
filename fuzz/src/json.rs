//! Arbitrary JSON biased toward the schema subset's keywords, and arbitrary arguments.
//!
//! [`SchemaJson`] reads an `Unstructured` as a schema: mostly objects whose keys are keywords
//! (in the subset, annotations, and some outside it) with values of the shape each keyword
//! wants, sometimes of another shape, sometimes a long chain (the compiler's depth limit).
//! [`args`] reads arguments as the request decoder would give them: the `Value` invariants
//! hold (finite floats, canonical big integers, unique keys, no `"$bytes"` key).

use arbitrary::{Arbitrary, Result, Unstructured};
use serde_json::{Map as JMap, Value as J};
use wasi_python_protocol::{Map, Value};
use wasi_python_schema::{InputSchema, Options};

/// Keywords of the subset, its annotations, and a few it refuses (outside the subset).
pub const KEYWORDS: &[&str] = &[
    "type", "properties", "required", "items", "prefixItems", "additionalProperties",
    "anyOf", "allOf", "oneOf", "not", "$ref", "$defs", "definitions", "enum", "const",
    "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
    "uniqueItems", "contentEncoding",
    // annotations
    "title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
    "writeOnly", "$schema", "format", "contentMediaType", "$id",
    // outside the subset
    "patternProperties", "if", "then", "else", "dependentRequired", "propertyNames",
    "contains", "unevaluatedProperties", "$anchor", "$dynamicRef",
];

const TYPES: &[&str] = &[
    "null", "boolean", "integer", "number", "string", "array", "object", "any", "int", "",
];

/// Property and def names: identifiers, keywords (Python's, soft ones), and bad names.
pub const NAMES: &[&str] = &[
    "a", "b", "x", "item", "qty", "_", "match", "type", "class", "def", "None", "lambda",
    "é", "1a", "a-b", "", " ", "$bytes", "d0", "d1", "A_9",
];

const REFS: &[&str] = &[
    "#", "#/$defs/a", "#/$defs/b", "#/$defs/d0", "#/definitions/a", "#/definitions/x",
    "#/$defs/missing", "#/properties/x", "#/$defs/", "#/$defs/a/properties/x", "a.json",
    "#a", "", "#/$defs/a~1b", "#/$defs/%61", "http://x/y#",
];

pub const PATTERNS: &[&str] = &[
    "^a", "b$", "[0-9]", "^[a-z]*$", "é", "^.{2}$", "^\\w+$", "\\d", "(a|b)*c", "",
    "(?=a)", "(a)\\1", "[", "a{2,1}", "(?i)ABC", "\\p{L}", "^(a+)+$", "a{1000}{1000}",
    "\\", "(?P<n>x)", "[[:alpha:]]", "\\u0041", "^\\/$",
];

fn pick<'a, T>(u: &mut Unstructured<'_>, from: &'a [T]) -> Result<&'a T> {
    u.choose(from)
}

fn string(u: &mut Unstructured<'_>, pool: &[&str]) -> Result<String> {
    Ok(if u.ratio(3, 4)? {
        (*pick(u, pool)?).to_owned()
    } else {
        let s: &str = u.arbitrary()?;
        s.chars().take(40).collect()
    })
}

fn number(u: &mut Unstructured<'_>) -> Result<J> {
    Ok(match u.int_in_range(0..=9)? {
        0..=3 => J::from(u.int_in_range(-2i64..=5)?),
        4 => J::from(*pick(u, &[0.5, 0.1, 0.3, 1.5, -0.5, 1e-300, 1e300, 2.0, 0.0, -0.0])?),
        5 => J::from(*pick(u, &[i64::MIN, i64::MAX, -1 << 53, 1 << 53])?),
        6 => J::from(u64::MAX),
        7 => J::from(u.arbitrary::<i64>()?),
        _ => J::from(u.arbitrary::<f64>()?), // NaN and infinities become null
    })
}

/// A JSON value of any shape (for keywords given the wrong shape, enum members, consts).
pub fn any_json(u: &mut Unstructured<'_>, depth: usize) -> Result<J> {
    let kinds = if depth >= 4 { 4 } else { 6 };
    Ok(match u.int_in_range(0..=kinds)? {
        0 => J::Null,
        1 => J::Bool(u.arbitrary()?),
        2 => number(u)?,
        3 | 4 => J::String(string(u, NAMES)?),
        5 => {
            let n = u.int_in_range(0..=3)?;
            J::Array((0..n).map(|_| any_json(u, depth + 1)).collect::<Result<_>>()?)
        }
        _ => {
            let mut m = JMap::new();
            for _ in 0..u.int_in_range(0..=3)? {
                m.insert(string(u, NAMES)?, any_json(u, depth + 1)?);
            }
            J::Object(m)
        }
    })
}

/// A schema, as a JSON value; `budget` bounds the number of schemas built.
struct Gen {
    budget: usize,
}

const MAX_DEPTH: usize = 10;

impl Gen {
    fn schema(&mut self, u: &mut Unstructured<'_>, depth: usize) -> Result<J> {
        if self.budget == 0 || depth >= MAX_DEPTH || u.is_empty() {
            return Ok(if u.arbitrary()? { J::Bool(true) } else { J::Object(JMap::new()) });
        }
        self.budget -= 1;
        Ok(match u.int_in_range(0..=15)? {
            0 => J::Bool(u.arbitrary()?),
            1 => any_json(u, depth)?,
            2 => self.chain(u)?,
            _ => {
                let mut m = JMap::new();
                for _ in 0..u.int_in_range(0..=5)? {
                    let key = if u.ratio(9, 10)? {
                        (*pick(u, KEYWORDS)?).to_owned()
                    } else {
                        string(u, NAMES)?
                    };
                    let value = self.keyword_value(u, &key, depth)?;
                    m.insert(key, value);
                }
                J::Object(m)
            }
        })
    }

    /// A single path of nesting up to 200 deep: `{"items": {"anyOf": [{"not": ...}]}}`.
    fn chain(&mut self, u: &mut Unstructured<'_>) -> Result<J> {
        let n = u.int_in_range(1..=200)?;
        let mut wraps = Vec::with_capacity(n);
        for _ in 0..n {
            wraps.push(*pick(u, &["items", "not", "anyOf", "allOf", "properties", "$defs"])?);
        }
        let mut inner = if u.arbitrary()? {
            J::Object(JMap::from_iter([("$ref".to_owned(), J::from("#"))]))
        } else {
            J::Object(JMap::from_iter([("type".to_owned(), J::from("string"))]))
        };
        for w in wraps.into_iter().rev() {
            inner = match w {
                "anyOf" | "allOf" => J::Object(JMap::from_iter([(w.to_owned(), J::Array(vec![inner]))])),
                "properties" | "$defs" => {
                    let named = J::Object(JMap::from_iter([("a".to_owned(), inner)]));
                    J::Object(JMap::from_iter([(w.to_owned(), named)]))
                }
                _ => J::Object(JMap::from_iter([(w.to_owned(), inner)])),
            };
        }
        Ok(inner)
    }

    fn schemas(&mut self, u: &mut Unstructured<'_>, depth: usize) -> Result<J> {
        let n = u.int_in_range(0..=4)?;
        Ok(J::Array((0..n).map(|_| self.schema(u, depth + 1)).collect::<Result<_>>()?))
    }

    fn named(&mut self, u: &mut Unstructured<'_>, depth: usize) -> Result<J> {
        let mut m = JMap::new();
        for _ in 0..u.int_in_range(0..=4)? {
            m.insert(string(u, NAMES)?, self.schema(u, depth + 1)?);
        }
        Ok(J::Object(m))
    }

    fn keyword_value(&mut self, u: &mut Unstructured<'_>, key: &str, depth: usize) -> Result<J> {
        if u.ratio(1, 10)? {
            return any_json(u, depth);
        }
        Ok(match key {
            "type" => {
                if u.arbitrary()? {
                    J::from(*pick(u, TYPES)?)
                } else {
                    let n = u.int_in_range(0..=4)?;
                    J::Array((0..n).map(|_| Ok(J::from(*pick(u, TYPES)?))).collect::<Result<_>>()?)
                }
            }
            "properties" | "$defs" | "definitions" | "patternProperties" => self.named(u, depth)?,
            "required" => {
                let n = u.int_in_range(0..=4)?;
                J::Array((0..n).map(|_| Ok(J::from(string(u, NAMES)?))).collect::<Result<_>>()?)
            }
            "items" | "additionalProperties" | "not" | "contains" | "propertyNames" | "if"
            | "then" | "else" | "unevaluatedProperties" => self.schema(u, depth + 1)?,
            "prefixItems" | "anyOf" | "allOf" | "oneOf" => self.schemas(u, depth)?,
            "$ref" | "$dynamicRef" => J::from(string(u, REFS)?),
            "enum" | "examples" => {
                let n = u.int_in_range(0..=4)?;
                J::Array((0..n).map(|_| any_json(u, depth + 1)).collect::<Result<_>>()?)
            }
            "const" | "default" => any_json(u, depth + 1)?,
            "pattern" => J::from(string(u, PATTERNS)?),
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf" => {
                number(u)?
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties"
            | "maxProperties" => match u.int_in_range(0..=5)? {
                0..=3 => J::from(u.int_in_range(0u64..=4)?),
                _ => number(u)?,
            },
            "uniqueItems" | "deprecated" | "readOnly" | "writeOnly" => J::Bool(u.arbitrary()?),
            "contentEncoding" => J::from(string(u, &["base64", "base32", "BASE64", "binary"])?),
            "dependentRequired" => {
                let mut m = JMap::new();
                m.insert(string(u, NAMES)?, J::Array(vec![J::from(string(u, NAMES)?)]));
                J::Object(m)
            }
            _ => J::from(string(u, &["x", "", "https://json-schema.org/draft/2020-12/schema"])?),
        })
    }

    /// Mostly an object schema with parameters, so that compiling gets past the root.
    fn root(&mut self, u: &mut Unstructured<'_>) -> Result<J> {
        if u.ratio(1, 4)? {
            return self.schema(u, 0);
        }
        let mut m = JMap::new();
        if u.ratio(7, 8)? {
            m.insert("type".into(), J::from("object"));
        }
        m.insert("properties".into(), self.named(u, 0)?);
        for _ in 0..u.int_in_range(0..=3)? {
            let key = *pick(u, &["required", "$defs", "additionalProperties", "$ref", "definitions", "anyOf", "title", "$id", "minProperties"])?;
            let value = self.keyword_value(u, key, 0)?;
            m.insert(key.to_owned(), value);
        }
        Ok(J::Object(m))
    }
}

/// A schema built from arbitrary bytes; see the module's doc.
#[derive(Debug, Clone)]
pub struct SchemaJson(pub J);

impl<'a> Arbitrary<'a> for SchemaJson {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Gen { budget: 400 }.root(u).map(SchemaJson)
    }
}

// ---- arguments ----

const BIG: &[&str] = &[
    "9223372036854775808", "-9223372036854775809", "18446744073709551616",
    "100000000000000000000", "-1000000000000000000000000000000",
];

/// One argument value, as the request decoder would produce it.
pub fn arg_value(u: &mut Unstructured<'_>, depth: usize) -> Result<Value> {
    let kinds = if depth >= 6 { 7 } else { 10 };
    Ok(match u.int_in_range(0..=kinds)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::Int(if u.arbitrary()? { u.int_in_range(-2..=5)? } else { u.arbitrary()? }),
        3 => {
            let f: f64 = if u.arbitrary()? { *pick(u, &[0.5, 1.0, 0.1, 0.3, -0.0, 2.5, 1e300])? } else { u.arbitrary()? };
            Value::Float(if f.is_finite() { f } else { 0.5 })
        }
        4 => {
            let text = if u.arbitrary()? {
                (*pick(u, BIG)?).to_owned()
            } else {
                let n = u.int_in_range(1..=64)?;
                let mut t: String = (0..n).map(|_| Ok(char::from(b'0' + u.int_in_range(0..=9)?))).collect::<Result<_>>()?;
                if u.arbitrary()? {
                    t.insert(0, '-');
                    t.truncate(64);
                }
                t
            };
            Value::big_int(&text).unwrap_or(Value::Int(0))
        }
        5 | 6 => Value::Str(string(u, &["", "a", "ab", "abc", "é", "😀", "AP8=", "12", "x y"])?),
        7 => {
            let n = u.int_in_range(0..=8)?;
            Value::Bytes((0..n).map(|_| u.arbitrary()).collect::<Result<_>>()?)
        }
        8 => {
            let n = u.int_in_range(0..=4)?;
            Value::Array((0..n).map(|_| arg_value(u, depth + 1)).collect::<Result<_>>()?)
        }
        9 => Value::Object(object(u, depth + 1)?),
        _ => {
            // A deep nest, past the 64 levels arguments may have.
            let n = u.int_in_range(1..=80)?;
            let mut v = Value::Null;
            for _ in 0..n {
                v = if u.arbitrary()? { Value::Array(vec![v]) } else { Value::Object(Map(vec![("a".into(), v)])) };
            }
            v
        }
    })
}

fn object(u: &mut Unstructured<'_>, depth: usize) -> Result<Map> {
    let mut m = Map::new();
    for _ in 0..u.int_in_range(0..=4)? {
        let key = string(u, NAMES)?;
        if key == "$bytes" || m.contains_key(&key) {
            continue;
        }
        m.push(key, arg_value(u, depth)?);
    }
    Ok(m)
}

/// A call's arguments: the frame's `args` object (level 1).
pub fn args(u: &mut Unstructured<'_>) -> Result<Map> {
    object(u, 1)
}

pub fn check(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(validates_input) = u.arbitrary::<bool>() else { return };
    let Ok(SchemaJson(schema)) = SchemaJson::arbitrary(&mut u) else { return };
    let Ok(compiled) = InputSchema::compile(&schema, Options { validates_input }) else {
        return;
    };
    let names: Vec<&str> = compiled.property_names().collect();
    for _ in 0..3 {
        let Ok(args) = args(&mut u) else { return };
        let _ = compiled.validate(&args);
        let _ = compiled.validate_with_fixed(&args, &names[..names.len().min(1)]);
    }
}
