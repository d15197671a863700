//! A small schema grammar whose schemas nearly always compile, arguments from small alphabets
//! so that bounds and values meet, and a differential check against the `jsonschema` crate.
//!
//! The grammar follows `crates/schema/tests/it/differential.rs` (the same keyword pools), but
//! the `$defs` may refer to each other and to themselves (pydantic's recursive models), and
//! nesting goes deeper. In differential mode (chosen by the input's first byte) nothing a
//! documented deviation covers is generated: no bytes, no big integers, no integer-valued
//! floats, no `contentEncoding`, only patterns on which the `regex` crate and ECMA-262 agree.
//! A refusal for depth (`TooDeep`, or a work budget's kind) is a limit, not a verdict, and
//! is not compared. Otherwise the arguments may hold anything a frame can.

use arbitrary::{Result, Unstructured};
use serde_json::{Map as JMap, Value as J, json};
use wasi_python_protocol::{Map, Value};
use wasi_python_schema::{ArgumentError, ArgumentErrorKind, InputSchema, Options};

const KEYS: [&str; 4] = ["a", "b", "c", "x"];
const TYPES: [&str; 7] = ["null", "boolean", "integer", "number", "string", "array", "object"];
/// The differential tests' patterns: the two engines agree on these.
const SAFE_PATTERNS: [&str; 6] = ["^a", "b$", "[0-9]", "^[a-z]*$", "é", "^.{2}$"];
const OTHER_PATTERNS: [&str; 5] = ["^\\w+$", "\\d", "^(a|b)*c?$", "^(a+)+$", "^[^é]*$"];
const FLOATS: [f64; 8] = [0.5, 1.5, 2.5, -0.5, 0.1, 0.3, 0.35, 0.25];
const STRINGS: [&str; 10] = ["", "a", "ab", "abc", "é", "aé", "b1", "AP8=", "12", "😀"];

struct Gen {
    /// Differential mode: nothing a documented deviation covers.
    diff: bool,
    budget: usize,
}

impl Gen {
    fn number(&self, u: &mut Unstructured<'_>) -> Result<J> {
        Ok(match u.int_in_range(0..=if self.diff { 1 } else { 3 })? {
            0 => J::from(u.int_in_range(-1i64..=3)?),
            1 => J::from(*u.choose(&FLOATS)?),
            2 => J::from(*u.choose(&[1.0, -3.0, 1e300, 9_007_199_254_740_993.0])?),
            _ => J::from(*u.choose(&[u64::MAX, i64::MAX as u64, 9_007_199_254_740_993])?),
        })
    }

    fn scalar(&self, u: &mut Unstructured<'_>) -> Result<J> {
        Ok(match u.int_in_range(0..=3)? {
            0 => J::Null,
            1 => J::Bool(u.arbitrary()?),
            2 => self.number(u)?,
            _ => J::from(*u.choose(&STRINGS)?),
        })
    }

    /// A JSON value (for `const` and the differential arguments), at most 4 levels.
    fn value(&self, u: &mut Unstructured<'_>, depth: usize) -> Result<J> {
        if depth >= 4 || u.ratio(3, 5)? {
            return self.scalar(u);
        }
        let n = u.int_in_range(0..=3)?;
        Ok(if u.arbitrary()? {
            J::Array((0..n).map(|_| self.value(u, depth + 1)).collect::<Result<_>>()?)
        } else {
            let mut m = JMap::new();
            for _ in 0..n {
                m.insert((*u.choose(&KEYS)?).to_owned(), self.value(u, depth + 1)?);
            }
            J::Object(m)
        })
    }

    fn leaf(&self, u: &mut Unstructured<'_>) -> Result<J> {
        Ok(match u.int_in_range(0..=12)? {
            0 => json!({ "type": *u.choose(&TYPES)? }),
            1 => {
                let (a, b) = (*u.choose(&TYPES)?, *u.choose(&TYPES)?);
                if a == b { json!({ "type": a }) } else { json!({ "type": [a, b] }) }
            }
            2 => {
                let k = *u.choose(&["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"])?;
                json!({ k: self.number(u)? })
            }
            3 => json!({ "multipleOf": *u.choose(&[1.0, 2.0, 3.0, 0.5, 0.25, 0.1, 1.5])? }),
            4 => {
                let k = *u.choose(&["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"])?;
                json!({ k: u.int_in_range(0u64..=3)? })
            }
            5 => {
                let p = if self.diff || u.arbitrary()? { *u.choose(&SAFE_PATTERNS)? } else { *u.choose(&OTHER_PATTERNS)? };
                json!({ "pattern": p })
            }
            6 => {
                let n = u.int_in_range(0..=3)?;
                json!({ "enum": (0..n).map(|_| self.scalar(u)).collect::<Result<Vec<_>>>()? })
            }
            7 => json!({ "const": self.value(u, 1)? }),
            8 => json!({ "uniqueItems": u.arbitrary::<bool>()? }),
            9 => {
                let r: Vec<&str> = KEYS.iter().copied().filter(|_| u.ratio(1, 3).unwrap_or(false)).collect();
                json!({ "required": r })
            }
            10 => u.choose(&[json!(true), json!(false), json!({})])?.clone(),
            11 if !self.diff => json!({ "type": "string", "contentEncoding": "base64" }),
            _ => json!({ "$ref": *u.choose(&["#/$defs/d0", "#/$defs/d1"])? }),
        })
    }

