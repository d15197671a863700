//! Displays and streaming through a real guest: the display frame sent raw by the guest's
//! `_host.call`, kept in order, capped, refused when malformed; a streaming run's events in
//! the guest's order, ending before its `Completed`, and matching it (display.rs, output.rs).

use std::time::Duration;

use wasi_python_runtime::{Event, Events, Next, RunConfig, Session, SessionLimits, Turn};

use crate::{run, runtime, text};

/// The guest's `show(text)`: one display frame of a `text/plain` bundle, its answer printed.
const SHOW: &str = "import _host, json\ndef show(t):\n    print(_host.call(b'\\0wasi-python display ' + json.dumps({'data': {'text/plain': t}}).encode()).decode(), flush=True)\n";

fn plain(json: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(json).unwrap();
    v["data"]["text/plain"].as_str().unwrap().to_owned()
}

#[test]
fn a_run_keeps_its_displays_in_order_and_answers_each_frame() {
    let code = format!("{SHOW}show('a')\nshow('b')\nprint(_host.call(b'\\0wasi-python display {{').decode())");
    let done = run(RunConfig::new(["-c", code.as_str()]));
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    assert_eq!(text(&done.stdout), "kept\nkept\nbad\n");
    assert_eq!(done.displays.iter().map(|d| plain(d.json())).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(done.bad_displays, 1);
    assert_eq!(done.truncated.names(), Vec::<&str>::new());
}

#[test]
fn display_bytes_cuts_the_displays_past_it() {
    let code = format!("{SHOW}for i in range(5): show(str(i) * 100)");
    let done = run(RunConfig::new(["-c", code.as_str()]).display_bytes(300));
    assert_eq!(text(&done.stdout), "kept\nkept\ncut\ncut\ncut\n");
    assert_eq!(done.displays.len(), 2);
    assert_eq!(done.truncated.names(), ["displays"]);
}

/// Every event of `events` until it ends, waiting for each; a stream's writes next to
/// each other joined (the queue joins them only while the caller has not taken the first).
fn all(events: &Events) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    loop {
        match (events.next(Duration::from_secs(30)), out.last_mut()) {
            (Next::Event(Event::Stdout(more)), Some(Event::Stdout(last))) | (Next::Event(Event::Stderr(more)), Some(Event::Stderr(last))) => {
                last.extend_from_slice(&more)
            }
            (Next::Event(e), _) => out.push(e),
            (Next::Ended, _) => return out,
            (other, _) => panic!("no event within 30 s: {other:?}"),
        }
    }
}

#[test]
fn a_streaming_run_s_events_come_in_the_guest_s_order_and_end_before_its_completed() {
    let events = Events::new();
    let code = format!("{SHOW}import sys\nprint('o', flush=True)\nprint('e', file=sys.stderr, flush=True)\nshow('d')\nprint('end')");
    let cfg = RunConfig::new(["-c", code.as_str()]).deadline(Some(Duration::from_secs(30))).events(events.clone());
    let handle = runtime().start(cfg).expect("the run starts");
    let got = all(&events);
    let done = handle.wait().expect("the run ends");
    assert_eq!(done.exit_code, Some(0), "{}", text(&done.stderr));
    let [Event::Stdout(o), Event::Stderr(e), Event::Display(d), Event::Stdout(rest)] = &got[..] else {
        panic!("{got:?}")
    };
    assert_eq!((text(o), text(e), plain(d.json()), text(rest)), ("o\n".into(), "e\n".into(), "d".into(), "kept\nend\n".into()));
    assert_eq!([o.as_slice(), rest].concat(), done.stdout);
    assert_eq!(e, &done.stderr);
    assert_eq!(done.displays.as_slice(), std::slice::from_ref(d));
    assert!(!done.truncated.stream);
}

#[test]
fn each_session_turn_streams_to_its_own_queue_with_its_own_cap() {
    let session: Session = runtime()
        .open_session(RunConfig::new(Vec::<String>::new()), SessionLimits::default())
        .expect("the session opens");
    let turn = |code: &str, display_bytes: usize, events: Option<Events>| Turn {
        code: code.into(),
        deadline: Some(Duration::from_secs(30)),
        display_bytes,
        events,
        ..Default::default()
    };
    assert_eq!(session.turn(turn(SHOW, 1000, None)).unwrap().exit_code, Some(0));
    let first = Events::new();
    let done = session.turn(turn("show('a'); show('x' * 2000)", 1000, Some(first.clone()))).unwrap();
    assert_eq!(done.truncated.names(), ["displays"]);
    let got = all(&first);
    let [Event::Display(a), Event::Stdout(answers)] = &got[..] else { panic!("{got:?}") };
    assert_eq!((plain(a.json()), text(answers)), ("a".into(), "kept\ncut\n".into()));
    // The next turn: no queue, and a cap afresh.
    let done = session.turn(turn("show('b')", 1000, None)).unwrap();
    assert_eq!(done.displays.iter().map(|d| plain(d.json())).collect::<Vec<_>>(), ["b"]);
    assert_eq!(first.next(Duration::ZERO), Next::Ended);
    session.close();
}
