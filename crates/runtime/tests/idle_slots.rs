//! Our fourth patch to wasmtime (third_party/README.md): the pages a pool slot keeps for
//! its next instance are all counted (`unused_memory_bytes_resident`, pages a smaller
//! instance hid included), growth past the instance's initial size is kept up to 16 MiB,
//! and `trim_unused_memories` gives an unused slot's pages back to the system, leaving it
//! as clean as a reset does. Residency is read with `mincore` over pages past the image
//! (anonymous memory, where it says exactly which pages the process holds).
#![cfg(target_os = "linux")]
#![allow(unsafe_code, reason = "mincore over a pool slot's own reserved range")]

use std::io::Write;
use std::time::Duration;

use wasmtime::{Config, Engine, Instance, InstanceAllocationStrategy, Module, PoolingAllocationConfig, Store};

const PAGE: usize = 4096;
const WASM_PAGE: usize = 65_536;

const GROWING: &str = r#"
(module
  (memory (export "memory") 1)
  (func (export "get") (param i32) (result i32) (i32.load8_u (local.get 0)))
  (func (export "set") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))
"#;

/// One slot, as the runtime's pool (engine.rs): 64 MiB kept, reset by the kernel's scan
/// where it has one.
fn engine() -> Engine {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_core_instances(1)
        .total_memories(1)
        .max_memory_size(128 << 20)
        .linear_memory_keep_resident(64 << 20);
    let scan = PoolingAllocationConfig::is_pagemap_scan_available();
    pool.pagemap_scan(if scan { wasmtime::Enabled::Yes } else { wasmtime::Enabled::No });
    let mut config = Config::new();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config).unwrap()
}

/// A module whose memory starts from a two-wasm-page image file ("imag" at 0).
fn imaged(engine: &Engine) -> (Module, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("wp-idle-slots-{}-{:?}", std::process::id(), std::thread::current().id()));
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(b"imag").unwrap();
    f.set_len(2 * WASM_PAGE as u64).unwrap();
    drop(f);
    let m = Module::new(engine, GROWING).unwrap().with_memory_image(std::fs::File::open(&path).unwrap(), 2).unwrap();
    (m, path)
}

/// How many of the host pages of `len` bytes at `at` the process holds.
fn resident(at: *const u8, len: usize) -> usize {
    let mut flags = vec![0u8; len / PAGE];
    // SAFETY: the range is inside the pool's reservation, which stays mapped for the
    // engine's life; mincore only reads the page tables.
    assert_eq!(unsafe { libc::mincore(at as *mut libc::c_void, len, flags.as_mut_ptr()) }, 0);
    flags.iter().filter(|f| **f & 1 != 0).count()
}

/// One instance: grows its memory by `grow` wasm pages, writes a byte in every host page
/// from the end of the image to the end of memory, checks it started clean, and returns
/// its memory's base (the slot's, the same for every instance here).
fn use_slot(engine: &Engine, module: &Module, grow: u32) -> *const u8 {
    let mut store = Store::new(engine, ());
    let i = Instance::new(&mut store, module, &[]).unwrap();
    let mem = i.get_memory(&mut store, "memory").unwrap();
    assert_eq!(&mem.data(&store)[..4], b"imag", "a clean copy of the image");
    assert!(mem.data(&store)[4..].iter().all(|&b| b == 0), "a clean copy: zeros past the image");
    if grow > 0 {
        i.get_typed_func::<u32, i32>(&mut store, "grow").unwrap().call(&mut store, grow).unwrap();
    }
    let set = i.get_typed_func::<(i32, i32), ()>(&mut store, "set").unwrap();
    let end = mem.data_size(&store);
    for at in (2 * WASM_PAGE..end).step_by(PAGE) {
        set.call(&mut store, (at as i32, 1)).unwrap();
    }
    set.call(&mut store, (0, b'X' as i32)).unwrap();
    mem.data_ptr(&store)
}

#[test]
fn an_idle_slot_gives_its_pages_back_and_its_next_instance_starts_clean() {
    let engine = engine();
    let (module, path) = imaged(&engine);
    let metrics = engine.pooling_allocator_metrics().unwrap();
    // 4 MiB past the image, written.
    let base = use_slot(&engine, &module, 64);
    let past_image = unsafe { base.add(2 * WASM_PAGE) };
    let written = 64 * WASM_PAGE;
    assert!(resident(past_image, written) >= written / PAGE * 9 / 10, "the slot keeps what its instance wrote");
    let kept = metrics.unused_memory_bytes_resident();
    assert!(kept >= written * 9 / 10, "counted: {kept}");

    // Within the budget, or not idle long enough: nothing is given back.
    assert_eq!(metrics.trim_unused_memories(kept, Duration::ZERO), 0);
    assert_eq!(metrics.trim_unused_memories(0, Duration::from_secs(3600)), 0);
    assert_eq!(metrics.unused_memory_bytes_resident(), kept);

    // Past it and idle: all of it.
    assert_eq!(metrics.trim_unused_memories(0, Duration::ZERO), kept);
    assert_eq!(metrics.unused_memory_bytes_resident(), 0);
    assert_eq!(resident(past_image, written), 0, "the pages went back to the system");

    // The next instance in the slot starts from the image again, and so on.
    for _ in 0..3 {
        assert_eq!(use_slot(&engine, &module, 64), base);
        let kept = metrics.unused_memory_bytes_resident();
        assert!(kept >= written * 9 / 10, "counted again: {kept}");
        assert_eq!(metrics.trim_unused_memories(0, Duration::ZERO), kept);
        assert_eq!(resident(past_image, written), 0);
    }
    let _ = std::fs::remove_file(path);
}

#[test]
fn pages_a_smaller_instance_hides_are_counted_and_given_back() {
    let engine = engine();
    let (module, path) = imaged(&engine);
    let metrics = engine.pooling_allocator_metrics().unwrap();
    let grown = 64 * WASM_PAGE;
    let base = use_slot(&engine, &module, 64);
    let past_image = unsafe { base.add(2 * WASM_PAGE) };
    // Starts at the image's two pages: the grown pages are hidden behind PROT_NONE,
    // still resident (zeroed by the reset), and still counted as kept.
    use_slot(&engine, &module, 0);
    assert!(resident(past_image, grown) >= grown / PAGE * 9 / 10);
    assert!(metrics.unused_memory_bytes_resident() >= grown * 9 / 10, "{}", metrics.unused_memory_bytes_resident());
    assert!(metrics.trim_unused_memories(0, Duration::ZERO) >= grown * 9 / 10);
    assert_eq!(resident(past_image, grown), 0);
    // Grown again into the pages given back: zeros.
    use_slot(&engine, &module, 64);
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_slot_keeps_at_most_16_mib_of_growth() {
    let engine = engine();
    let (module, path) = imaged(&engine);
    let metrics = engine.pooling_allocator_metrics().unwrap();
    // 48 MiB past the image, all written: within keep_resident, past the growth kept.
    let grown = 768 * WASM_PAGE;
    let base = use_slot(&engine, &module, 768);
    let past_image = unsafe { base.add(2 * WASM_PAGE) };
    let kept = resident(past_image, grown) * PAGE;
    assert!(kept <= (16 << 20) + WASM_PAGE, "kept {kept} bytes of growth");
    assert!(kept >= 8 << 20, "but the first of it is kept: {kept}");
    assert!(metrics.unused_memory_bytes_resident() <= (16 << 20) + 2 * WASM_PAGE);
    let _ = std::fs::remove_file(path);
}
