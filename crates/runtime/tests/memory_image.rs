//! Our patch to wasmtime (third_party/wasmtime): `Module::with_memory_image` starts a
//! module's memory from a file instead of its data segments, sharing the compiled code.

use std::io::Write;

use wasmtime::{Config, Engine, Instance, InstanceAllocationStrategy, Module, PoolingAllocationConfig, Store};

const WAT: &str = r#"
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "base")
  (func (export "get") (param i32) (result i32) (i32.load8_u (local.get 0)))
  (func (export "set") (param i32 i32) (i32.store8 (local.get 0) (local.get 1))))
"#;

fn engines() -> Vec<(&'static str, Engine)> {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_core_instances(2)
        .total_memories(2)
        .max_memory_size(1 << 20)
        .linear_memory_keep_resident(1 << 16);
    let mut pooled = Config::new();
    pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    vec![("on demand", Engine::default()), ("pooled", Engine::new(&pooled).unwrap())]
}

/// A two-page image: "imag" at 0, "end!" at 65,636.
fn image() -> (tempfile_like::Path, std::fs::File) {
    let p = tempfile_like::Path::new("image");
    let mut f = std::fs::File::create(&p.0).unwrap();
    f.write_all(b"imag").unwrap();
    f.set_len(2 * 65_536).unwrap();
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::Start(65_636)).unwrap();
    f.write_all(b"end!").unwrap();
    drop(f);
    let f = std::fs::File::open(&p.0).unwrap();
    (p, f)
}

