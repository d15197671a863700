//! The runtime's costs against the real guest: loading the compiled guest from the
//! cache, a warm run, a run with one tool call, and a tool's round trip by payload.
//!
//! Needs the guest artifacts (`cargo xtask dist`, found as the integration tests find
//! them: `$WASI_PYTHON_ARTIFACTS`, else `$CARGO_TARGET_DIR/dist`, else `target/dist`)
//! and the compiled guest in the cache (made here once, outside any timing, if it is
//! missing: minutes). Compiling the guest is not benched; see docs/benchmarks.md.
//!
//! `cargo bench -p wasi-python-runtime --bench runtime -- --warm-up-time 1 --measurement-time 3`
//!
//! The round trip is timed inside the guest (`time.perf_counter_ns` around a loop of
//! calls, fed to criterion by `iter_custom`), so it excludes the run's start and the
//! tool discovery. After that group, a per-call distribution (p50, p90, p99) from one
//! guest run of [`PERCENTILE_CALLS`] individually timed calls per payload is printed.

use std::cell::RefCell;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use wasi_python_runtime::budget::Limits as BudgetLimits;
use wasi_python_runtime::protocol::Value;
use wasi_python_runtime::{
    Artifacts, CancelToken, Completed, Flavour, Invocation, RunConfig, Runtime, ToolDoor, ToolHost,
    ToolOutput, ToolSpec,
};

/// Payloads of the round trip: a string argument of this many bytes, echoed back.
const PAYLOADS: [(&str, usize); 3] = [("10B", 10), ("1KiB", 1 << 10), ("64KiB", 64 << 10)];
/// Calls per guest run for the printed per-call distribution.
const PERCENTILE_CALLS: usize = 2000;
/// Generous, so a loaded machine never turns a bench run into a deadline trap.
const DEADLINE: Duration = Duration::from_secs(600);

fn artifacts() -> Artifacts {
    let dir = std::env::var_os("WASI_PYTHON_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
                .join("dist")
        });
    Artifacts::open(&dir).unwrap_or_else(|e| {
        panic!("these benches need the guest artifacts ({e}); run `cargo xtask bench`")
    })
}

/// A runtime with the plain flavour loaded (compiled and cached first if need be).
fn runtime() -> Runtime {
    let rt = Runtime::new(artifacts());
    let t = Instant::now();
    let cwasm = rt.prepare(Flavour::Plain).expect("the guest loads");
    let took = t.elapsed();
    if took > Duration::from_secs(5) {
        eprintln!("note: the guest was compiled ({:.1?}) into {}", took, cwasm.display());
    }
    rt
}

/// The trivial tool host: answers every call with its own arguments.
#[derive(Debug)]
struct Echo;

impl ToolHost for Echo {
    fn invoke(&self, call: Invocation, _cancel: &CancelToken) -> ToolOutput {
        ToolOutput::Ok(Value::Object(call.args))
    }
}

/// A door offering one tool, `echo(s: str)`, with no frame or byte budget.
fn echo_door() -> Arc<ToolDoor> {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"s": {"type": "string"}},
        "required": ["s"],
        "additionalProperties": false,
    });
    let descriptor = serde_json::json!({
        "name": "echo",
        "description": "Answers with its arguments.",
        "inputSchema": schema,
    });
    let spec = ToolSpec::new("echo", descriptor.to_string(), &schema, false, Vec::new(), None)
        .expect("a valid tool");
    let limits = BudgetLimits {
        max_frames: None,
        max_request_bytes: None,
        ..BudgetLimits::default()
    };
    Arc::new(ToolDoor::new(vec![spec], Arc::new(Echo), limits).expect("a valid door"))
}

fn run_ok(rt: &Runtime, cfg: RunConfig) -> Completed {
    let done = rt.run(cfg.deadline(Some(DEADLINE))).expect("the run starts");
    assert!(
        done.exit_code == Some(0),
        "the bench program failed: {:?} {:?}\n{}",
        done.exit_code,
        done.trapped,
        String::from_utf8_lossy(&done.stderr)
    );
    done
}