    /// One to three leaves in one schema object (the first one's keywords win).
    fn flat(&self, u: &mut Unstructured<'_>) -> Result<J> {
        let mut s = self.leaf(u)?;
        for _ in 0..u.int_in_range(0..=2)? {
            s = merge(s, self.leaf(u)?);
        }
        Ok(s)
    }

    fn schema(&mut self, u: &mut Unstructured<'_>, depth: usize) -> Result<J> {
        if depth >= 6 || self.budget == 0 || u.ratio(2, 5)? {
            return self.flat(u);
        }
        self.budget -= 1;
        let list = |g: &mut Gen, u: &mut Unstructured<'_>| -> Result<Vec<J>> {
            let n = u.int_in_range(1..=3)?;
            (0..n).map(|_| g.schema(u, depth + 1)).collect()
        };
        Ok(match u.int_in_range(0..=7)? {
            0 => {
                let mut props = JMap::new();
                for _ in 0..u.int_in_range(0..=3)? {
                    props.insert((*u.choose(&KEYS)?).to_owned(), self.schema(u, depth + 1)?);
                }
                let mut s = json!({ "properties": props });
                if u.arbitrary()? {
                    s["additionalProperties"] = self.schema(u, depth + 1)?;
                }
                s
            }
            1 => json!({ "items": self.schema(u, depth + 1)? }),
            2 => {
                let p = list(self, u)?;
                if u.arbitrary()? { json!({ "prefixItems": p, "items": self.schema(u, depth + 1)? }) } else { json!({ "prefixItems": p }) }
            }
            3 => json!({ "anyOf": list(self, u)? }),
            4 => json!({ "oneOf": list(self, u)? }),
            5 => json!({ "allOf": list(self, u)? }),
            6 => json!({ "not": self.schema(u, depth + 1)? }),
            _ => {
                let inner = self.schema(u, depth + 1)?;
                merge(inner, self.leaf(u)?)
            }
        })
    }
}

fn merge(a: J, b: J) -> J {
    match (a, b) {
        (J::Object(mut a), J::Object(b)) => {
            for (k, v) in b {
                a.entry(k).or_insert(v);
            }
            J::Object(a)
        }
        (a, _) => a,
    }
}

/// JSON to a protocol value (objects exactly `{"$bytes": ...}` never arise from [`Gen::value`]).
fn to_value(j: &J) -> Value {
    match j {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::Int(i),
            (None, _) if n.is_u64() => Value::big_int(&n.to_string()).unwrap_or(Value::Null),
            (_, Some(f)) => Value::Float(f),
            _ => Value::Null,
        },
        J::String(s) => Value::Str(s.clone()),
        J::Array(a) => Value::Array(a.iter().map(to_value).collect()),
        J::Object(m) => Value::Object(Map(m.iter().map(|(k, v)| (k.clone(), to_value(v))).collect())),
    }
}

/// A refusal for a limit (depth, a work budget), not a verdict on the value.
fn is_limit(e: &ArgumentError) -> bool {
    matches!(e.kind(), ArgumentErrorKind::TooDeep | ArgumentErrorKind::TooComplex | ArgumentErrorKind::Stopped)
}

pub fn check(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let diff = u.arbitrary::<bool>()?;
    let mut g = Gen { diff, budget: 60 };
    let mut props = JMap::new();
    for key in ["x", "y"] {
        if key == "x" || u.arbitrary()? {
            props.insert(key.to_owned(), g.schema(u, 0)?);
        }
    }
    let d0 = g.schema(u, 1)?;
    let d1 = g.schema(u, 1)?;
    let mut root = json!({ "type": "object", "properties": props, "$defs": { "d0": d0, "d1": d1 } });
    if u.ratio(1, 4)? {
        root["required"] = json!(["x"]);
    }
    if u.ratio(1, 4)? {
        root["additionalProperties"] = g.schema(u, 1)?;
    }
    let validates_input = !diff && u.ratio(1, 8)?;
    let Ok(ours) = InputSchema::compile(&root, Options { validates_input }) else {
        return Ok(());
    };
    for _ in 0..4 {
        if diff {
            let mut instance = JMap::new();
            for key in ["x", "y", "a"] {
                if u.ratio(2, 3)? {
                    instance.insert(key.to_owned(), g.value(u, 1)?);
                }
            }
            let instance = J::Object(instance);
            let args = match to_value(&instance) {
                Value::Object(m) => m,
                _ => unreachable!(),
            };
            let verdict = ours.validate(&args);
            if verdict.as_ref().is_err_and(is_limit) {
                continue;
            }
            let theirs = jsonschema::draft202012::new(&root)
                .unwrap_or_else(|e| panic!("jsonschema refuses a schema we compiled: {e}\n{root}"));
            let theirs = theirs.is_valid(&instance);
            assert_eq!(
                verdict.is_ok(),
                theirs,
                "verdicts differ (ours {verdict:?}, jsonschema {theirs})\nschema {root}\nvalue {instance}"
            );
        } else {
            let args = crate::json::args(u)?;
            let mut args = args;
            if u.arbitrary()? {
                // Parameters the schema names, so that its keywords are reached.
                for key in ["x", "y"] {
                    if !args.contains_key(key) {
                        args.push(key, crate::json::arg_value(u, 2)?);
                    }
                }
            }
            let _ = ours.validate(&args);
            let _ = ours.validate_with_fixed(&args, &["y"]);
        }
    }
    Ok(())
}
