//! Cutting text to a number of characters (Unicode scalar values, as Python counts them).

/// The first `max_chars` characters of `text` (all of it when shorter).
pub fn cut_chars(text: &str, max_chars: usize) -> &str {
    // Fast path: no string of at most `max_chars` bytes has more characters than that.
    if text.len() <= max_chars {
        return text;
    }
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// Guest-provided text as it is echoed in a message: cut to
/// [`MAX_ECHO_CHARS`](crate::MAX_ECHO_CHARS) characters and quoted with `'`.
pub(crate) fn echo(text: &str) -> String {
    format!("'{}'", cut_chars(text, crate::MAX_ECHO_CHARS))
}
