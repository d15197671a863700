//! libFuzzer entry for [`wasi_python_fuzz::snapshot_load`]; the body is in the library, so saved
//! inputs replay without libFuzzer (tests/regressions.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wasi_python_fuzz::snapshot_load(data));
