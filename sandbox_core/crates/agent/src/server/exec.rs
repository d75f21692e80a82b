//! Exec requests: validation, limits with defaults, and the result message.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use sandbox_exec::{Command, Limits, Outcome, SpawnError, Step, TerminalSize};
use sandbox_proto as pb;

use crate::error::AgentError;

pub const MAX_ARGV: usize = 65_536;
pub const MAX_ARG_BYTES: usize = 8 << 20;

fn secs(v: f64, what: &str) -> Result<Option<Duration>, AgentError> {
    if v == 0.0 {
        return Ok(None);
    }
    if !v.is_finite() || v < 0.0 {
        return Err(AgentError::Invalid(format!(
            "{what} must be a positive number of seconds, got {v}"
        )));
    }
    Duration::try_from_secs_f64(v)
        .map(Some)
        .map_err(|_| AgentError::Invalid(format!("{what} out of range: {v}")))
}

/// Request limits over the agent's defaults (zero fields keep the default), then validated.
pub fn resolve_limits(req: Option<&pb::Limits>, defaults: &Limits) -> Result<Limits, AgentError> {
    let mut l = defaults.clone();
    if let Some(r) = req {
        if let Some(d) = secs(r.wall_time_s, "wall_time_s")? {
            l.wall_time = d;
        }
        if let Some(d) = secs(r.cpu_time_s, "cpu_time_s")? {
            l.cpu_time = d;
        }
        if r.memory_bytes != 0 {
            l.memory_bytes = r.memory_bytes;
        }
        if r.max_pids != 0 {
            l.max_pids = r.max_pids;
        }
        if r.max_output_bytes != 0 {
            l.max_output_bytes = r.max_output_bytes;
        }
        if r.max_file_size_bytes != 0 {
            l.max_file_size_bytes = r.max_file_size_bytes;
        }
        if r.max_open_files != 0 {
            l.max_open_files = r.max_open_files;
        }
        l.kill_on_output_limit = r.kill_on_output_limit;
    }
    l.validate().map_err(AgentError::Invalid)?;
    Ok(l)
}

/// `work_dir` anchors a relative `cwd`.
pub fn command(
    req: &pb::ExecRequest,
    defaults: &Limits,
    work_dir: &std::path::Path,
) -> Result<Command, AgentError> {
    if req.argv.is_empty() || req.argv[0].is_empty() {
        return Err(AgentError::Invalid(
            "argv is empty: name the program to run".into(),
        ));
    }
    if req.argv.len() > MAX_ARGV {
        return Err(AgentError::Invalid(format!(
            "{} arguments (max {MAX_ARGV})",
            req.argv.len()
        )));
    }
    let bytes: usize = req.argv.iter().map(|a| a.len()).sum::<usize>()
        + req
            .env
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>();
    if bytes > MAX_ARG_BYTES {
        return Err(AgentError::Invalid(format!(
            "arguments and environment take {bytes} bytes (max {MAX_ARG_BYTES})"
        )));
    }
    for k in req.env.keys() {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(AgentError::Invalid(format!(
                "invalid environment variable name {k:?}"
            )));
        }
    }
    Ok(Command {
        argv: req.argv.clone(),
        env: req
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
        clear_env: req.clear_env,
        cwd: (!req.cwd.is_empty()).then(|| work_dir.join(PathBuf::from(&req.cwd))),
        limits: resolve_limits(req.limits.as_ref(), defaults)?,
        write_within: None,
        keep_descendants: req.keep_descendants,
        zygote_entry: None,
        terminal: req.terminal.as_ref().map(terminal_size).transpose()?,
        account: None,
    })
}

/// A terminal size of the protocol, checked.
pub fn terminal_size(t: &pb::TerminalSize) -> Result<TerminalSize, AgentError> {
    let side = |v: u32| u16::try_from(v).unwrap_or(0);
    TerminalSize {
        rows: side(t.rows),
        cols: side(t.cols),
    }
    .validate()
    .map_err(|_| {
        AgentError::Invalid(format!(
            "a terminal needs 1 to 65535 rows and columns, got {}x{}",
            t.rows, t.cols
        ))
    })
}

