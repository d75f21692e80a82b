//! The sandbox agent: reads its flags, builds the sandbox around itself, then serves the agent
//! protocol until its owner's lease lapses or it is told to stop.

mod auth;
mod checkpoint;
mod cli;
mod egress;
mod error;
mod lease;
mod listen;
mod paths;
mod pid_ns_init;
mod server;
mod setup;
mod start_error;

use std::io::Read;
use std::os::fd::FromRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use sandbox_exec::{userns, Executor, ExecutorConfig};
use sandbox_proto::agent_server::AgentServer;
use start_error::StartError;

pub const VERSION: &str = sandbox_proto::AGENT_VERSION;
const MAX_MESSAGE: usize = 1 << 30;
/// How long an agent started with `--python-zygote eager` waits for the zygote before it serves.
const EAGER_ZYGOTE_WAIT: Duration = Duration::from_secs(10);

fn read_token(args: &cli::Args) -> Result<String, StartError> {
    let token = if let Some(fd) = args.token_fd {
        let mut s = String::new();
        // SAFETY: the launcher handed us this fd (a pipe) to read the token from.
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        f.read_to_string(&mut s)
            .map_err(|source| StartError::Token {
                from: format!("fd {fd}"),
                source,
            })?;
        s
    } else if let Some(p) = &args.token_file {
        std::fs::read_to_string(p).map_err(|source| StartError::Token {
            from: format!("file {}", p.display()),
            source,
        })?
    } else if let Ok(t) = std::env::var("SANDBOX_AGENT_TOKEN") {
        // Not inherited by user programs: they get an environment built from scratch.
        std::env::remove_var("SANDBOX_AGENT_TOKEN");
        t
    } else {
        return Err(StartError::BadToken(
            "no token: pass --token-fd, --token-file or SANDBOX_AGENT_TOKEN",
        ));
    };
    let token = token.trim().to_string();
    if token.len() < 16 {
        return Err(StartError::BadToken(
            "token too short (at least 16 characters)",
        ));
    }
    Ok(token)
}

fn base_env(args: &cli::Args) -> Result<std::collections::BTreeMap<String, String>, StartError> {
    let mut env: std::collections::BTreeMap<String, String> = [
        (
            "PATH",
            "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
        ),
        ("LANG", "C.UTF-8"),
        ("TMPDIR", "/tmp"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if args.has_egress() {
        // The sandbox's one way out; its own loopback stays direct.
        let proxy = format!("http://{}", egress::PROXY_ADDR);
        for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
            env.insert(k.into(), proxy.clone());
        }
        for k in ["no_proxy", "NO_PROXY"] {
            env.insert(k.into(), "localhost,127.0.0.1,::1".into());
        }
    }
    if args.user == "root" {
        env.insert("USER".into(), "root".into());
        env.insert("HOME".into(), "/root".into());
    } else {
        env.insert("USER".into(), "sandbox".into());
        env.insert("HOME".into(), args.work_dir.display().to_string());
    }
    for kv in &args.env {
        match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                env.insert(k.to_string(), v.to_string());
            }
            _ => {
                return Err(StartError::Flags(format!(
                    "--env expects KEY=VALUE, got {kv:?}"
                )))
            }
        }
    }
    Ok(env)
}

/// Who runs user programs, and who owns what the agent makes for them.
struct Programs {
    /// Ids of programs (inside their user namespace when there is one).
    uid: u32,
    gid: u32,
    /// Host ids that own the files and directories the agent makes for programs.
    owner: server::Owner,
    /// The programs' user namespace (every sandbox given an id range).
    userns: Option<Arc<std::os::fd::OwnedFd>>,
}

const DEFAULT_ROOT_SIZE: u64 = 1 << 30;

