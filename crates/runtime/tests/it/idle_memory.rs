//! The launch policy's `idle_memory` (idle_memory.rs): what idle pool slots keep after a
//! large run is bounded by it once they are idle, and 0 keeps nothing. Read from the
//! runtime's `LaunchStats::idle_slot_bytes` (the pool's own count), polled with a
//! generous deadline, never timed.

use std::time::{Duration, Instant};

use wasi_python_runtime::{LaunchPolicy, RunConfig, Runtime};

/// A runtime of its own (its own pool), fresh runs only: no guest on standby or primed
/// instance holds a slot in use.
fn runtime_keeping(bytes: u64) -> Runtime {
    let mut policy = LaunchPolicy::fresh_only();
    policy.idle_memory = bytes;
    let rt = Runtime::builder(crate::runtime().artifacts().clone()).launch_policy(policy).build();
    assert_eq!(rt.launch_policy().idle_memory, bytes);
    rt
}

/// A run that writes `mb` MB of memory, with a limit that allows it.
fn large_run(rt: &Runtime, mb: usize) {
    let cfg = RunConfig::new(["-c", &format!("x = bytearray(b'\\x01') * ({mb} << 20); print(len(x))")])
        .deadline(Some(Duration::from_secs(60)))
        .memory_bytes(1 << 30);
    let done = rt.run(cfg).expect("the run starts");
    assert_eq!(done.exit_code, Some(0), "{}", crate::text(&done.stderr));
}

/// Polls `kept` until `ok` holds, for up to a minute; returns the last value read.
fn until(rt: &Runtime, ok: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let kept = rt.launch_stats(None).idle_slot_bytes;
        if ok(kept) || Instant::now() > deadline {
            return kept;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_large_run_leaves_its_slot_keeping_pages_when_the_budget_allows() {
    let rt = runtime_keeping(u64::MAX);
    large_run(&rt, 200);
    // The slot's store is dropped after the result: its pages are then counted, up to the
    // pool's 64 MiB a slot (of which 16 MiB of growth), and none go back.
    let kept = until(&rt, |k| k >= 16 << 20);
    assert!((16 << 20..=80 << 20).contains(&kept), "kept {kept}");
}

#[test]
fn a_large_run_followed_by_idleness_gives_back_what_is_past_the_budget() {
    let budget = 8 << 20;
    let rt = runtime_keeping(budget);
    large_run(&rt, 200);
    let kept = until(&rt, |k| k <= budget);
    assert!(kept <= budget, "kept {kept}, past the budget of {budget}");
}

#[test]
fn a_budget_of_zero_keeps_nothing_once_the_slots_are_idle() {
    let rt = runtime_keeping(0);
    for _ in 0..2 {
        large_run(&rt, 100);
        assert_eq!(until(&rt, |k| k == 0), 0);
    }
    // And a small run after: the slot it takes is given back too.
    let done = rt.run(RunConfig::new(["-c", "print(1)"])).unwrap();
    assert_eq!(done.exit_code, Some(0));
    assert_eq!(until(&rt, |k| k == 0), 0);
}
