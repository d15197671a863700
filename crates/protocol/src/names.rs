//! Tool names the guest package accepts.

/// Python's hard keywords (`keyword.kwlist`), which no tool may be named.
pub const PYTHON_KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Whether the guest accepts `name` as a tool name: `[A-Za-z][A-Za-z0-9_]{0,63}` and not a
/// Python keyword (the guest's `from host import tools` fails on any other).
pub fn is_valid_tool_name(name: &str) -> bool {
    let b = name.as_bytes();
    matches!(b.first(), Some(c) if c.is_ascii_alphabetic())
        && b.len() <= crate::MAX_TOOL_NAME_CHARS
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
        && !PYTHON_KEYWORDS.contains(&name)
}