/// The guest program of the round trip: `sys.argv[1]` calls with a payload of
/// `sys.argv[2]` bytes, after one untimed call. Prints the loop's nanoseconds, or,
/// with `sys.argv[3] == "each"`, every call's nanoseconds, one a line.
const ROUND_TRIP: &str = "\
import sys, time
from host import tools
n, size, each = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == 'each'
f, s, clock = tools.echo, 'x' * size, time.perf_counter_ns
assert f(s=s) == {'s': s}
if each:
    out = []
    for _ in range(n):
        t = clock()
        f(s=s)
        out.append(clock() - t)
    print('\\n'.join(map(str, out)))
else:
    t = clock()
    for _ in range(n):
        f(s=s)
    print(clock() - t)
";

fn round_trip_run(rt: &Runtime, calls: u64, size: usize, each: bool) -> Vec<u64> {
    let argv = [
        "-c".to_owned(),
        ROUND_TRIP.to_owned(),
        calls.to_string(),
        size.to_string(),
        if each { "each" } else { "loop" }.to_owned(),
    ];
    let done = run_ok(rt, RunConfig::new(argv).door(echo_door()));
    String::from_utf8_lossy(&done.stdout)
        .lines()
        .map(|l| l.trim().parse::<u64>().expect("the guest prints nanoseconds"))
        .collect()
}

fn load(c: &mut Criterion) {
    let artifacts = artifacts();
    // Fills the cache if it is empty, so the timed loop only ever deserialises.
    drop(runtime());
    let mut group = c.benchmark_group("load");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    group.bench_function("new_and_prepare_from_cache", |b| {
        // The runtime is dropped (its module unmapped) outside the timing.
        b.iter_with_large_drop(|| {
            let rt = Runtime::new(artifacts.clone());
            black_box(rt.prepare(Flavour::Plain).expect("the guest loads"));
            rt
        })
    });
    group.finish();
}

fn run(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("run");
    group.sample_size(20);
    group.bench_function("pass", |b| {
        b.iter(|| run_ok(&rt, RunConfig::new(["-c", "pass"])))
    });
    // Seven times slower than `pass` (the guest compiles its `host` package): fewer samples.
    group.sample_size(10);
    group.bench_function("one_tool_call", |b| {
        b.iter(|| {
            run_ok(
                &rt,
                RunConfig::new(["-c", "from host import tools\ntools.echo(s='hi')"]).door(echo_door()),
            )
        })
    });
    group.finish();
}

fn round_trip(c: &mut Criterion) {
    let rt = runtime();
    let percentiles = RefCell::new(Vec::new());
    let mut group = c.benchmark_group("tool_round_trip");
    group.sample_size(10);
    for (name, size) in PAYLOADS {
        group.throughput(Throughput::Bytes(size as u64));
        let mut first = true;
        group.bench_with_input(BenchmarkId::from_parameter(name), &size, |b, &size| {
            // Here, so a filter that skips this bench skips its distribution too.
            if std::mem::take(&mut first) {
                percentiles.borrow_mut().push((name, per_call(&rt, size)));
            }
            // One guest run per sample: `iters` calls, timed in the guest.
            b.iter_custom(|iters| Duration::from_nanos(round_trip_run(&rt, iters, size, false)[0]))
        });
    }
    group.finish();
    let rows = percentiles.into_inner();
    if !rows.is_empty() {
        println!("tool_round_trip per call, timed in the guest, {PERCENTILE_CALLS} calls in one run:");
        println!("{:>8} {:>10} {:>10} {:>10} {:>10}", "payload", "min µs", "p50 µs", "p90 µs", "p99 µs");
        for (name, [min, p50, p90, p99]) in rows {
            println!("{name:>8} {min:>10.1} {p50:>10.1} {p90:>10.1} {p99:>10.1}");
        }
    }
}

/// The per-call distribution of one guest run of [`PERCENTILE_CALLS`] calls, each timed
/// on its own, in µs: min, p50, p90, p99.
fn per_call(rt: &Runtime, size: usize) -> [f64; 4] {
    let mut ns = round_trip_run(rt, PERCENTILE_CALLS as u64, size, true);
    assert_eq!(ns.len(), PERCENTILE_CALLS, "one timing per call");
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
    [at(0.0), at(0.5), at(0.9), at(0.99)]
}

criterion_group!(benches, load, run, round_trip);
criterion_main!(benches);
