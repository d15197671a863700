//! Displays: the MIME bundles a guest shows (Jupyter's `display_data`), sent as one
//! control frame each (control.rs, [`DISPLAY_FRAME`]) and kept for the run's
//! `Completed`, within [`crate::Limits::display_bytes`] (docs/displays.md).
//!
//! A frame is `\0wasi-python display ` and one UTF-8 JSON object
//! `{"data": {mime: value, ...}, "metadata": {...}}` (other keys are ignored): JSON
//! values for `application/json` and `*+json` types, base64 text for binary ones
//! (`image/*` but SVG, `audio/*`, `video/*`, `application/pdf`,
//! `application/octet-stream`), text for the rest. Answered `kept`, `cut` (past the cap:
//! dropped, counted) or `bad` (not such an object: counted, never kept).
//!
//! **Invariant:** a frame's size is checked against what is left of the cap before a
//! byte of it is read; then one linear scan bounds its nesting ([`MAX_DEPTH`]), numbers
//! ([`MAX_NUMBER_CHARS`]) and members near the top ([`MAX_MEMBERS`]), before serde_json
//! reads it into borrowed slices. What the host holds of a frame is its bytes, once; a
//! kept display's JSON is one Python's `json.loads` reads back without error.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::output::Events;

/// The frame's start: then the display's JSON object.
pub(crate) const DISPLAY_FRAME: &[u8] = b"\0wasi-python display ";
/// A run's (or turn's) display bytes by default: 16 MiB.
pub const DEFAULT_DISPLAY_BYTES: usize = 16 << 20;
/// At most this many displays are kept per run (or turn); later ones are cut.
pub const MAX_DISPLAYS: usize = 10_000;
/// How deep a display's JSON nests (its object is depth 1).
pub(crate) const MAX_DEPTH: usize = 64;
/// The longest number a display's JSON may hold, in characters (Python's `int` reads
/// at most 4,300 digits).
pub(crate) const MAX_NUMBER_CHARS: usize = 64;
/// Object members at depth 1 and 2 together (the frame's keys, its MIME types, the
/// metadata's keys): the maps read of a frame stay small.
pub(crate) const MAX_MEMBERS: usize = 256;

/// What the runtime answered to a display frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Kept,
    Cut,
    Bad,
}

impl Verdict {
    /// The answer's bytes on the wire.
    pub(crate) fn bytes(self) -> &'static [u8] {
        match self {
            Verdict::Kept => b"kept",
            Verdict::Cut => b"cut",
            Verdict::Bad => b"bad",
        }
    }
}

/// One display a run kept: its frame's JSON object, checked. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Display {
    json: Bytes,
}

impl Display {
    /// The display's JSON object, as the guest sent it: `{"data": {...}, "metadata": {...}}`.
    pub fn json(&self) -> &[u8] {
        &self.json
    }
}

/// How a MIME type's value is carried in the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MimeKind {
    /// Any JSON value (`application/json`, `*+json`).
    Json,
    /// Base64 text of the bytes (`image/*` but SVG, `audio/*`, `video/*`,
    /// `application/pdf`, `application/octet-stream`).
    Binary,
    /// Text (everything else: `text/*`, `image/svg+xml`, ...).
    Text,
}

impl MimeKind {
    /// How `mime`'s value is carried (the package's `Display` decodes by the same rule).
    pub fn of(mime: &str) -> MimeKind {
        if mime == "application/json" || mime.ends_with("+json") {
            MimeKind::Json
        } else if mime == "image/svg+xml" || mime.starts_with("text/") {
            MimeKind::Text
        } else if mime.starts_with("image/")
            || mime.starts_with("audio/")
            || mime.starts_with("video/")
            || mime == "application/pdf"
            || mime == "application/octet-stream"
        {
            MimeKind::Binary
        } else {
            MimeKind::Text
        }
    }
}

