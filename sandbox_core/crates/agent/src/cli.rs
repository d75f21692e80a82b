//! Command line of the agent. The launcher (local), the container entrypoint (docker) and the pod
//! spec (kubernetes) all start the agent through these flags.

use std::path::PathBuf;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "sandbox-agent",
    version,
    about = "Execution agent of one sandbox"
)]
pub struct Args {
    /// Where to listen: `unix:/path/agent.sock` or `tcp:0.0.0.0:7000`.
    #[arg(long, conflicts_with = "listen_fd")]
    pub listen: Option<String>,
    /// Serve on an inherited, already listening unix socket (the local launcher binds it outside
    /// the sandbox, so user code never sees its path).
    #[arg(long)]
    pub listen_fd: Option<i32>,
    /// Write one byte to this inherited fd once serving: readiness is pushed, never polled.
    #[arg(long)]
    pub ready_fd: Option<i32>,
    /// Read the per-sandbox token from this inherited fd (until EOF).
    #[arg(long, conflicts_with = "token_file")]
    pub token_fd: Option<i32>,
    /// Read the per-sandbox token from a file (also env SANDBOX_AGENT_TOKEN_FILE).
    #[arg(long, env = "SANDBOX_AGENT_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Seconds the owner's lease lasts without renewal; the agent kills everything and exits when
    /// it lapses. 0 disables the lease.
    #[arg(long, default_value_t = 30.0)]
    pub lease_ttl: f64,
    /// Working directory of user programs and root of relative file paths.
    #[arg(long, default_value = "/work")]
    pub work_dir: PathBuf,
    /// uid user programs run as (default: nobody). Ignored when the agent is not root.
    #[arg(long, default_value_t = 65534)]
    pub uid: u32,
    #[arg(long, default_value_t = 65534)]
    pub gid: u32,
    /// Run user programs with the agent's own uid/gid (inside a user namespace, or in tests).
    #[arg(long)]
    pub keep_uid: bool,
    /// Who runs user programs: `sandbox` (the unprivileged --uid/--gid) or `root`: root of a
    /// user namespace whose ids are the host's --id-base.. (65,536 of them), with a writable root
    /// file system of --root-size bytes. `root` needs --new-root and an agent that is root.
    #[arg(long, default_value = "sandbox", value_parser = ["sandbox", "root"])]
    pub user: String,
    /// First host id of a root sandbox's user namespace (the launcher gives each sandbox its own).
    #[arg(long, default_value_t = 0)]
    pub id_base: u32,
    /// The programs' user namespace, inherited at this fd, made by the launcher with --id-base's
    /// ids (instead of made by the agent): it owns the agent's pid namespace.
    #[arg(long)]
    pub userns_fd: Option<i32>,
    /// With --userns-fd: the write end of the pipe the pid namespace's init (not the agent)
    /// watches, inherited at this fd and held for the agent's life: the init, and every process
    /// of the namespace, ends with the agent.
    #[arg(long)]
    pub init_watch_fd: Option<i32>,
    /// With --user root, for an agent that is root of a user-namespaced pod (`hostUsers: false`),
    /// which has 65,536 ids and cannot idmap its root file system: the programs' user namespace
    /// maps ids 0..65534 to the same ids of the pod's (root inside owns the image's files), and
    /// the agent, once it has built the sandbox's root, becomes id 65535 (no program's) keeping
    /// its capabilities. Instead of --id-base.
    #[arg(long)]
    pub pod_ids: bool,
    /// Size of a root sandbox's writable root (its disk) in bytes (0: 1 GiB).
    #[arg(long, default_value_t = 0)]
    pub root_size: u64,
    /// An unpacked image (a directory) to build the root on, instead of the host's /usr: the
    /// lower layer of an overlay whose upper layer is the sandbox's disk. Needs --new-root.
    #[arg(long)]
    pub image_root: Option<PathBuf>,
    /// A checkpoint layer (an unpacked `Checkpoint` stream) the sandbox is made from, repeatable,
    /// bottom first: each writable place is an overlay with the layers' part of it beneath the
    /// sandbox's own disk. Needs --new-root.
    #[arg(long = "layer")]
    pub layers: Vec<PathBuf>,
    /// A directory whose parts are the lowest layer of the places the agent mounts a disk of its
    /// own at (/tmp, /mnt, the work dir), and not of the root: a kubernetes pod made from a
    /// checkpoint, whose image holds those places' files there (the root's at their paths).
    /// Needs --new-root.
    #[arg(long)]
    pub places_layer: Option<PathBuf>,
    /// A directory of the host bound in the sandbox, `SRC:DST[:ro]` (repeatable): read-write
    /// unless `:ro`, its files' ids the programs' own (idmapped like an image). Needs --new-root.
    #[arg(long = "volume")]
    pub volumes: Vec<crate::setup::volumes::Volume>,
    /// A directory of the sandbox's own made of checkpoint layers, `rw|ro:DST[:LAYER...]`
    /// (repeatable; layers bottom first, none: empty): writes there are private to the sandbox,
    /// bounded like the work dir, and `Checkpoint` with its path streams them (a new version of
    /// the volume). Needs --new-root.
    #[arg(long = "layered-volume")]
    pub layered_volumes: Vec<crate::setup::volumes::LayeredVolume>,
    #[arg(long)]
    pub no_seccomp: bool,
    #[arg(long)]
    pub no_cgroups: bool,
    /// The Python fast path (executions forked from a prewarmed interpreter): `lazy` starts the
    /// zygote on the second Python execution (the first is spawned), `eager` at start-up (the agent listens, or says it is
    /// ready, once the zygote is, waiting at most 10 s), `off` disables it.
    #[arg(long, default_value = "lazy", value_parser = ["lazy", "eager", "off"])]
    pub python_zygote: String,
    /// An inherited connection to a Python template process outside the sandbox: the zygote is a
    /// fork of its prewarmed interpreter that enters this sandbox (sandbox_exec::template), made
    /// for the first Python execution, instead of a started one.
    #[arg(long)]
    pub python_template_fd: Option<i32>,
    /// Build a fresh root file system (tmpfs, read-only /usr, private /tmp and work dir) and pivot
    /// into it. Needs fresh mount, pid and cgroup namespaces (the local launcher makes them).
    #[arg(long)]
    pub new_root: bool,
    /// Where --new-root builds the root (the sandbox's disk is mounted here; what is beneath it,
    /// e.g. a --ro-bind source, is hidden from then on).
    #[arg(long, default_value = "/tmp")]
    pub build_dir: PathBuf,
    /// Extra host paths bind-mounted read-only into the new root.
    #[arg(long = "ro-bind")]
    pub ro_binds: Vec<PathBuf>,
    /// A further directory the file calls may reach (beside the work dir; /tmp is one already
    /// with --new-root): a mount private to this sandbox, such as a container's own /tmp.
    #[arg(long = "file-root")]
    pub file_roots: Vec<PathBuf>,
    /// Size of the work dir tmpfs in bytes (0: 256 MiB).
    #[arg(long, default_value_t = 0)]
    pub work_size: u64,
    /// Size of the /tmp tmpfs in bytes (0: 256 MiB).
    #[arg(long, default_value_t = 0)]
    pub tmp_size: u64,
    /// Hostname inside the sandbox (with a fresh uts namespace).
    #[arg(long)]
    pub hostname: Option<String>,
    /// Programs have the outside's network (`network=True`): the root --new-root builds gets the
    /// outside's /etc/resolv.conf (as the agent finds it), so they resolve names as it does.
    #[arg(long)]
    pub outside_dns: bool,
    /// Bring up the loopback interface of a fresh network namespace.
    #[arg(long)]
    pub loopback: bool,
    /// Environment given to every user program: KEY=VALUE, repeatable.
    #[arg(long = "env")]
    pub env: Vec<String>,
    /// A rule of the sandbox's egress policy (repeatable; `egress::policy` has the forms): the
    /// sandbox's network is then a namespace with only `lo`, whose one way out is the agent's
    /// proxy at `egress::PROXY_ADDR` (programs get the proxy variables).
    #[arg(long = "egress-rule", alias = "egress-allow")]
    pub egress_rules: Vec<String>,
    /// The egress policy's kind: `allow` (the rules are all that is reached; the default with
    /// rules) or `deny` (every public destination but the rules). Given without rules, the
    /// policy starts empty: nothing (`allow`) or the public internet (`deny`). Either way the
    /// policy can be replaced while the sandbox runs (SetEgress).
    #[arg(long, value_parser = ["allow", "deny"])]
    pub egress: Option<String>,
    /// Refuse `Forward`: the agent shares the outside's network namespace (a local sandbox with
    /// the host's network), so its loopback is the host's, not the sandbox's.
    #[arg(long)]
    pub no_ports: bool,
    /// The network namespace the proxy's connections are opened in (e.g. /proc/PID/ns/net,
    /// opened at start-up). Without it: the agent's own at start-up, after which the agent and
    /// its programs move to a fresh one with only `lo`.
    #[arg(long)]
    pub egress_netns: Option<PathBuf>,
    /// Namespaces this agent runs in, reported by Info (the launcher knows them).
    #[arg(long, value_delimiter = ',')]
    pub namespaces: Vec<String>,
}

impl Args {
    /// Whether the sandbox's network is an egress policy (the proxy, DNS and helper serve it).
    pub fn has_egress(&self) -> bool {
        self.egress.is_some() || !self.egress_rules.is_empty()
    }
}
