//! The bodies of the fuzz targets, kept free of libFuzzer so that the saved inputs under
//! `regressions/<target>/` replay on a stable toolchain (`tests/regressions.rs`).
//!
//! - [`frame_decode`]: raw bytes into the host's request decoder and the guest's answer
//!   decoder: never a panic, offsets inside the frame, and every frame that decodes
//!   re-encodes to one that decodes the same (and so does the host's answer to it).
//! - [`schema_compile`]: a JSON value built by [`json::SchemaJson`] (arbitrary, but biased
//!   toward the subset's keywords) into `InputSchema::compile`; what compiles then checks
//!   arbitrary arguments. Never a panic.
//! - [`validate`]: a schema from a small grammar ([`grammar`]) that mostly compiles, and
//!   arguments from small alphabets that often meet its bounds: never a panic, and where no
//!   documented deviation can apply, the same verdict as the `jsonschema` crate.
//! - [`snapshot_load`]: bytes into the snapshot file loader (`wasi-python-image`) with a
//!   real load's limits (4 GiB of memory), as they are, with their checksum made right and
//!   signed, opened with and without the key, so the fuzzer reaches the page list: never
//!   a panic, every accepted header's values safe for the runtime, and what decodes
//!   re-encodes to a file that decodes the same.

pub mod frame;
pub mod grammar;
pub mod json;
pub mod snapshot;

/// A target's body: one input, a panic for a failure.
pub type Target = fn(&[u8]);

/// Every target, by the name cargo-fuzz and `regressions/` know it by.
pub const TARGETS: [(&str, Target); 4] = [
    ("frame_decode", frame_decode),
    ("schema_compile", schema_compile),
    ("validate", validate),
    ("snapshot_load", snapshot_load),
];

/// Raw bytes into `decode_request` and `decode_response`.
pub fn frame_decode(data: &[u8]) {
    frame::check(data);
}

/// An arbitrary keyword-biased JSON value into `InputSchema::compile`, then `validate`.
pub fn schema_compile(data: &[u8]) {
    json::check(data);
}

/// A grammar-built schema and arguments: compile, validate, compare with `jsonschema`.
pub fn validate(data: &[u8]) {
    grammar::check(data);
}

/// Bytes into the snapshot loader, as they are, with a correct checksum and signed.
pub fn snapshot_load(data: &[u8]) {
    snapshot::check(data);
}