pub fn result(o: Outcome, path: pb::ExecPath) -> pb::ExecResult {
    pb::ExecResult {
        exit_code: o.exit_code.unwrap_or(-1),
        signal: o.signal.unwrap_or(0),
        stdout: o.stdout.into(),
        stderr: o.stderr.into(),
        timed_out: o.timed_out,
        oom_killed: o.oom_killed,
        stdout_truncated: o.stdout_truncated,
        stderr_truncated: o.stderr_truncated,
        wall_time_s: o.wall_time.as_secs_f64(),
        cpu_time_s: o.cpu_time.as_secs_f64(),
        peak_memory_bytes: o.peak_memory_bytes,
        cpu_limited: o.cpu_limited,
        pids_limited: o.pids_limited,
        file_size_limited: o.file_size_limited,
        path: if o.zygote { pb::ExecPath::Zygote } else { path } as i32,
    }
}

/// A program the kernel refuses to start because its arguments and environment exceed the
/// kernel's limits (E2BIG, e.g. `python3 -c` with a few hundred KiB of code) failed as a program:
/// its result says so as a shell does (exit 126, the message on stderr), so a caller scores it
/// instead of retrying an infrastructure error that would repeat forever.
pub fn refused_by_kernel(e: &SpawnError, argv0: &str) -> Option<pb::ExecResult> {
    match e {
        SpawnError::Isolation {
            step: Step::Exec,
            source,
        } if source.raw_os_error() == Some(libc::E2BIG) => Some(pb::ExecResult {
            exit_code: 126,
            stderr: format!(
                "{argv0}: Argument list too long (arguments and environment exceed the \
                 kernel's limit: pass large data through a file or stdin)\n"
            )
            .into_bytes()
            .into(),
            path: pb::ExecPath::Spawn as i32,
            ..Default::default()
        }),
        _ => None,
    }
}

pub fn limits_message(l: &Limits) -> pb::Limits {
    pb::Limits {
        wall_time_s: l.wall_time.as_secs_f64(),
        cpu_time_s: l.cpu_time.as_secs_f64(),
        memory_bytes: l.memory_bytes,
        max_pids: l.max_pids,
        max_output_bytes: l.max_output_bytes,
        max_file_size_bytes: l.max_file_size_bytes,
        max_open_files: l.max_open_files,
        kill_on_output_limit: l.kill_on_output_limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn req(argv: &[&str]) -> pb::ExecRequest {
        pb::ExecRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn empty_argv_is_invalid() {
        assert!(matches!(
            command(&req(&[]), &Limits::default(), Path::new("/work")),
            Err(AgentError::Invalid(_))
        ));
        assert!(matches!(
            command(&req(&[""]), &Limits::default(), Path::new("/work")),
            Err(AgentError::Invalid(_))
        ));
    }

    #[test]
    fn zero_limits_keep_defaults_and_absurd_ones_are_refused() {
        let d = Limits::default();
        let l = resolve_limits(
            Some(&pb::Limits {
                wall_time_s: 2.5,
                ..Default::default()
            }),
            &d,
        )
        .unwrap();
        assert_eq!(l.wall_time, Duration::from_millis(2500));
        assert_eq!(l.memory_bytes, d.memory_bytes);
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1e30] {
            let r = resolve_limits(
                Some(&pb::Limits {
                    wall_time_s: bad,
                    ..Default::default()
                }),
                &d,
            );
            assert!(matches!(r, Err(AgentError::Invalid(_))), "{bad}");
        }
        let r = resolve_limits(
            Some(&pb::Limits {
                memory_bytes: u64::MAX,
                ..Default::default()
            }),
            &d,
        );
        assert!(matches!(r, Err(AgentError::Invalid(_))));
    }

    #[test]
    fn bad_env_names_are_invalid() {
        let mut r = req(&["true"]);
        r.env.insert("A=B".into(), "x".into());
        assert!(matches!(
            command(&r, &Limits::default(), Path::new("/work")),
            Err(AgentError::Invalid(_))
        ));
    }
}
