//! Spawning and isolation of sandboxed programs.
//!
//! The agent builds one [`Executor`] at start-up and asks it to start programs. Every program runs
//! in its own process group and (where cgroups are usable) its own child cgroup, as an unprivileged
//! uid/gid, with `no_new_privs`, a seccomp filter and rlimits. Timeouts and memory kills take down
//! the whole process tree. Output is capped per stream.
//!
//! The executor owns child reaping for the whole process (see [`reaper`]): code sharing the process
//! must not wait for children of its own.

pub mod caps;
pub mod cgroup;
pub mod child_stack;
pub mod error;
pub mod fdpass;
pub mod fds;
pub mod landlock;
pub mod limits;
pub mod pty;
pub mod readiness;
pub mod reaper;
pub mod run;
pub mod seccomp;
pub mod spawn;
mod spawner;
pub mod step;
mod supervise;
pub mod template;
mod tree;
pub mod userns;
mod zygote;

pub use error::{SetupError, SpawnError, Step};
pub use limits::Limits;
pub use pty::TerminalSize;
pub use run::{Account, Capabilities, Command, Event, Executor, ExecutorConfig, Outcome, Running};
