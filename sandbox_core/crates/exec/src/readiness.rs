//! The agent's readiness channel (a pipe or FIFO the manager reads): one byte `R` once the agent
//! serves, or, if its start-up failed, one failure record `F{step}\n{message}` naming the step
//! (`Step::name`) and what failed, written in one `write` (at most `PIPE_BUF` bytes, so a reader
//! gets it whole) before the agent exits. End-of-file without either: the agent died unreported
//! (killed, crashed), which the manager reports as `Step::AgentStart`.

use crate::step::Step;

/// The byte an agent that serves writes.
pub const READY: u8 = b'R';
/// The first byte of a failure record.
pub const FAILED: u8 = b'F';
/// The most a record takes (`PIPE_BUF`: a pipe's write of up to this many bytes is atomic).
pub const MAX_RECORD: usize = 4096;

/// The failure record of `step` with `message` (cut to fit `MAX_RECORD`, on a char boundary).
pub fn failure_record(step: Step, message: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAX_RECORD);
    out.push(FAILED);
    out.extend_from_slice(step.name().as_bytes());
    out.push(b'\n');
    let mut end = message.len().min(MAX_RECORD - out.len());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&message.as_bytes()[..end]);
    out
}

/// What a manager read from the channel.
#[derive(Debug, PartialEq, Eq)]
pub enum Report {
    Ready,
    /// The step (`None`: a name this build does not know, kept in `name`) and the message.
    Failed {
        step: Option<Step>,
        name: String,
        message: String,
    },
    /// End-of-file, or bytes that are neither: the agent died without a report.
    Unreported,
}

/// Parses what was read from the channel (the whole record: it arrives in one read).
pub fn parse(data: &[u8]) -> Report {
    match data.split_first() {
        Some((&READY, _)) => Report::Ready,
        Some((&FAILED, rest)) => {
            let text = String::from_utf8_lossy(rest);
            let (name, message) = text.split_once('\n').unwrap_or((&text, ""));
            Report::Failed {
                step: Step::from_name(name),
                name: name.to_string(),
                message: message.to_string(),
            }
        }
        _ => Report::Unreported,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_fits_a_pipe_buffer() {
        let r = failure_record(Step::Mount, "mount /x at /y: No such file or directory");
        assert_eq!(
            parse(&r),
            Report::Failed {
                step: Some(Step::Mount),
                name: "mount".into(),
                message: "mount /x at /y: No such file or directory".into()
            }
        );
        let long = "é".repeat(5000);
        let r = failure_record(Step::Flags, &long);
        assert!(r.len() <= MAX_RECORD);
        assert!(matches!(
            parse(&r),
            Report::Failed {
                step: Some(Step::Flags),
                ..
            }
        ));
        assert_eq!(parse(b"R"), Report::Ready);
        assert_eq!(parse(b""), Report::Unreported);
    }
}
