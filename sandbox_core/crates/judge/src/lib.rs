//! The reward engine's judge: one call carries the program, its language, the test cases and the
//! limits; the program is compiled once and every case runs as its own isolated execution.

pub mod compare;
pub mod languages;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sandbox_exec::{Command, Executor, Limits};
use sandbox_proto as pb;

pub use languages::Language;

/// Most test cases one call may carry.
pub const MAX_CASES: usize = 10_000;
/// Most submissions one batch may carry, and most cases over all of them.
pub const MAX_BATCH: usize = 4096;
pub const MAX_BATCH_CASES: usize = 100_000;
const DEFAULT_EXCERPT: usize = 1024;
const DEFAULT_TOLERANCE: f64 = 1e-6;

#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error("{0}")]
    Invalid(String),
    #[error("scratch dir {path}: {source}")]
    Scratch {
        path: String,
        source: std::io::Error,
    },
}

/// Where a call's files go, and who owns them.
pub struct Scratch {
    pub root: PathBuf,
    pub uid: u32,
    pub gid: u32,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

struct CaseDir(PathBuf);

impl Drop for CaseDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The call's directory belongs to the agent and is read-only to programs: the source, the
/// compiled binary and the check scripts cannot be changed by one case to fool the next. Each case
/// runs in a fresh directory of its own (writable by the program, its `TMPDIR`), removed after the
/// case.
impl Scratch {
    fn make(&self) -> Result<CaseDir, JudgeError> {
        let dir = self.root.join(format!(
            "judge-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let err = |source| JudgeError::Scratch {
            path: dir.display().to_string(),
            source,
        };
        std::fs::create_dir(&dir).map_err(err)?;
        let guard = CaseDir(dir.clone());
        set_mode(&dir, 0o755).map_err(err)?;
        Ok(guard)
    }

    /// A directory the program may write to (the compile output dir, a case's cwd).
    fn make_writable(&self, dir: &Path, name: &str) -> Result<PathBuf, JudgeError> {
        let p = dir.join(name);
        let err = |source| JudgeError::Scratch {
            path: p.display().to_string(),
            source,
        };
        std::fs::create_dir(&p).map_err(err)?;
        chown(&p, self.uid, self.gid).map_err(err)?;
        Ok(p)
    }

    /// A file the program may read but not change.
    fn write(&self, dir: &Path, name: &str, data: &[u8]) -> Result<(), JudgeError> {
        let p = dir.join(name);
        let err = |source| JudgeError::Scratch {
            path: p.display().to_string(),
            source,
        };
        std::fs::write(&p, data).map_err(err)?;
        set_mode(&p, 0o644).map_err(err)
    }

    /// A fresh random token in a file of the case's directory, readable by the program's uid (the
    /// runner reads and deletes it before the program starts); its path and the line the runner
    /// ends its output with when the check has run to its end.
    fn token_file(&self, cwd: &Path) -> Result<(PathBuf, Vec<u8>), JudgeError> {
        let p = cwd.join(".check-token");
        let err = |source| JudgeError::Scratch {
            path: p.display().to_string(),
            source,
        };
        let mut raw = [0u8; 16];
        // SAFETY: plain syscall filling a buffer we own.
        let n = unsafe { libc::getrandom(raw.as_mut_ptr().cast(), raw.len(), 0) };
        if n != raw.len() as isize {
            return Err(err(std::io::Error::last_os_error()));
        }
        let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(&p, format!("{token}\n")).map_err(err)?;
        set_mode(&p, 0o400).map_err(err)?;
        chown(&p, self.uid, self.gid).map_err(err)?;
        Ok((p, format!("\n{token}\n").into_bytes()))
    }

    /// Takes what the compile step made out of the program-writable build dir into the
    /// read-only one: a file (a binary, a script) or a tree (Java's classes).
    fn seal(
        &self,
        build: &Path,
        product: languages::Product,
        dir: &Path,
    ) -> Result<(), JudgeError> {
        let dst = dir.join(product.name);
        let err = |source| JudgeError::Scratch {
            path: dst.display().to_string(),
            source,
        };
        if product.tree {
            copy_tree(&build.join(product.name), &dst).map_err(err)
        } else {
            std::fs::copy(build.join(product.name), &dst).map_err(err)?;
            set_mode(&dst, 0o755).map_err(err)
        }
    }
}

/// A copy of the tree `src` at `dst`: directories 0755, files 0644, no links followed or kept.
fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir(dst)?;
    set_mode(dst, 0o755)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let to = dst.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &to)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &to)?;
            set_mode(&to, 0o644)?;
        }
    }
    Ok(())
}