/// Why a frame is not a display (for tests; the guest reads only `bad`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bad {
    /// Nesting, a number or the members near the top past their bound.
    Shape,
    /// Not a JSON object (serde_json said why).
    Json,
    /// No `data` object.
    NoData,
    /// `metadata` is not an object.
    Metadata,
    /// An empty or overlong MIME type.
    Mime,
    /// A text or binary type's value is not a string.
    NotText,
    /// A binary type's value is not base64.
    NotBase64,
}

/// Checks that `body` is a display's JSON object.
pub(crate) fn check(body: &[u8]) -> Result<(), Bad> {
    scan(body)?;
    let frame: BTreeMap<String, &RawValue> = serde_json::from_slice(body).map_err(|_| Bad::Json)?;
    let data = frame.get("data").ok_or(Bad::NoData)?;
    let data: BTreeMap<String, &RawValue> = serde_json::from_str(data.get()).map_err(|_| Bad::NoData)?;
    if let Some(meta) = frame.get("metadata")
        && !meta.get().starts_with('{')
    {
        return Err(Bad::Metadata);
    }
    for (mime, value) in &data {
        if mime.is_empty() || mime.len() > 255 {
            return Err(Bad::Mime);
        }
        match MimeKind::of(mime) {
            MimeKind::Json => {}
            MimeKind::Text => {
                serde_json::from_str::<String>(value.get()).map_err(|_| Bad::NotText)?;
            }
            MimeKind::Binary => {
                let text = serde_json::from_str::<String>(value.get()).map_err(|_| Bad::NotText)?;
                if !is_base64(text.as_bytes()) {
                    return Err(Bad::NotBase64);
                }
            }
        }
    }
    Ok(())
}

