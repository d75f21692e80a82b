//! ExecStream: the first message starts the program, later ones feed stdin or send signals; events
//! flow back until `exit`. The program dies if the caller goes away.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use sandbox_exec::{Event, Executor};
use sandbox_proto as pb;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use crate::error::AgentError;
use crate::server::exec;

pub const KEEPALIVE: Duration = Duration::from_secs(10);

pub type EventTx = mpsc::Sender<Result<pb::ExecEvent, Status>>;

fn event(kind: pb::exec_event::Kind) -> Result<pb::ExecEvent, Status> {
    Ok(pb::ExecEvent { kind: Some(kind) })
}

/// The events of a program the kernel refused to start: its message on stderr, then its exit.
async fn refused(mut result: pb::ExecResult, tx: EventTx) {
    let stderr = std::mem::take(&mut result.stderr);
    let _ = tx.send(event(pb::exec_event::Kind::Stderr(stderr))).await;
    let _ = tx.send(event(pb::exec_event::Kind::Exit(result))).await;
}

/// Starts the program named by the first message and returns the task driving it.
pub async fn start(
    executor: Arc<Executor>,
    accounts: super::Accounts,
    work_dir: std::path::PathBuf,
    mut input: Streaming<pb::ExecInput>,
    tx: EventTx,
) -> Result<(), Status> {
    let first = input.message().await?.ok_or_else(|| {
        Status::invalid_argument("empty stream: the first message must carry `start`")
    })?;
    let Some(pb::exec_input::Kind::Start(req)) = first.kind else {
        return Err(Status::invalid_argument(
            "the first message must carry `start`",
        ));
    };
    let mut cmd = exec::command(&req, &executor.config().default_limits, &work_dir)?;
    accounts.apply(&mut cmd, &req.user)?;
    let mut running = match executor.start(cmd) {
        Ok(running) => running,
        Err(e) => {
            let result = exec::refused_by_kernel(&e, &req.argv[0]).ok_or(AgentError::from(e))?;
            tokio::spawn(refused(result, tx));
            return Ok(());
        }
    };
    tokio::spawn(async move {
        let mut stdin = running.stdin.take();
        let _ = tx
            .send(event(pb::exec_event::Kind::Started(
                pb::exec_event::Started { pid: running.pid },
            )))
            .await;
        let mut input_open = true;
        let mut keepalive =
            tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
        loop {
            tokio::select! {
                ev = running.events.recv() => {
                    let kind = match ev {
                        Some(Event::Stdout(b)) => pb::exec_event::Kind::Stdout(b),
                        Some(Event::Stderr(b)) => pb::exec_event::Kind::Stderr(b),
                        Some(Event::Exit(o)) => pb::exec_event::Kind::Exit(exec::result(o, pb::ExecPath::Spawn)),
                        None => break,
                    };
                    let exit = matches!(kind, pb::exec_event::Kind::Exit(_));
                    // A caller that went away drops `running`, which kills the program.
                    if tx.send(event(kind)).await.is_err() || exit {
                        break;
                    }
                }
                msg = input.next(), if input_open => match msg {
                    Some(Ok(pb::ExecInput { kind: Some(k) })) => match k {
                        pb::exec_input::Kind::Stdin(data) => {
                            if let Some(w) = stdin.as_mut() {
                                if w.write_all(&data).await.is_err() {
                                    stdin = None; // the program closed its stdin
                                }
                            }
                        }
                        pb::exec_input::Kind::CloseStdin(_) => stdin = None,
                        pb::exec_input::Kind::Signal(signo) => {
                            if !(1..=64).contains(&signo) {
                                let _ = tx.send(Err(Status::invalid_argument(format!("no signal {signo}")))).await;
                                break;
                            }
                            let _ = running.signal(signo);
                        }
                        pb::exec_input::Kind::Resize(size) => {
                            let resized = exec::terminal_size(&size)
                                .map_err(Status::from)
                                .and_then(|size| running.resize(size).map_err(|e| {
                                    Status::failed_precondition(format!("cannot resize: {e} (a terminal is asked for at start)"))
                                }));
                            if let Err(status) = resized {
                                let _ = tx.send(Err(status)).await;
                                break;
                            }
                        }
                        pb::exec_input::Kind::Start(_) => {
                            let _ = tx.send(Err(Status::invalid_argument("`start` may only be the first message"))).await;
                            break;
                        }
                    },
                    Some(Ok(_)) => {}
                    // Half-close by the caller: the program keeps running until it exits.
                    None => input_open = false,
                    Some(Err(_)) => break,
                },
                // The caller went away (reset, cancel): stop now, not at the next event.
                _ = tx.closed() => break,
                _ = keepalive.tick() => {
                    if tx.send(event(pb::exec_event::Kind::Keepalive(pb::exec_event::Keepalive {}))).await.is_err() {
                        break;
                    }
                }
            }
        }
        drop(running);
    });
    Ok(())
}
