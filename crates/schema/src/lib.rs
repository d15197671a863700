//! The tool protocol's JSON Schema subset: check a tool's input schema once, when the tool is
//! made ([`InputSchema::compile`]), then check each call's arguments against it
//! ([`InputSchema::validate`]).
//!
//! This crate does no I/O and knows neither wasmtime nor PyO3. It never panics on arguments:
//! they come from the guest, which is hostile. Schemas come from the embedder, which is trusted,
//! but a schema the subset cannot honour is refused rather than half-applied.
//!
//! # The schema
//!
//! The top level must be an object schema: `"type": "object"`, or no `type` and `properties`.
//! A root with neither but with a `$ref` (pydantic's shape for a recursive model) is followed to
//! the schema it names. That object's `properties` are the guest function's parameters, in
//! schema order ([`InputSchema::property_names`]), so their names must be ASCII Python
//! identifiers (`[A-Za-z_][A-Za-z0-9_]*`; a non-ASCII identifier is refused too) and not
//! Python keywords (soft keywords such as `match`, `type` and `_` are fine). Its `required`
//! names must be among its `properties`.
//!
//! Keywords of the subset (JSON Schema 2020-12 meanings):
//!
//! - annotations, accepted anywhere and never asserted: `title`, `description`, `default`,
//!   `examples`, `$comment`, `deprecated`, `readOnly`, `writeOnly`, `$schema`, `format`,
//!   `contentMediaType`; `$id` at the root only;
//! - `type` (a name or a list of `null`, `boolean`, `integer`, `number`, `string`, `array`,
//!   `object`), `enum`, `const`;
//! - objects: `properties`, `required`, `additionalProperties` (a boolean or a schema; absent
//!   means `true`), `minProperties`, `maxProperties`;
//! - arrays: `items` (a schema or a boolean), `prefixItems`, `minItems`, `maxItems`,
//!   `uniqueItems`;
//! - numbers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (numbers, the
//!   2020-12 form), `multipleOf`;
//! - strings: `minLength` and `maxLength` (in Unicode code points), `pattern`,
//!   `contentEncoding` (`"base64"` only);
//! - `anyOf`, `oneOf`, `allOf`, `not`;
//! - `$ref` to `#`, `#/$defs/<name>` or `#/definitions/<name>`, with `$defs`/`definitions` at
//!   the root (pydantic's layout). `$ref` applies beside its sibling keywords, as in 2020-12.
//!   Recursion through properties and items is fine; a loop of `$ref`/`allOf`/`anyOf`/`oneOf`/
//!   `not` that never descends into the value is refused.
//!
//! `pattern` is a [`regex`](https://docs.rs/regex) crate expression (the engine pydantic-core
//! uses), not ECMA-262: the common syntax (classes, anchors, repetition, groups, `\d`, `\w`)
//! is the same, but look-around and backreferences are refused when the tool is made, and `\d`,
//! `\w` and `\b` are Unicode-aware (as in Python's `re`) where ECMA-262's are ASCII. As JSON
//! Schema says, it searches: anchor it with `^...$` to match the whole string.
//!
//! Anything else is a [`SchemaError`] of kind [`SchemaErrorKind::UnknownKeyword`], unless
//! [`Options::validates_input`] is set: then keywords outside the subset are let through,
//! unchecked, for a tool that checks its own input. Keywords inside the subset are still
//! checked, and a malformed one (`"required": 3`, `"minimum": "x"`, an unknown type name) is
//! still refused. With `validates_input`, an ignored `patternProperties` makes the same schema's
//! `additionalProperties` unchecked too, since it decides which keys count as additional.
//! Every [`SchemaError`] names a kind and the JSON pointer of the offending place.
//!
//! # The arguments
//!
//! Arguments are a [`wasi_python_protocol::Map`] and are checked with JSON Schema's meaning,
//! with these choices:
//!
//! - `integer` accepts integers only (`Int` and `BigInt`), not an integer-valued float such as
//!   `1.0` (JSON Schema would); `number` accepts integers and floats. Neither accepts a
//!   boolean, as in JSON.
//! - A `Bytes` value (`{"$bytes": ...}` on the wire) reads as its standard base64 text: so
//!   `minLength`, `maxLength`, `pattern`, `enum`, `const` and `uniqueItems` see that text. It is
//!   accepted only where a schema declaring `contentEncoding: "base64"` applies to it and
//!   passes: `type: "string"` admits bytes only beside `contentEncoding: "base64"` in the same
//!   schema object (a plain string schema says "expected a string, got bytes"), and bytes that no such schema covers (under
//!   `{}`, `additionalProperties: true`, an unconstrained array's items, ...) are refused with
//!   [`ArgumentErrorKind::Bytes`]. A string is still accepted where `contentEncoding: "base64"`
//!   applies (the keyword is an annotation in JSON Schema); it is not decoded.
//! - `enum`, `const` and `uniqueItems` compare by JSON equality: numbers by value (`1` equals
//!   `1.0`), objects regardless of key order. Numbers compare exactly, integers beyond 64 bits
//!   included. `multipleOf` reads a float as the shortest decimal that prints it (`0.3` is a
//!   multiple of `0.1`).
//! - Values nest at most 64 levels (the arguments object is level 1), and at most 512 schema
//!   applications may be in progress at once; past either, [`ArgumentErrorKind::TooDeep`].
//!
//! An [`ArgumentError`] has a kind, a path (`qty`, `items[2].name`, `opts["odd key"]`) and a
//! message for the guest such as `argument 'qty': expected an integer, got a string`,
//! `unknown argument 'extra'` or `missing required argument 'item'`. Guest-provided text in it
//! is cut to 64 characters. Where `anyOf`/`oneOf` fails, the message blames the one alternative
//! the value got past the type of, or lists the types the alternatives wanted
//! (`expected an integer or null, got a string`).
//!
//! Fixed (partial-bound) keywords are the runtime's to pass: [`InputSchema::validate_with_fixed`]
//! refuses any argument they name, before the schema sees it, whatever `additionalProperties`
//! says.
#![forbid(unsafe_code)]