fn programs(args: &cli::Args, is_root: bool) -> Result<Programs, StartError> {
    let root = args.user == "root";
    if root && (!is_root || !args.new_root || args.keep_uid || (args.id_base == 0) != args.pod_ids)
    {
        return Err(StartError::Flags(
            "--user root needs an agent that is root, --new-root, either --id-base or --pod-ids, \
             and no --keep-uid"
                .into(),
        ));
    }
    if args.pod_ids {
        if !root {
            return Err(StartError::Flags("--pod-ids is for --user root".into()));
        }
        // Outside a user namespace the pod's ids would be the node's: root inside would be root.
        let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        if map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"] {
            return Err(StartError::Flags("--pod-ids needs a user-namespaced pod (hostUsers: false); this one has the node's ids".into()));
        }
        let ns = userns::create_in_pod().map_err(StartError::UserNs)?;
        return Ok(Programs {
            uid: 0,
            gid: 0,
            owner: server::Owner { uid: 0, gid: 0 },
            userns: Some(Arc::new(ns)),
        });
    }
    let (uid, gid) = if root {
        (0, 0)
    } else if args.keep_uid || !is_root {
        // SAFETY: getuid/getgid have no preconditions.
        unsafe { (libc::getuid(), libc::getgid()) }
    } else {
        (args.uid, args.gid)
    };
    if args.id_base == 0 || !is_root || args.keep_uid {
        return Ok(Programs {
            uid,
            gid,
            owner: server::Owner { uid, gid },
            userns: None,
        });
    }
    if uid >= userns::RANGE || gid >= userns::RANGE {
        return Err(StartError::Flags(format!(
            "--uid/--gid must be below {} with --id-base",
            userns::RANGE
        )));
    }
    let ns = match args.userns_fd {
        Some(fd) => userns::adopt(fd),
        None => userns::create(args.id_base),
    }
    .map_err(StartError::UserNs)?;
    Ok(Programs {
        uid,
        gid,
        owner: server::Owner {
            uid: args.id_base + uid,
            gid: args.id_base + gid,
        },
        userns: Some(Arc::new(ns)),
    })
}

/// What the agent serves egress with: the policy, the helper, and where its DNS answers beside
/// `DNS_ADDR` (`pod_nameservers`).
type Egress = (
    egress::policy::Policy,
    egress::helper::Helper,
    Vec<std::net::Ipv4Addr>,
);

/// The egress proxy's policy and helper (forked here, while the agent has one thread and is
/// still in the outside network namespace and file system); then, unless the outside namespace
/// was named, the agent moves to a fresh network namespace with only `lo`.
fn start_egress(args: &cli::Args) -> Result<Egress, StartError> {
    let deny = args.egress.as_deref() == Some("deny");
    let policy =
        egress::policy::Policy::parse_as(&args.egress_rules, deny).map_err(StartError::Egress)?;
    let netns = args
        .egress_netns
        .as_ref()
        .map(|p| {
            std::fs::File::open(p)
                .map(std::os::fd::OwnedFd::from)
                .map_err(|source| StartError::EgressIo {
                    what: format!("network namespace {}", p.display()),
                    source,
                })
        })
        .transpose()?;
    let leave = netns.is_none();
    // A pod's programs have the pod's own ids, 65534 among them: the helper takes the agent's.
    let id = if args.pod_ids {
        userns::AGENT_ID
    } else {
        egress::helper::NOBODY
    };
    let helper =
        egress::helper::start(&policy, netns, args.new_root, id).map_err(StartError::Egress)?;
    if leave {
        // SAFETY: unshare of this (single-threaded) process's network namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(StartError::EgressIo {
                what: "a network namespace of the sandbox's own".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        setup::net::loopback_up()?;
    }
    let extra = if args.new_root {
        Vec::new() // the root it builds names DNS_HOST
    } else {
        pod_nameservers()
    };
    Ok((policy, helper, extra))
}

/// Programs of an agent that builds no root (a pod's) read the outside's /etc/resolv.conf: its
/// nameservers become addresses of the sandbox's `lo` (those not already there), where the DNS
/// answers as on `DNS_ADDR`. One that cannot be added is left out (its lookups then fail, as
/// every lookup would without it).
fn pod_nameservers() -> Vec<std::net::Ipv4Addr> {
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let mut out = Vec::new();
    for (n, ip) in egress::dns::nameservers(&resolv).into_iter().enumerate() {
        if ip.to_string() == egress::DNS_HOST {
            continue;
        }
        if !ip.is_loopback() {
            if let Err(e) = setup::net::add_loopback_address(ip, n + 1) {
                eprintln!("sandbox-agent: egress DNS at nameserver {ip}: {e}");
                continue;
            }
        }
        out.push(ip);
    }
    out
}

