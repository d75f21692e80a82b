//! The steps of starting a sandbox and a program in it: the one list of step names.
//!
//! A failure names its step, and the name travels unchanged: the agent sends it in a status's
//! `sandboxes-error-step` and in its start-up failure record, the native module raises it as
//! `NativeError.step` (and lists every name in `sandboxes._native.steps()`), and Python holds it as
//! `sandboxes.errors.Step`, whose values are these names (a test checks the two lists agree). The
//! manager's own steps (image lookup, the container engine's calls, a pod's start) are declared
//! here too, so that one list names every step.

macro_rules! steps {
    ($( $(#[doc = $doc:literal])* $variant:ident = $code:literal => $name:literal, )*) => {
        /// One step of starting a sandbox or a program in it; `name()` is its one spelling.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Step {
            $( $(#[doc = $doc])* $variant = $code, )*
        }

        impl Step {
            /// Every step, in declaration order.
            pub const ALL: &'static [Step] = &[$(Step::$variant),*];

            /// The step's name (snake_case), the same on every layer.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Step::$variant => $name,)*
                }
            }
        }
    };
}

steps! {
    // --- a program's start (the agent's executor; `SpawnError::Isolation`) ---
    /// The pipes of a program's stdio.
    Pipe = 1 => "pipe",
    /// The fork (clone) of the program; EAGAIN here is the sandbox's process limit.
    Fork = 2 => "fork",
    /// Joining a cgroup: a program its exec cgroup, a local sandbox's agent the sandbox's.
    JoinCgroup = 3 => "join_cgroup",
    /// setsid: the program's own session and process group (the launcher's child's too).
    SetSid = 4 => "set_sid",
    Rlimit = 5 => "rlimit",
    /// Entering the working directory (a request's `cwd`).
    Chdir = 6 => "chdir",
    SetGroups = 7 => "set_groups",
    SetGid = 8 => "set_gid",
    SetUid = 9 => "set_uid",
    NoNewPrivs = 10 => "no_new_privs",
    Seccomp = 11 => "seccomp",
    Dup2 = 12 => "dup2",
    /// The execve of the program.
    Exec = 13 => "exec",
    /// Creating a cgroup: a program's exec cgroup, a local sandbox's cgroup.
    CreateCgroup = 14 => "create_cgroup",
    /// Writing a cgroup's limit.
    CgroupLimit = 15 => "cgroup_limit",
    Landlock = 16 => "landlock",
    /// Making or entering a user namespace (the programs', or a local sandbox's id map).
    UserNs = 17 => "user_ns",

    // --- the agent's start-up (`StartError`, reported on its readiness channel) ---
    /// Reading the agent's token (fd, file or environment).
    Token = 18 => "token",
    /// The agent's flags are wrong or contradict each other.
    Flags = 19 => "flags",
    Hostname = 20 => "hostname",
    /// Bringing up `lo` in the sandbox's network namespace.
    Loopback = 21 => "loopback",
    /// Binding or adopting the socket the agent serves on.
    Listen = 22 => "listen",
    /// The egress allow-list: its policy, helper, network namespace, proxy and DNS sockets.
    Egress = 23 => "egress",
    /// A mount of the sandbox's root file system (tmpfs, bind, overlay, proc).
    Mount = 24 => "mount",
    /// Creating a directory or file of the sandbox's root file system.
    RootFile = 25 => "root_file",
    PivotRoot = 26 => "pivot_root",
    /// The idmapped mount of the image into the programs' user namespace.
    IdMap = 27 => "id_map",
    /// Keeping the capabilities the agent needs as it moves to its own ids (a root pod's).
    Capabilities = 28 => "capabilities",
    /// Creating the work directory (an agent that builds no root).
    WorkDir = 29 => "work_dir",
    /// The agent's async runtime and signal handlers.
    Runtime = 30 => "runtime",
    /// The executor: its seccomp filter, cgroup, reaper.
    Executor = 31 => "executor",

    // --- the local launcher (the native module) and its child ---
    /// The sandbox's run directory (socket, token, readiness) on the host.
    RunDir = 32 => "run_dir",
    /// Binding the agent's socket in the run directory.
    Bind = 33 => "bind",
    /// Opening /dev/null for the agent's stdio.
    Devnull = 34 => "devnull",
    /// Cloning the agent's process into new namespaces.
    Clone = 35 => "clone",
    /// Releasing the launcher's child (or the child waiting for it).
    Sync = 36 => "sync",
    CgroupNamespace = 37 => "cgroup_namespace",
    /// Moving the child's descriptors where the agent expects them.
    Fds = 38 => "fds",
    /// The execve of the agent binary.
    ExecAgent = 39 => "exec_agent",
    /// Reading the agent's readiness channel.
    ReadyPipe = 40 => "ready_pipe",
    /// The agent exited or was killed before it was ready, without a report of its own.
    AgentStart = 41 => "agent_start",
    /// The agent did not become ready in time.
    ReadyTimeout = 42 => "ready_timeout",

    // --- the manager (Python: pool and backends) ---
    /// Importing the native module.
    Import = 43 => "import",
    /// Finding the agent binary.
    AgentPath = 44 => "agent_path",
    /// Claiming a host id range for the sandbox's user namespace.
    IdRange = 45 => "id_range",
    /// Finding, unpacking or checking the sandbox's image.
    Image = 46 => "image",
    /// The container's entrypoint (its shell) could not run.
    Entrypoint = 47 => "entrypoint",
    /// The image holds no executable agent at the agent's path.
    Agent = 48 => "agent",
    /// The container engine's calls.
    Inspect = 49 => "inspect",
    Create = 50 => "create",
    Start = 51 => "start",
    Remove = 52 => "remove",
    List = 53 => "list",
    /// The template's create timeout passed.
    Timeout = 54 => "timeout",
    /// A pod did not start.
    Pod = 55 => "pod",
    /// Another replica took the object (a pod, a claim).
    Conflict = 56 => "conflict",
    /// The backend closed while the sandbox started.
    Closed = 57 => "closed",

    // --- a program's start, continued ---
    /// Opening a program's pseudo-terminal or making it the program's controlling terminal.
    Terminal = 58 => "terminal",
}

impl Step {
    /// The step whose code (`as u8`) is `code`, as reported through a child's pipe.
    pub fn from_code(code: u8) -> Option<Step> {
        Step::ALL.iter().copied().find(|s| *s as u8 == code)
    }

    /// The step named `name`.
    pub fn from_name(name: &str) -> Option<Step> {
        Step::ALL.iter().copied().find(|s| s.name() == name)
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::Step;

    #[test]
    fn codes_and_names_are_unique_and_round_trip() {
        let mut names = std::collections::HashSet::new();
        for &s in Step::ALL {
            assert_eq!(Step::from_code(s as u8), Some(s));
            assert_eq!(Step::from_name(s.name()), Some(s));
            assert!(names.insert(s.name()), "{} twice", s.name());
            let n = s.name();
            assert!(n
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        }
        assert_eq!(Step::from_code(0), None);
    }
}
