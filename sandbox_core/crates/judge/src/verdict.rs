//! From what a case's execution did to its verdict.

use sandbox_exec::Outcome;
use sandbox_proto as pb;
use sandbox_proto::Verdict;

use crate::compare;
use crate::languages::Language;

/// The verdict of a finished execution, before its output is compared.
pub fn of_outcome(o: &Outcome, lang: Language) -> Option<(Verdict, &'static str)> {
    if o.timed_out || o.cpu_limited {
        return Some((Verdict::TimeLimit, "time limit exceeded"));
    }
    if o.oom_killed {
        return Some((Verdict::MemoryLimit, "memory limit exceeded"));
    }
    if o.stdout_truncated || o.stderr_truncated {
        return Some((Verdict::OutputLimit, "output limit exceeded"));
    }
    if o.exit_code != Some(0) {
        // Managed runtimes report a failed allocation themselves before the kernel has to
        // kill them (within their heap bound, or the cgroup's).
        let tail = &o.stderr[o.stderr.len().saturating_sub(4096)..];
        if let Some(marker) = lang.out_of_memory_marker() {
            if tail.windows(marker.len()).any(|w| w == marker.as_bytes()) {
                return Some((
                    Verdict::MemoryLimit,
                    "memory limit exceeded (the runtime ran out of memory)",
                ));
            }
        }
        return Some((
            Verdict::RuntimeError,
            if o.signal.is_some() {
                "killed by a signal"
            } else {
                "non-zero exit status"
            },
        ));
    }
    None
}

/// The verdict of a case. `token`: for a case with a check script, the line its runner prints
/// last once the check has run to its end; it is cut from the output shown.
pub fn judge(
    o: &Outcome,
    lang: Language,
    case: &pb::TestCase,
    token: Option<&[u8]>,
    mode: pb::Compare,
    tolerance: f64,
    excerpt: usize,
) -> pb::CaseResult {
    let completed = token.filter(|t| o.stdout.ends_with(t));
    let stdout = match completed {
        Some(t) => &o.stdout[..o.stdout.len() - t.len()],
        None => &o.stdout[..],
    };
    let (verdict, message) = match of_outcome(o, lang) {
        Some((v, m)) => (v, m.to_string()),
        None if !case.check.is_empty() && token.is_some() && completed.is_none() => (
            Verdict::WrongAnswer,
            "the program ended before its check ran to the end".to_string(),
        ),
        None if !case.check.is_empty() => (Verdict::Accepted, String::new()),
        None => match compare::differ(mode, &o.stdout, &case.expected_output, tolerance) {
            None => (Verdict::Accepted, String::new()),
            Some(why) => (Verdict::WrongAnswer, why),
        },
    };
    pb::CaseResult {
        verdict: verdict as i32,
        exit_code: o.exit_code.unwrap_or(-1),
        signal: o.signal.unwrap_or(0),
        wall_time_s: o.wall_time.as_secs_f64(),
        cpu_time_s: o.cpu_time.as_secs_f64(),
        peak_memory_bytes: o.peak_memory_bytes,
        stdout: bytes::Bytes::copy_from_slice(&stdout[..stdout.len().min(excerpt)]),
        stderr: bytes::Bytes::copy_from_slice(&o.stderr[..o.stderr.len().min(excerpt)]),
        message,
        path: if o.zygote {
            pb::ExecPath::Zygote
        } else {
            pb::ExecPath::Spawn
        } as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome() -> Outcome {
        Outcome {
            exit_code: Some(0),
            ..Default::default()
        }
    }

    fn case(expected: &str) -> pb::TestCase {
        pb::TestCase {
            expected_output: expected.as_bytes().to_vec().into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_check_passes_only_with_its_token_at_the_end() {
        let check = pb::TestCase {
            check: "assert f() == 1\n".into(),
            ..Default::default()
        };
        let token = b"\n0123abcd\n".as_slice();
        let run = |stdout: &[u8], exit: i32| {
            let mut o = outcome();
            o.exit_code = Some(exit);
            o.stdout = stdout.to_vec();
            judge(
                &o,
                Language::Python,
                &check,
                Some(token),
                pb::Compare::Exact,
                1e-6,
                100,
            )
        };
        let r = run(b"hello\n\n0123abcd\n", 0);
        assert_eq!(r.verdict, Verdict::Accepted as i32);
        // The token is not part of the output shown.
        assert_eq!(&r.stdout[..], b"hello\n");
        // Exit 0 before the check ended (sys.exit in the program): no token.
        let r = run(b"hello\n", 0);
        assert_eq!(r.verdict, Verdict::WrongAnswer as i32);
        assert!(r.message.contains("before its check"), "{}", r.message);
        // A guessed or partial token is not the token.
        assert_eq!(run(b"\n0123abc\n", 0).verdict, Verdict::WrongAnswer as i32);
        assert_eq!(
            run(b"\n0123abcd\nmore", 0).verdict,
            Verdict::WrongAnswer as i32
        );
        // A failed check stays a runtime error.
        assert_eq!(run(b"", 1).verdict, Verdict::RuntimeError as i32);
    }

    #[test]
    fn limits_come_before_output() {
        let mut o = outcome();
        o.timed_out = true;
        o.stdout = b"3\n".to_vec();
        let r = judge(
            &o,
            Language::C,
            &case("3"),
            None,
            pb::Compare::Whitespace,
            1e-6,
            100,
        );
        assert_eq!(r.verdict, Verdict::TimeLimit as i32);
        let mut o = outcome();
        o.oom_killed = true;
        o.exit_code = None;
        assert_eq!(
            judge(
                &o,
                Language::C,
                &case(""),
                None,
                pb::Compare::Whitespace,
                1e-6,
                100
            )
            .verdict,
            Verdict::MemoryLimit as i32
        );
        let mut o = outcome();
        o.stdout_truncated = true;
        assert_eq!(
            judge(
                &o,
                Language::C,
                &case(""),
                None,
                pb::Compare::Whitespace,
                1e-6,
                100
            )
            .verdict,
            Verdict::OutputLimit as i32
        );
    }

    #[test]
    fn output_decides_between_accepted_and_wrong_answer() {
        let mut o = outcome();
        o.stdout = b"3\n".to_vec();
        assert_eq!(
            judge(
                &o,
                Language::C,
                &case("3"),
                None,
                pb::Compare::Whitespace,
                1e-6,
                100
            )
            .verdict,
            Verdict::Accepted as i32
        );
        let r = judge(
            &o,
            Language::C,
            &case("4"),
            None,
            pb::Compare::Whitespace,
            1e-6,
            100,
        );
        assert_eq!(r.verdict, Verdict::WrongAnswer as i32);
        assert!(r.message.contains("token 1"));
    }

    #[test]
    fn python_memory_error_is_a_memory_limit() {
        let mut o = outcome();
        o.exit_code = Some(1);
        o.stderr = b"Traceback...\nMemoryError\n".to_vec();
        assert_eq!(
            judge(
                &o,
                Language::Python,
                &case(""),
                None,
                pb::Compare::Whitespace,
                1e-6,
                100
            )
            .verdict,
            Verdict::MemoryLimit as i32
        );
        o.stderr = b"ZeroDivisionError\n".to_vec();
        assert_eq!(
            judge(
                &o,
                Language::Python,
                &case(""),
                None,
                pb::Compare::Whitespace,
                1e-6,
                100
            )
            .verdict,
            Verdict::RuntimeError as i32
        );
    }
}