fn set_mode(p: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

fn chown(p: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    match std::os::unix::fs::chown(p, Some(uid), Some(gid)) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(()), // not root: files stay ours
        r => r,
    }
}

fn excerpt(b: &[u8], n: usize) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(&b[..b.len().min(n)])
}

/// Limits of the compile step: generous, but bounded like everything else.
fn compile_limits(base: &Limits) -> Limits {
    Limits {
        wall_time: Duration::from_secs(30),
        cpu_time: Duration::from_secs(30),
        memory_bytes: base.memory_bytes.max(1 << 30),
        max_pids: base.max_pids.max(64),
        max_output_bytes: 64 << 10,
        kill_on_output_limit: false,
        ..base.clone()
    }
}

pub fn validate(req: &pb::RunTestsRequest) -> Result<Language, JudgeError> {
    let lang = Language::parse(&req.language).ok_or_else(|| {
        JudgeError::Invalid(format!(
            "unknown language {:?}; known: {}",
            req.language,
            Language::available().join(", ")
        ))
    })?;
    if req.tests.is_empty() {
        return Err(JudgeError::Invalid("no test cases".into()));
    }
    if req.tests.len() > MAX_CASES {
        return Err(JudgeError::Invalid(format!(
            "{} test cases (max {MAX_CASES})",
            req.tests.len()
        )));
    }
    if req.tests.iter().any(|t| !t.check.is_empty()) && !lang.supports_check() {
        return Err(JudgeError::Invalid(format!(
            "check scripts are supported for python and bash, not {}",
            lang.name()
        )));
    }
    if !req.float_tolerance.is_finite() || req.float_tolerance < 0.0 {
        return Err(JudgeError::Invalid(format!(
            "float_tolerance must be >= 0, got {}",
            req.float_tolerance
        )));
    }
    Ok(lang)
}

/// Every submission of a batch is valid, and the batch within its bounds; the error names the
/// first submission that is not.
pub fn validate_batch(subs: &[pb::RunTestsRequest]) -> Result<(), JudgeError> {
    if subs.is_empty() {
        return Err(JudgeError::Invalid("no submissions".into()));
    }
    if subs.len() > MAX_BATCH {
        return Err(JudgeError::Invalid(format!(
            "{} submissions (max {MAX_BATCH})",
            subs.len()
        )));
    }
    let cases: usize = subs.iter().map(|s| s.tests.len()).sum();
    if cases > MAX_BATCH_CASES {
        return Err(JudgeError::Invalid(format!(
            "{cases} test cases in the batch (max {MAX_BATCH_CASES})"
        )));
    }
    for (i, sub) in subs.iter().enumerate() {
        validate(sub).map_err(|e| JudgeError::Invalid(format!("submission {i}: {e}")))?;
    }
    Ok(())
}

/// The report of a submission that could not be judged (its files could not be made): each of
/// its `cases` a sandbox error saying why.
pub fn unjudged(cases: usize, message: String) -> pb::RunTestsReport {
    pb::RunTestsReport {
        cases: (0..cases)
            .map(|_| pb::CaseResult {
                verdict: pb::Verdict::SandboxError as i32,
                message: message.clone(),
                ..Default::default()
            })
            .collect(),
        total: cases as u32,
        compiled: true,
        ..Default::default()
    }
}

