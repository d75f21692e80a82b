//! Programs' pids start above the agent's start-up's.
//!
//! A memory snapshot's programs keep their pids when they are restored into a fresh sandbox of
//! the same template (CRIU gives each task its dumped pid), so no task of that sandbox may hold
//! one of them. Everything the agent starts before it serves (the user namespace's fork, its
//! threads, an eager zygote) takes the pid namespace's first pids, how many varies by backend and
//! by a few short-lived processes; moving the namespace's last pid up to [`FLOOR`] once start-up
//! is done gives programs pids none of those ever has.

use std::io::{Read, Seek, Write};

/// The last pid of the agent's start-up (the kernel reserves as many below for its own in the
/// initial pid namespace); programs and later threads get pids above it.
pub const FLOOR: u32 = 300;

const NS_LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";

/// The pid namespace's `ns_last_pid`, opened before a new root makes `/proc/sys` read-only.
static HELD: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();

/// Opens `path`, the pid namespace's `ns_last_pid`, for [`start_programs_above_start_up`],
/// before it is made read-only.
pub fn hold(path: &std::path::Path) -> std::io::Result<()> {
    let f = open(path)?;
    let _ = HELD.set(f);
    Ok(())
}

fn open(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
}

/// Moves this pid namespace's last pid up to [`FLOOR`] (the writer's own pid namespace's: the
/// agent is its init). Needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE over the namespace's owner,
/// which the local and docker backends' agents have (PermissionDenied elsewhere: a pod's); without
/// them pids go on from where start-up left them, and a restore that would reuse one in use is
/// refused by the manager, naming it.
pub fn start_programs_above_start_up() -> std::io::Result<()> {
    let mut f = match HELD.get() {
        Some(f) => f.try_clone()?,
        None => open(std::path::Path::new(NS_LAST_PID))?,
    };
    let mut now = String::new();
    f.read_to_string(&mut now)?;
    let now: u32 = now.trim().parse().unwrap_or(0);
    if now >= FLOOR {
        return Ok(());
    }
    f.rewind()?;
    f.write_all(FLOOR.to_string().as_bytes())
}
