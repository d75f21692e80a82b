//! Programs on a pseudo-terminal (`Command::terminal`), with real processes.

mod common;

use std::time::Duration;

use common::*;
use sandbox_exec::{Event, Outcome, Running, TerminalSize};
use tokio::io::AsyncWriteExt;

fn on_terminal(mut c: sandbox_exec::Command, rows: u16, cols: u16) -> sandbox_exec::Command {
    c.terminal = Some(TerminalSize { rows, cols });
    c
}

/// Reads output until `want` is in it (bounded by the program's wall limit); all output so far.
async fn until(r: &mut Running, seen: &mut Vec<u8>, want: &str) {
    while !text(seen).contains(want) {
        match tokio::time::timeout(Duration::from_secs(20), r.events.recv()).await {
            Ok(Some(Event::Stdout(b))) => seen.extend_from_slice(&b),
            Ok(Some(Event::Stderr(b))) => panic!("stderr on a terminal: {:?}", text(&b)),
            other => panic!("{want:?} never came: {other:?}; output {:?}", text(seen)),
        }
    }
}

/// The rest of the output, and the exit.
async fn finish(r: &mut Running, seen: &mut Vec<u8>) -> Outcome {
    loop {
        match r.events.recv().await {
            Some(Event::Stdout(b)) => seen.extend_from_slice(&b),
            Some(Event::Stderr(b)) => panic!("stderr on a terminal: {:?}", text(&b)),
            Some(Event::Exit(o)) => return o,
            None => panic!("no exit event"),
        }
    }
}

#[tokio::test]
async fn stdio_is_a_terminal_of_the_asked_size_and_the_controlling_one() {
    let ex = executor();
    let c = on_terminal(
        sh(
            "test -t 0 && test -t 1 && test -t 2 && stty size && tty && echo err >&2 \
            && ps -o tty= -p $$ | grep -q pts && echo controlling",
        ),
        31,
        97,
    );
    let mut r = ex.start(c).unwrap();
    let mut out = Vec::new();
    let o = finish(&mut r, &mut out).await;
    assert_eq!(o.exit_code, Some(0), "{:?}", text(&out));
    // A terminal's output: both streams, each line ended by CR LF.
    let out = text(&out);
    let lines: Vec<&str> = out.split("\r\n").collect();
    assert_eq!(lines[0], "31 97");
    assert!(lines[1].starts_with("/dev/pts/"), "{out:?}");
    assert_eq!(&lines[2..], ["err", "controlling", ""]);
}

#[tokio::test]
async fn a_resize_is_seen_as_sigwinch_with_the_new_size() {
    let ex = executor();
    let c = on_terminal(
        sh("trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.05; done"),
        24,
        80,
    );
    let mut r = ex.start(c).unwrap();
    let mut out = Vec::new();
    until(&mut r, &mut out, "ready").await;
    r.resize(TerminalSize {
        rows: 50,
        cols: 132,
    })
    .unwrap();
    let o = finish(&mut r, &mut out).await;
    assert_eq!(o.exit_code, Some(0));
    assert!(
        text(&out).ends_with("ready\r\n50 132\r\n"),
        "{:?}",
        text(&out)
    );
    assert!(r.resize(TerminalSize { rows: 0, cols: 10 }).is_err());
}

#[tokio::test]
async fn input_is_echoed_and_ctrl_c_interrupts_the_foreground_group() {
    let ex = executor();
    let c = on_terminal(sh("read line; echo \"got $line\"; sleep 60"), 24, 80);
    let mut r = ex.start(c).unwrap();
    let mut stdin = r.stdin.take().unwrap();
    stdin.write_all(b"hello\n").await.unwrap();
    let mut out = Vec::new();
    until(&mut r, &mut out, "got hello\r\n").await;
    // The line discipline echoed the input before the program answered.
    assert!(text(&out).starts_with("hello\r\n"), "{:?}", text(&out));
    // Typed until it lands: a shell between its commands (here starting `sleep`) may not be
    // killable by it for an instant, and a Ctrl-C typed then is gone, as on any terminal.
    let o = loop {
        stdin.write_all(b"\x03").await.unwrap();
        match tokio::time::timeout(Duration::from_millis(200), r.events.recv()).await {
            Ok(Some(Event::Stdout(b))) => out.extend_from_slice(&b),
            Ok(Some(Event::Exit(o))) => break o,
            Ok(other) => panic!("{other:?}"),
            Err(_) => {}
        }
    };
    assert_eq!(o.signal, Some(libc::SIGINT), "{o:?} {:?}", text(&out));
    assert!(!o.timed_out);
}

#[tokio::test]
async fn a_fast_producer_loses_nothing_and_keeps_its_order() {
    let ex = executor();
    let mut c = on_terminal(cmd(&["seq", "1", "300000"]), 24, 80);
    c.limits.max_output_bytes = 64 << 20;
    let mut r = ex.start(c).unwrap();
    let mut out = Vec::new();
    let o = finish(&mut r, &mut out).await;
    assert_eq!(o.exit_code, Some(0));
    let want: String = (1..=300_000).map(|i| format!("{i}\r\n")).collect();
    assert_eq!(out.len(), want.len());
    assert!(out == want.as_bytes(), "output differs from seq's");
}

#[tokio::test]
async fn a_program_without_a_terminal_cannot_be_resized() {
    let ex = executor();
    let r = ex.start(sh("sleep 5")).unwrap();
    let e = r.resize(TerminalSize { rows: 10, cols: 10 }).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
}