/// Starts the agent; a start-up step that fails is reported on the readiness channel (and
/// stderr), and the agent exits with status 2.
fn main() {
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(pid_ns_init::FLAG)) {
        pid_ns_init::run();
    }
    let args = cli::Args::parse();
    let ready_fd = args.ready_fd;
    match start(args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            e.report(ready_fd);
            std::process::exit(2)
        }
    }
}

fn start(args: cli::Args) -> Result<i32, StartError> {
    let token = read_token(&args)?;
    // SAFETY: geteuid has no preconditions.
    let is_root = unsafe { libc::geteuid() } == 0;
    // Held for the agent's life, never by its programs: the pid namespace's init ends with it.
    if let Some(fd) = args.init_watch_fd {
        // SAFETY: fcntl on an inherited fd that this process keeps open until it exits.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(StartError::Flags(format!("--init-watch-fd {fd}: {e}")));
        }
    }
    // Before any thread: the user namespace is made by a fork.
    let programs = programs(&args, is_root)?;
    if let Some(h) = &args.hostname {
        setup::net::set_hostname(h)?;
    }
    if args.loopback {
        setup::net::loopback_up()?;
    }
    // Bound where the manager reaches it, before the agent leaves that place (`listen::Bound`).
    let bound = args
        .listen
        .as_deref()
        .map(|spec| {
            listen::bind(spec).map_err(|source| StartError::Listen {
                spec: spec.to_string(),
                source,
            })
        })
        .transpose()?;
    let egress = if args.has_egress() {
        Some(start_egress(&args)?)
    } else {
        None
    };
    if args.new_root {
        let (_layers_held, layers) = setup::layers::hold(&args.layers)?;
        let (_places_held, mut places_layer) = setup::layers::hold(args.places_layer.as_slice())?;
        let (_volumes_held, volumes) = setup::volumes::hold(&args.volumes)?;
        let (_layered_held, layered_volumes) = setup::volumes::hold_layered(&args.layered_volumes)?;
        let spec = setup::rootfs::RootSpec {
            work_dir: args.work_dir.clone(),
            work_size: args.work_size,
            tmp_size: args.tmp_size,
            ro_binds: args.ro_binds.clone(),
            uid: programs.owner.uid,
            gid: programs.owner.gid,
            userns: programs
                .userns
                .as_ref()
                .map(|ns| std::os::fd::AsRawFd::as_raw_fd(ns.as_ref())),
            inside: (programs.uid, programs.gid),
            image: args.image_root.clone(),
            image_ids_inside: args.pod_ids,
            layers,
            places_layer: places_layer.pop(),
            programs_own_pids: args.userns_fd.is_some(),
            volumes,
            layered_volumes,
            disk: args.build_dir.clone(),
            resolv_conf: if egress.is_some() {
                Some(format!("nameserver {}\n", egress::DNS_HOST))
            } else if args.outside_dns {
                // Read before the pivot: the outside's, which programs with its network use.
                Some(std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default())
            } else {
                None
            },
            writable_size: (args.user == "root").then_some(match args.root_size {
                0 => DEFAULT_ROOT_SIZE,
                n => n,
            }),
        };
        setup::rootfs::build(&spec)?;
        if args.pod_ids {
            // Still one thread: every thread started from here on has these ids and capabilities.
            let id = userns::AGENT_ID;
            sandbox_exec::caps::keep_capabilities_as(id, id).map_err(StartError::Capabilities)?;
        }
    } else if !args.work_dir.exists() {
        std::fs::create_dir_all(&args.work_dir).map_err(|source| StartError::WorkDir {
            path: args.work_dir.clone(),
            source,
        })?;
    }

    // One thread: an idle sandbox should cost as little memory as possible; blocking file work
    // goes to tokio's blocking pool, which starts threads only when needed.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| StartError::Runtime {
            what: "tokio runtime",
            source,
        })?;
    let served = runtime.block_on(serve(args, token, programs, is_root, bound, egress));
    // The agent exits next, stopped or failed: no waiting for blocking work still running.
    runtime.shutdown_background();
    served
}