mod compile;
mod error;
mod instance;
mod num;
mod validate;

use std::hash::RandomState;

use wasi_python_protocol::Map;

pub use error::{ArgumentError, ArgumentErrorKind, SchemaError, SchemaErrorKind};

/// How to compile an input schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// The tool checks its own input: keywords outside the subset are accepted and ignored.
    pub validates_input: bool,
}

/// The default of [`Bounds::max_steps`]: about 20-30 ms of checking on a 2-core VM of 2026
/// (a step is one schema applied to one value, or 64 bytes of text read), and more than a
/// 1 MiB frame needs under any schema that does not branch at every level (250,000 unique
/// integers take about 750,000).
pub const DEFAULT_MAX_STEPS: u64 = 1_500_000;

/// How much work checking one call's arguments may do. A hostile guest chooses the
/// arguments: with a schema that branches (`anyOf` of two array schemas over a recursive
/// `$ref`) a 100-byte value can need 2^28 applications, so every check counts its steps.
#[derive(Clone, Copy)]
pub struct Bounds<'a> {
    /// Steps (one schema applied to one value; 64 bytes of text read) before the check
    /// gives up with [`ArgumentErrorKind::TooComplex`].
    pub max_steps: u64,
    /// Asked every 1,024 steps; `true` ends the check with [`ArgumentErrorKind::Stopped`]
    /// (the runtime passes "the run's deadline has come, or it was cancelled").
    pub stop: Option<&'a dyn Fn() -> bool>,
}

impl Default for Bounds<'_> {
    fn default() -> Self {
        Bounds { max_steps: DEFAULT_MAX_STEPS, stop: None }
    }
}

impl std::fmt::Debug for Bounds<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bounds")
            .field("max_steps", &self.max_steps)
            .field("stop", &self.stop.is_some())
            .finish()
    }
}

/// A compiled input schema: regexes built, `$ref`s resolved. Cheap to share (`Send + Sync`).
#[derive(Debug, Clone)]
pub struct InputSchema {
    nodes: Vec<compile::Node>,
    property_names: Vec<Box<str>>,
    required: Vec<Box<str>>,
    /// Keys the hashes of `uniqueItems`; random per schema.
    hasher: RandomState,
}

impl InputSchema {
    /// Checks `schema` against the subset and compiles it.
    pub fn compile(schema: &serde_json::Value, opts: Options) -> Result<InputSchema, SchemaError> {
        compile::compile(schema, opts)
    }

    pub(crate) fn from_parts(
        nodes: Vec<compile::Node>,
        property_names: Vec<Box<str>>,
        required: Vec<Box<str>>,
    ) -> Self {
        InputSchema {
            nodes,
            property_names,
            required,
            hasher: RandomState::new(),
        }
    }

    /// Checks a call's arguments within [`Bounds::default`].
    pub fn validate(&self, args: &Map) -> Result<(), ArgumentError> {
        self.run(args, &Bounds::default())
    }

    /// Refuses an argument named in `fixed` (kind [`ArgumentErrorKind::Fixed`]:
    /// `argument 'user_id' is fixed by the host`), then validates within [`Bounds::default`].
    pub fn validate_with_fixed(&self, args: &Map, fixed: &[&str]) -> Result<(), ArgumentError> {
        self.validate_within(args, fixed, &Bounds::default())
    }

    /// [`validate_with_fixed`](Self::validate_with_fixed) within `bounds`: past
    /// `bounds.max_steps` the arguments are refused as [`ArgumentErrorKind::TooComplex`],
    /// and once `bounds.stop` returns true as [`ArgumentErrorKind::Stopped`].
    pub fn validate_within(&self, args: &Map, fixed: &[&str], bounds: &Bounds<'_>) -> Result<(), ArgumentError> {
        if !fixed.is_empty()
            && let Some((name, _)) = args.iter().find(|(name, _)| fixed.contains(name))
        {
            return Err(ArgumentError::new(
                ArgumentErrorKind::Fixed,
                name.to_owned(),
                format!("argument '{name}' is fixed by the host"),
            ));
        }
        self.run(args, bounds)
    }

    /// The top-level property names, in schema order: the guest function's parameters.
    pub fn property_names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.property_names.iter().map(|n| &**n)
    }

    /// The top-level `required` names, in schema order.
    pub fn required(&self) -> impl ExactSizeIterator<Item = &str> {
        self.required.iter().map(|n| &**n)
    }
}