mod tempfile_like {
    pub(crate) struct Path(pub(crate) std::path::PathBuf);
    impl Path {
        pub(crate) fn new(name: &str) -> Path {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Path(std::env::temp_dir().join(format!("wp-memimage-{name}-{}-{n}", std::process::id())))
        }
    }
    impl Drop for Path {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn get(store: &mut Store<()>, i: &Instance, at: i32) -> u8 {
    i.get_typed_func::<i32, i32>(&mut *store, "get").unwrap().call(&mut *store, at).unwrap() as u8
}

#[test]
fn a_module_starts_from_the_image_and_each_instance_from_a_clean_copy() {
    for (name, engine) in engines() {
        let base = Module::new(&engine, WAT).unwrap();
        let (_p, file) = image();
        let imaged = base.with_memory_image(file, 3).unwrap();
        for round in 0..3 {
            let mut store = Store::new(&engine, ());
            let i = Instance::new(&mut store, &imaged, &[]).unwrap();
            let mem = i.get_memory(&mut store, "memory").unwrap();
            assert_eq!(mem.size(&store), 3, "{name}");
            assert_eq!(&mem.data(&store)[..4], b"imag", "{name} round {round}");
            assert_eq!(&mem.data(&store)[65_636..65_640], b"end!", "{name}");
            // Past the image: zeros.
            assert!(mem.data(&store)[2 * 65_536..].iter().all(|&b| b == 0), "{name}");
            // Writes stay in this instance (the file and the next instance see the image).
            i.get_typed_func::<(i32, i32), ()>(&mut store, "set").unwrap().call(&mut store, (0, b'X' as i32)).unwrap();
            i.get_typed_func::<(i32, i32), ()>(&mut store, "set").unwrap().call(&mut store, (150_000, 7)).unwrap();
            assert_eq!(get(&mut store, &i, 0), b'X');
            // The base module is untouched, in the same pool.
            let mut other = Store::new(&engine, ());
            let b = Instance::new(&mut other, &base, &[]).unwrap();
            assert_eq!(get(&mut other, &b, 0), b'b', "{name}");
            assert_eq!(b.get_memory(&mut other, "memory").unwrap().size(&other), 1);
        }
        assert_eq!(&std::fs::read(&_p.0).unwrap()[..4], b"imag");
    }
}

#[test]
fn an_image_that_does_not_fit_is_refused() {
    let engine = Engine::default();
    let base = Module::new(&engine, WAT).unwrap();
    // More bytes than the pages asked for.
    let (_p, file) = image();
    assert!(base.with_memory_image(file, 1).is_err());
    // Not a whole number of host pages.
    let p = tempfile_like::Path::new("odd");
    std::fs::write(&p.0, b"odd").unwrap();
    assert!(base.with_memory_image(std::fs::File::open(&p.0).unwrap(), 2).is_err());
    // Fewer pages than the module's own minimum.
    let two = Module::new(&engine, WAT.replace("(memory (export \"memory\") 1)", "(memory (export \"memory\") 4)")).unwrap();
    let (_q, file) = image();
    assert!(two.with_memory_image(file, 3).is_err());
}

const GROWING: &str = r#"
(module
  (memory (export "memory") 1)
  (func (export "get") (param i32) (result i32) (i32.load8_u (local.get 0)))
  (func (export "set") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))
"#;

/// Our third patch: a pooled slot reset by copying back only the pages the last full
/// reset found written, when this thread took no page fault meanwhile. Every sequence
/// here (writes to pages written before, to new pages, into grown memory) must leave
/// the next instance a clean copy, whichever reset ran. `cargo xtask test` also sets
/// `WASI_PYTHON_CHECK_RESET=1`, which rescans after every short reset and aborts if it
/// missed a written page.
#[test]
fn a_reused_slot_is_clean_whichever_reset_ran() {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_core_instances(1).total_memories(1).max_memory_size(1 << 20).linear_memory_keep_resident(1 << 20);
    // As the runtime's engine (engine.rs): the full reset scans where the kernel can.
    let scan = PoolingAllocationConfig::is_pagemap_scan_available();
    pool.pagemap_scan(if scan { wasmtime::Enabled::Yes } else { wasmtime::Enabled::No });
    let mut config = Config::new();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = Engine::new(&config).unwrap();
    let base = Module::new(&engine, GROWING).unwrap();
    let (_p, file) = image();
    let imaged = base.with_memory_image(file, 3).unwrap();
    // (page writes, pages to grow by) per instance, in order: the same pages again (no
    // fault: the short reset), new ones (a fault: the full one), growth, and back.
    let steps: &[(&[i32], i32)] = &[
        (&[0, 150_000], 0),
        (&[0, 150_000], 0),
        (&[1], 0),
        (&[65_636, 4_096 * 5], 0),
        (&[0], 0),
        (&[0, 3 * 65_536 + 10], 2),
        (&[0], 0),
        (&[0, 3 * 65_536 + 10], 2),
        (&[0, 150_000, 65_636], 0),
        (&[0, 150_000, 65_636], 0),
    ];
    for (round, (writes, grow)) in steps.iter().chain(steps).enumerate() {
        let mut store = Store::new(&engine, ());
        let i = Instance::new(&mut store, &imaged, &[]).unwrap();
        let mem = i.get_memory(&mut store, "memory").unwrap();
        assert_eq!(mem.size(&store), 3, "round {round}");
        let data = mem.data(&store);
        assert_eq!(&data[..4], b"imag", "round {round}");
        assert_eq!(&data[65_636..65_640], b"end!", "round {round}");
        assert!(data[4..65_636].iter().all(|&b| b == 0), "round {round}");
        assert!(data[65_640..].iter().all(|&b| b == 0), "round {round}");
        if *grow > 0 {
            let grown = i.get_typed_func::<i32, i32>(&mut store, "grow").unwrap().call(&mut store, *grow).unwrap();
            assert_eq!(grown, 3, "round {round}");
        }
        let set = i.get_typed_func::<(i32, i32), ()>(&mut store, "set").unwrap();
        for &at in *writes {
            set.call(&mut store, (at, 0x5a)).unwrap();
            assert_eq!(get(&mut store, &i, at), 0x5a, "round {round}");
        }
    }
}

/// This thread's page faults so far (Linux: `/proc/thread-self/stat`, minor + major).
#[cfg(target_os = "linux")]
fn thread_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // After the name: state is field 3, minflt 10, majflt 12.
    fields[10 - 3].parse::<u64>().unwrap() + fields[12 - 3].parse::<u64>().unwrap()
}

/// Our first patch: a slot keeps every page its last instance wrote, however many runs
/// of them there are. The kernel's scan reports them in chunks of 512 and its
/// `walk_end` then names a chunk's start, not the end: read as "not reached", the pages
/// after it were decommitted, and the next instance took a page fault on each again.
#[cfg(target_os = "linux")]
#[test]
fn a_slot_keeps_every_written_page_however_scattered() {
    if !PoolingAllocationConfig::is_pagemap_scan_available() {
        return;
    }
    let mut pool = PoolingAllocationConfig::default();
    pool.total_core_instances(1).total_memories(1).max_memory_size(8 << 20).linear_memory_keep_resident(8 << 20);
    pool.pagemap_scan(wasmtime::Enabled::Yes);
    let mut config = Config::new();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = Engine::new(&config).unwrap();
    let module = Module::new(&engine, GROWING).unwrap();
    // Every other page of 5 MiB: 640 separate runs of written pages.
    let pages: Vec<i32> = (0..640).map(|i| i * 2 * 4096).collect();
    let mut faults = Vec::new();
    for round in 0..3 {
        let mut store = Store::new(&engine, ());
        let i = Instance::new(&mut store, &module, &[]).unwrap();
        i.get_typed_func::<i32, i32>(&mut store, "grow").unwrap().call(&mut store, 80).unwrap();
        let set = i.get_typed_func::<(i32, i32), ()>(&mut store, "set").unwrap();
        let get = i.get_typed_func::<i32, i32>(&mut store, "get").unwrap();
        let before = thread_faults();
        for &at in &pages {
            assert_eq!(get.call(&mut store, at).unwrap(), 0, "round {round}: a clean copy");
            set.call(&mut store, (at, 1)).unwrap();
        }
        faults.push(thread_faults() - before);
    }
    // The first instance faults each page in; later ones find them all kept (a few
    // faults elsewhere on this thread are allowed).
    assert!(faults[0] >= 600, "{faults:?}");
    assert!(faults[1] < 60 && faults[2] < 60, "written pages were dropped: {faults:?}");
}
