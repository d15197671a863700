//! The two error types: a schema the host cannot use, and arguments the schema refuses.

use std::fmt;

/// What is wrong with an input schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemaErrorKind {
    /// The top level is not an object schema (`"type": "object"`, or no `type` and `properties`).
    NotAnObject,
    /// A top-level property name is not an ASCII Python identifier.
    NotAnIdentifier,
    /// A top-level property name is a Python keyword (`class`, `from`, ...).
    PythonKeyword,
    /// A top-level `required` name is not one of the top-level `properties`.
    RequiredNotAProperty,
    /// A keyword outside the protocol's subset (refused unless `validates_input`).
    UnknownKeyword,
    /// A keyword of the subset whose value is not what the keyword takes.
    Malformed,
    /// A `pattern` the `regex` crate cannot compile.
    BadPattern,
    /// A `contentEncoding` other than `"base64"`.
    UnsupportedEncoding,
    /// A `$ref` that is not `#`, `#/$defs/<name>` or `#/definitions/<name>` of this schema.
    UnresolvedRef,
    /// `$ref`/`allOf`/`anyOf`/`oneOf`/`not` loop back to a schema without descending into a
    /// property or an item, so evaluating it would never end.
    RefCycle,
    /// The schema nests deeper than the compiler follows.
    TooDeep,
}

/// An input schema the host cannot use: a kind, the JSON pointer of the offending place
/// (`""` is the root, `/properties/qty/minimum` a keyword), and a message for the tool's author.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at #{pointer})")]
#[non_exhaustive]
pub struct SchemaError {
    kind: SchemaErrorKind,
    pointer: String,
    message: String,
}

impl SchemaError {
    pub(crate) fn new(kind: SchemaErrorKind, pointer: &str, message: String) -> Self {
        SchemaError {
            kind,
            pointer: pointer.to_owned(),
            message,
        }
    }

    /// What is wrong.
    pub fn kind(&self) -> SchemaErrorKind {
        self.kind
    }

    /// The JSON pointer (RFC 6901) of the offending value within the schema; `""` is the root.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// The message, without the pointer.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Why a call's arguments do not satisfy the tool's input schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ArgumentErrorKind {
    /// A key that `additionalProperties: false` forbids (an argument, or a key of a nested object).
    UnknownArgument,
    /// A key that `required` asks for is absent.
    MissingArgument,
    /// An argument named in the fixed (partial-bound) keywords.
    Fixed,
    /// `type` does not admit the value.
    WrongType,
    /// `minimum`, `maximum`, `exclusiveMinimum` or `exclusiveMaximum`.
    OutOfRange,
    /// `multipleOf`.
    NotMultiple,
    /// `minLength`/`maxLength`, `minItems`/`maxItems` (and `items: false` past `prefixItems`),
    /// `minProperties`/`maxProperties`.
    Length,
    /// `pattern`.
    Pattern,
    /// `enum`.
    Enum,
    /// `const`.
    Const,
    /// `uniqueItems`.
    NotUnique,
    /// `anyOf`, `oneOf` or `not`.
    Combinator,
    /// The schema `false`: no value is allowed at this place.
    Forbidden,
    /// Bytes where no applicable schema declares `contentEncoding: "base64"`.
    Bytes,
    /// The arguments nest deeper, or the schema recurses deeper, than validation follows.
    TooDeep,
    /// Checking took more steps than [`crate::Bounds::max_steps`]: the arguments are
    /// refused as too complex to check, never checked for longer.
    TooComplex,
    /// [`crate::Bounds::stop`] asked the check to end (the run's deadline or cancel).
    Stopped,
}

/// Arguments the input schema refuses: a kind, the path of the offending value (`qty`,
/// `items[2].name`; `""` for the arguments object itself), and a message for the guest such as
/// `argument 'qty': expected an integer, got a string`. Guest-provided text in the message and
/// path (keys, values) is cut to 64 characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct ArgumentError {
    kind: ArgumentErrorKind,
    path: String,
    message: String,
}

impl ArgumentError {
    pub(crate) fn new(kind: ArgumentErrorKind, path: String, message: String) -> Self {
        ArgumentError {
            kind,
            path,
            message,
        }
    }

    /// Why the arguments are refused.
    pub fn kind(&self) -> ArgumentErrorKind {
        self.kind
    }

    /// Where: an argument name followed by `.key`, `["odd key"]` and `[index]` steps.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The message for the guest (the runtime prefixes `<tool>: the arguments: `).
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Guest-provided text as it may appear in a message: at most 64 characters, then `…`.
pub(crate) fn cut(text: &str) -> Cut<'_> {
    Cut(text)
}

pub(crate) struct Cut<'a>(&'a str);

pub(crate) const CUT_CHARS: usize = 64;

impl fmt::Display for Cut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(CUT_CHARS) {
            None => f.write_str(self.0),
            Some((at, _)) => {
                f.write_str(&self.0[..at])?;
                f.write_str("…")
            }
        }
    }
}