/// Compiles once (when the language needs it) and runs every case. `limits` are already resolved.
pub async fn run_tests(
    executor: &Executor,
    scratch: &Scratch,
    req: pb::RunTestsRequest,
    limits: Limits,
) -> Result<pb::RunTestsReport, JudgeError> {
    let started = Instant::now();
    let lang = validate(&req)?;
    let excerpt_n = if req.excerpt_bytes == 0 {
        DEFAULT_EXCERPT
    } else {
        req.excerpt_bytes as usize
    };
    let tolerance = if req.float_tolerance == 0.0 {
        DEFAULT_TOLERANCE
    } else {
        req.float_tolerance
    };
    let compare = pb::Compare::try_from(req.compare).unwrap_or(pb::Compare::Unspecified);
    let dir = scratch.make()?;
    scratch.write(&dir.0, lang.source_file(), req.source.as_bytes())?;
    if lang == Language::Python && req.tests.iter().any(|t| !t.check.is_empty()) {
        scratch.write(
            &dir.0,
            "runner.py",
            languages::python_check_runner().as_bytes(),
        )?;
    }
    let mut report = pb::RunTestsReport {
        total: req.tests.len() as u32,
        compiled: true,
        ..Default::default()
    };

    let build = dir.0.join("build");
    if let (Some(argv), Some(product)) = (lang.compile(&dir.0, &build), lang.product()) {
        scratch.make_writable(&dir.0, "build")?;
        // The compiler's temporary files go to the build dir too, removed with it: never to the
        // sandbox's /tmp, which a program may have filled.
        let env = [("TMPDIR".to_string(), build.display().to_string())].into();
        let cmd = Command {
            argv,
            env,
            clear_env: false,
            cwd: Some(build.clone()),
            limits: compile_limits(&limits),
            write_within: None,
            keep_descendants: false,
            zygote_entry: None,
            terminal: None,
            account: None,
        };
        let t = Instant::now();
        let outcome = executor.run(cmd, bytes::Bytes::new()).await;
        report.compile_time_s = t.elapsed().as_secs_f64();
        let ok = matches!(&outcome, Ok(o) if o.exit_code == Some(0) && !o.timed_out);
        if !ok {
            report.compiled = false;
            let msg = match outcome {
                Ok(o) => {
                    let mut out = o.stderr;
                    out.extend_from_slice(&o.stdout);
                    report.compile_output = excerpt(&out, 16 << 10);
                    if o.timed_out {
                        "compilation timed out".to_string()
                    } else {
                        "compilation failed".to_string()
                    }
                }
                Err(e) => format!("compiler could not run: {e}"),
            };
            report.cases = req
                .tests
                .iter()
                .map(|_| pb::CaseResult {
                    verdict: pb::Verdict::CompileError as i32,
                    message: msg.clone(),
                    ..Default::default()
                })
                .collect();
            report.wall_time_s = started.elapsed().as_secs_f64();
            return Ok(report);
        }
        scratch.seal(&build, product, &dir.0)?;
        let _ = std::fs::remove_dir_all(&build);
    }

    let mut case_limits = limits.clone();
    case_limits.kill_on_output_limit = true;
    let mut failed = false;
    for (i, case) in req.tests.iter().enumerate() {
        if failed && req.stop_on_first_failure {
            report.cases.push(pb::CaseResult {
                verdict: pb::Verdict::Skipped as i32,
                message: "an earlier case failed".into(),
                ..Default::default()
            });
            continue;
        }
        let check = if case.check.is_empty() {
            None
        } else {
            let name = format!(
                "check_{i}.{}",
                if lang == Language::Python { "py" } else { "sh" }
            );
            scratch.write(&dir.0, &name, case.check.as_bytes())?;
            Some(name)
        };
        let cwd = scratch.make_writable(&dir.0, &format!("case-{i}"))?;
        // A check passes only if the runner printed this token after it (see `languages`).
        let token = check
            .as_ref()
            .map(|_| scratch.token_file(&cwd))
            .transpose()?;
        // Temporary files of the case go to its own directory, removed with it.
        let env = [("TMPDIR".to_string(), cwd.display().to_string())].into();
        let cmd = Command {
            argv: lang.run(
                &dir.0,
                check
                    .as_deref()
                    .zip(token.as_ref().map(|(path, _)| path.as_path())),
            ),
            env,
            clear_env: false,
            cwd: Some(cwd.clone()),
            limits: case_limits.clone(),
            // Nothing a case writes outlives it: its directory is removed after it.
            write_within: Some(cwd.clone()),
            keep_descendants: false,
            // Through the zygote, the check runner is already compiled there.
            zygote_entry: check.as_ref().and(lang.zygote_entry()),
            terminal: None,
            account: None,
        };
        let outcome = executor.run(cmd, case.input.clone()).await;
        let _ = std::fs::remove_dir_all(&cwd);
        let result = match outcome {
            Ok(o) => verdict::judge(
                &o,
                lang,
                case,
                token.as_ref().map(|(_, marker)| marker.as_slice()),
                compare,
                tolerance,
                excerpt_n,
            ),
            Err(e) => pb::CaseResult {
                verdict: pb::Verdict::SandboxError as i32,
                message: e.to_string(),
                ..Default::default()
            },
        };
        if result.verdict == pb::Verdict::Accepted as i32 {
            report.passed += 1;
        } else {
            failed = true;
        }
        report.cases.push(result);
    }
    report.wall_time_s = started.elapsed().as_secs_f64();
    Ok(report)
}