/// One pass over the bytes outside strings: nesting at most [`MAX_DEPTH`], numbers of at
/// most [`MAX_NUMBER_CHARS`], at most [`MAX_MEMBERS`] members at depth 1 and 2.
fn scan(body: &[u8]) -> Result<(), Bad> {
    let (mut depth, mut number, mut members) = (0usize, 0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
            number += 1;
            if number > MAX_NUMBER_CHARS {
                return Err(Bad::Shape);
            }
            continue;
        }
        number = 0;
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(Bad::Shape);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b':' if depth <= 2 => {
                members += 1;
                if members > MAX_MEMBERS {
                    return Err(Bad::Shape);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Standard base64 with padding; ASCII whitespace anywhere is allowed (and skipped).
fn is_base64(text: &[u8]) -> bool {
    let mut n = 0usize;
    let mut padding = 0usize;
    for &b in text {
        match b {
            b' ' | b'\n' | b'\r' | b'\t' => continue,
            b'=' => padding += 1,
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' if padding == 0 => {}
            _ => return false,
        }
        n += 1;
    }
    n.is_multiple_of(4) && padding <= 2
}

/// What a store keeps of its displays during a run or turn, and where they stream.
pub(crate) struct DisplayState {
    /// The bytes kept may not pass this.
    cap: usize,
    used: usize,
    /// A display was cut: every later one is too (the list is a prefix).
    cut: bool,
    list: Vec<Display>,
    bad: u64,
    /// The run's (turn's) event queue, when it streams.
    events: Option<Events>,
}

/// A run's (or turn's) displays, taken at its end.
pub(crate) struct Shown {
    pub(crate) list: Vec<Display>,
    pub(crate) cut: bool,
    pub(crate) bad: u64,
    /// The event queue, ended by the taker.
    pub(crate) events: Option<Events>,
}

impl DisplayState {
    pub(crate) fn new(cap: usize, events: Option<Events>) -> DisplayState {
        DisplayState { cap, used: 0, cut: false, list: Vec::new(), bad: 0, events }
    }

    /// A display frame's body: kept (and streamed), cut, or bad. Its size is checked
    /// before it is read.
    pub(crate) fn offer(&mut self, body: &[u8]) -> Verdict {
        if self.cut || self.list.len() >= MAX_DISPLAYS || body.len() > self.cap.saturating_sub(self.used) {
            self.cut = true;
            return Verdict::Cut;
        }
        if check(body).is_err() {
            self.bad += 1;
            return Verdict::Bad;
        }
        self.used += body.len();
        let display = Display { json: Bytes::copy_from_slice(body) };
        if let Some(events) = &self.events {
            events.push_display(display.clone());
        }
        self.list.push(display);
        Verdict::Kept
    }

    /// What was kept since the last take; the state starts afresh with the same cap and
    /// no queue.
    pub(crate) fn take(&mut self) -> Shown {
        let cap = self.cap;
        let old = std::mem::replace(self, DisplayState::new(cap, None));
        Shown { list: old.list, cut: old.cut, bad: old.bad, events: old.events }
    }

    /// The cap and the event queue of the call that comes (a session's turn).
    pub(crate) fn set(&mut self, cap: usize, events: Option<Events>) {
        self.cap = cap;
        self.events = events;
    }

    /// The event queue, if the call streams.
    pub(crate) fn events(&self) -> Option<&Events> {
        self.events.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(data: &str) -> String {
        format!(r#"{{"data":{data},"metadata":{{}}}}"#)
    }

    #[test]
    fn displays_as_jupyter_sends_them_are_kept() {
        for ok in [
            r#"{"data":{"text/plain":"1"}}"#.to_owned(),
            frame(r#"{"text/plain":"x","text/html":"<b>x</b>"}"#),
            frame(r#"{"image/png":"iVBORw0KGgo=","text/plain":"<Figure>"}"#),
            frame("{\"image/png\":\"iVBO\\nRw0K\\nGgo=\\n\"}"),
            frame(r#"{"application/json":{"a":[1,2.5,null,true]},"application/vnd.x+json":3}"#),
            frame(r#"{"image/svg+xml":"<svg/>","text/markdown":"\u00e9"}"#),
            frame("{}"),
            r#"{"data":{},"metadata":{"image/png":{"width":10}},"transient":{"display_id":"a"}}"#.to_owned(),
        ] {
            assert_eq!(check(ok.as_bytes()), Ok(()), "{ok}");
        }
    }

    #[test]
    fn malformed_frames_are_bad_by_kind() {
        let bad = |body: &[u8]| check(body).unwrap_err();
        assert_eq!(bad(b""), Bad::Json);
        assert_eq!(bad(b"[]"), Bad::Json);
        assert_eq!(bad(b"{"), Bad::Json);
        assert_eq!(bad(b"{\"data\":{}} trailing"), Bad::Json);
        assert_eq!(bad(b"\xff"), Bad::Json);
        assert_eq!(bad(b"{\"data\":{\"text/plain\":\"\xff\"}}"), Bad::Json);
        assert_eq!(bad(br#"{"data":{"text/plain":NaN}}"#), Bad::Json);
        assert_eq!(bad(br#"{"metadata":{}}"#), Bad::NoData);
        assert_eq!(bad(br#"{"data":[1]}"#), Bad::NoData);
        assert_eq!(bad(br#"{"data":{},"metadata":[]}"#), Bad::Metadata);
        assert_eq!(bad(br#"{"data":{"":"x"}}"#), Bad::Mime);
        assert_eq!(bad(br#"{"data":{"text/plain":1}}"#), Bad::NotText);
        assert_eq!(bad(br#"{"data":{"image/png":{"a":1}}}"#), Bad::NotText);
        assert_eq!(bad(br#"{"data":{"image/png":"not base64!"}}"#), Bad::NotBase64);
        assert_eq!(bad(br#"{"data":{"image/png":"abc"}}"#), Bad::NotBase64);
        assert_eq!(bad(br#"{"data":{"image/png":"a=bc"}}"#), Bad::NotBase64);
    }

    #[test]
    fn nesting_numbers_and_members_are_bounded_before_parsing() {
        let deep = |n: usize| format!(r#"{{"data":{{"application/json":{}1{}}}}}"#, "[".repeat(n), "]".repeat(n));
        assert_eq!(check(deep(MAX_DEPTH - 2).as_bytes()), Ok(()));
        assert_eq!(check(deep(MAX_DEPTH - 1).as_bytes()), Err(Bad::Shape));
        let number = |n: usize| frame(&format!(r#"{{"application/json":{}}}"#, "9".repeat(n)));
        assert_eq!(check(number(MAX_NUMBER_CHARS).as_bytes()), Ok(()));
        assert_eq!(check(number(MAX_NUMBER_CHARS + 1).as_bytes()), Err(Bad::Shape));
        let members = |n: usize| frame(&format!("{{{}}}", (0..n).map(|i| format!(r#""text/x{i}":"""#)).collect::<Vec<_>>().join(",")));
        // The frame's own two keys count.
        assert_eq!(check(members(MAX_MEMBERS - 2).as_bytes()), Ok(()));
        assert_eq!(check(members(MAX_MEMBERS - 1).as_bytes()), Err(Bad::Shape));
        // Brackets, colons and digits inside strings are text.
        let text = frame(&format!(r#"{{"text/plain":"{}{}"}}"#, "[{:".repeat(1000), "1".repeat(1000)));
        assert_eq!(check(text.as_bytes()), Ok(()));
        let escaped = frame(r#"{"text/plain":"a\"[[[[\\"}"#);
        assert_eq!(check(escaped.as_bytes()), Ok(()));
    }

    #[test]
    fn mime_kinds_follow_jupyter() {
        assert_eq!(MimeKind::of("application/json"), MimeKind::Json);
        assert_eq!(MimeKind::of("application/vnd.vegalite.v5+json"), MimeKind::Json);
        assert_eq!(MimeKind::of("image/png"), MimeKind::Binary);
        assert_eq!(MimeKind::of("image/jpeg"), MimeKind::Binary);
        assert_eq!(MimeKind::of("application/pdf"), MimeKind::Binary);
        assert_eq!(MimeKind::of("image/svg+xml"), MimeKind::Text);
        assert_eq!(MimeKind::of("text/html"), MimeKind::Text);
        assert_eq!(MimeKind::of("application/javascript"), MimeKind::Text);
    }

    #[test]
    fn the_cap_is_checked_before_reading_and_cuts_every_later_display() {
        let ok = frame(r#"{"text/plain":"x"}"#);
        let mut state = DisplayState::new(ok.len() * 2, None);
        assert_eq!(state.offer(ok.as_bytes()), Verdict::Kept);
        // Not JSON, but larger than what is left: cut, never read.
        assert_eq!(state.offer(&vec![b'{'; ok.len() + 1]), Verdict::Cut);
        // Fits, but comes after a cut display: cut too.
        assert_eq!(state.offer(ok.as_bytes()), Verdict::Cut);
        let shown = state.take();
        assert_eq!((shown.list.len(), shown.cut, shown.bad), (1, true, 0));
        assert_eq!(shown.list[0].json(), ok.as_bytes());
        // Taken: the next turn starts afresh with the same cap.
        assert_eq!(state.offer(b"{}"), Verdict::Bad);
        assert_eq!(state.offer(ok.as_bytes()), Verdict::Kept);
        let shown = state.take();
        assert_eq!((shown.list.len(), shown.cut, shown.bad), (1, false, 1));
    }

    #[test]
    fn a_bad_frame_takes_nothing_of_the_cap() {
        let ok = frame(r#"{"text/plain":"x"}"#);
        let mut state = DisplayState::new(ok.len(), None);
        assert_eq!(state.offer(b"{\"data\":1}"), Verdict::Bad);
        assert_eq!(state.offer(ok.as_bytes()), Verdict::Kept);
        assert_eq!(state.offer(b"{}"), Verdict::Cut);
    }

    #[test]
    fn kept_displays_stream_in_order() {
        let events = Events::new();
        let mut state = DisplayState::new(1 << 20, Some(events.clone()));
        let a = frame(r#"{"text/plain":"a"}"#);
        let b = frame(r#"{"text/plain":"b"}"#);
        state.offer(a.as_bytes());
        state.offer(b"bad");
        state.offer(b.as_bytes());
        let (got, ended) = events.drain();
        assert!(!ended);
        let jsons: Vec<&[u8]> = got
            .iter()
            .map(|e| match e {
                crate::Event::Display(d) => d.json(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(jsons, [a.as_bytes(), b.as_bytes()]);
    }
}