async fn serve(
    args: cli::Args,
    token: String,
    programs: Programs,
    is_root: bool,
    bound: Option<listen::Bound>,
    egress: Option<Egress>,
) -> Result<i32, StartError> {
    let drop_uid = is_root && !args.keep_uid;
    let root_inside = args.user == "root";
    let config = ExecutorConfig {
        uid: drop_uid.then_some(programs.uid),
        gid: drop_uid.then_some(programs.gid),
        seccomp: !args.no_seccomp,
        use_cgroups: !args.no_cgroups,
        cgroup_parent: None,
        work_dir: args.work_dir.clone(),
        base_env: base_env(&args)?,
        default_limits: sandbox_exec::Limits::default(),
        user_namespace: programs.userns.clone(),
    };
    let executor = Arc::new(Executor::new(config).map_err(StartError::Executor)?);
    // This process owns its cgroup subtree (whoever removes the sandbox removes the subtree), so
    // idle exec cgroups may stay between execs: each exec is spared creating and removing one.
    executor.enable_cgroup_pool(4);
    // Every exec starts on this thread (the runtime has one): wearing the filter here spares each
    // a hand-over to the spawner thread and back. Set-up is done; the agent needs none of the
    // syscalls the filter refuses from now on.
    if let Err(e) = executor.wear_seccomp_on_this_thread() {
        eprintln!("sandbox-agent: {e}; programs start from the spawner thread");
    }
    // SAFETY: the launcher handed this fd over for us alone; nothing else owns it.
    let template = args
        .python_template_fd
        .map(|fd| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
    if args.python_zygote != "off" {
        let eager = args.python_zygote == "eager";
        let python = PathBuf::from("/usr/bin/python3");
        let prelude = sandbox_judge::languages::PYTHON_ZYGOTE_PRELUDE;
        executor.enable_python_zygote(python.clone(), eager && template.is_none(), prelude);
        if let Some(conn) = template {
            match executor.enable_python_template(conn) {
                Ok(true) if eager => {
                    executor.enable_python_zygote(python, true, prelude);
                }
                Ok(_) => {}
                Err(e) => eprintln!("sandbox-agent: python template: {e}; starting zygotes"),
            }
        }
        if eager {
            // A sandbox started with `eager` is ready when its first Python execution can be a
            // fork: wait (bounded) for the zygote's start-up before listening or saying ready.
            let since = Instant::now();
            while executor.zygote_running()
                && !executor.zygote_ready()
                && since.elapsed() < EAGER_ZYGOTE_WAIT
            {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            if !executor.zygote_ready() {
                eprintln!(
                    "sandbox-agent: the python zygote is not ready; serving without it for now"
                );
            }
        }
    }
    let egress = egress.map(|(policy, helper, nameservers)| {
        let listener = std::net::TcpListener::bind(egress::PROXY_ADDR)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(tokio::net::TcpListener::from_std)
            .map_err(|source| StartError::EgressIo {
                what: format!("proxy on {}", egress::PROXY_ADDR),
                source,
            })?;
        let dns = std::net::UdpSocket::bind(egress::DNS_ADDR)
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .and_then(tokio::net::UdpSocket::from_std)
            .map_err(|source| StartError::EgressIo {
                what: format!("DNS on {}", egress::DNS_ADDR),
                source,
            })?;
        let proxy = Arc::new(egress::Proxy {
            policy: std::sync::RwLock::new(Arc::new(policy)),
            helper,
            counters: Default::default(),
            names: Default::default(),
        });
        tokio::spawn(proxy.clone().serve_dns(dns));
        for ip in nameservers {
            match std::net::UdpSocket::bind((ip, 53))
                .and_then(|s| s.set_nonblocking(true).map(|()| s))
                .and_then(tokio::net::UdpSocket::from_std)
            {
                Ok(socket) => {
                    tokio::spawn(proxy.clone().serve_dns(socket));
                }
                Err(e) => eprintln!("sandbox-agent: egress DNS on {ip}:53: {e}"),
            }
        }
        tokio::spawn(proxy.clone().serve(listener));
        Ok::<_, StartError>(proxy)
    });
    let egress = egress.transpose()?;
    // Start-up is done: programs' pids start above every pid it took. Without the capability
    // (a pod's agent) pids go on as they are; nothing there restores a memory snapshot.
    match setup::pids::start_programs_above_start_up() {
        Err(e) if e.kind() != std::io::ErrorKind::PermissionDenied => {
            eprintln!("sandbox-agent: programs' pids go on from start-up's: {e}");
        }
        _ => {}
    }
    let listener = match (bound, args.listen_fd) {
        (Some(b), _) => listen::serve(b),
        (None, Some(fd)) => listen::from_fd(fd),
        (None, None) => {
            return Err(StartError::Flags(
                "nowhere to listen: pass --listen or --listen-fd".into(),
            ))
        }
    }
    .map_err(|source| StartError::Listen {
        spec: args
            .listen
            .clone()
            .unwrap_or_else(|| format!("fd {:?}", args.listen_fd)),
        source,
    })?;

    let mut roots = vec![args.work_dir.clone()];
    if args.new_root {
        roots.push(PathBuf::from("/tmp"));
        if !root_inside {
            // Its own mount (setup::rootfs); in a root sandbox, part of the root below.
            roots.push(PathBuf::from("/mnt"));
        }
    }
    roots.extend(args.file_roots.iter().filter(|r| r.is_absolute()).cloned());
    if args.new_root {
        // Mounts of their own, which resolution from the root above them would not cross.
        roots.extend(args.volumes.iter().map(|v| v.dst.clone()));
        roots.extend(args.layered_volumes.iter().map(|v| v.dst.clone()));
    }
    if root_inside {
        // The whole writable root; resolution never crosses a mount (`paths`), so /proc, /sys,
        // /dev and the read-only binds stay out of reach.
        roots.extend([PathBuf::from("/usr"), PathBuf::from("/")]);
    }
    let lease = lease::Lease::new(Duration::from_secs_f64(args.lease_ttl.max(0.0)));
    let service = server::AgentService {
        executor: executor.clone(),
        lease: lease.clone(),
        roots: Arc::new(paths::Roots::new(roots)),
        accounts: server::Accounts {
            uid: programs.uid,
            gid: programs.gid,
            owner: programs.owner,
            others: root_inside && drop_uid,
        },
        scratch: Arc::new(sandbox_judge::Scratch {
            root: if args.new_root {
                PathBuf::from(setup::rootfs::JUDGE_SCRATCH)
            } else {
                std::env::temp_dir()
            },
            uid: programs.owner.uid,
            gid: programs.owner.gid,
        }),
        namespaces: args.namespaces.clone(),
        started: Instant::now(),
        total_execs: Default::default(),
        forwards: (!args.no_ports)
            .then(|| Arc::new(tokio::sync::Semaphore::new(server::forward::MAX_FORWARDS))),
        egress,
    };
    let check = auth::TokenCheck::new(&token);
    let svc = AgentServer::new(service)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let svc =
        tonic::service::interceptor::InterceptedService::new(svc, move |req| check.check(req));

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| StartError::Runtime {
            what: "SIGTERM handler",
            source,
        })?;
    let stop = async {
        tokio::select! {
            _ = lease.lapsed() => eprintln!("sandbox-agent: owner's lease lapsed, stopping"),
            _ = term.recv() => {}
        }
    };
    // HTTP/2 receive windows of 1 MiB per stream: an upload to a forwarded port or a file is
    // not paced by 64 KiB round trips.
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .initial_stream_window_size(Some(1 << 20))
        .initial_connection_window_size(Some(8 << 20))
        .add_service(svc);
    let served = async {
        match listener {
            listen::Listener::Unix(incoming) => router.serve_with_incoming(incoming).await,
            listen::Listener::Tcp(incoming) => router.serve_with_incoming(incoming).await,
        }
    };
    if let Some(fd) = args.ready_fd {
        // SAFETY: the launcher handed us the write end of its readiness pipe.
        let mut ready = unsafe { std::fs::File::from_raw_fd(fd) };
        let _ = std::io::Write::write_all(&mut ready, b"R");
    }
    // No graceful drain: the owner is gone or wants us gone, and open connections would keep a
    // graceful shutdown waiting forever.
    let code = tokio::select! {
        result = served => match result {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("sandbox-agent: server: {e}");
                1
            }
        },
        _ = stop => 0,
    };
    executor.kill_all();
    Ok(code)
}

#[cfg(test)]
mod tests {
    /// The version the agent reports is the newest one its changelog records.
    #[test]
    fn the_changelog_records_the_reported_version() {
        let changelog = include_str!("../CHANGELOG.md");
        let newest = changelog
            .lines()
            .find_map(|l| l.strip_prefix("## "))
            .expect("CHANGELOG.md has a version heading");
        assert_eq!(newest.split_whitespace().next(), Some(super::VERSION));
        assert!(super::VERSION.ends_with(&format!("+proto{}", sandbox_proto::PROTOCOL_VERSION)));
    }
}
