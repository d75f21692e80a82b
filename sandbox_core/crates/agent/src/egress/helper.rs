//! The egress helper: the one process of a sandbox that can open connections out of it.
//!
//! Forked by the agent at start-up, before any thread and before the agent pivots into the
//! sandbox's root or leaves the outside network namespace, it keeps both: it unshares a mount
//! namespace of its own when the agent builds a root (the agent's pivot does not move it),
//! enters the outside network namespace when one is named, drops to an id of no program's (65534
//! outside the programs' range, or a pod's agent id, see `start`) and serves the
//! agent over socket pairs made before the fork. The agent goes on only once the helper holds
//! its own mount namespace, so the agent's pivot never reaches it. For each `host port` it checks
//! the policy again, resolves the name by a resolver of its own over the outside's `/etc/hosts`
//! and `/etc/resolv.conf` as read before the fork (`resolve`: no NSS module, no file read after
//! start, nothing a sandbox can write), refuses
//! addresses the policy does not allow a name to reach, connects (10 s) and sends the connected
//! socket back (SCM_RIGHTS). A policy the agent is given later reaches it on a channel too
//! (`set_policy`), before the agent's own: the helper never opens what the policy in force
//! refuses. It dies with the agent (PR_SET_PDEATHSIG, and end of file on every
//! channel). Programs cannot reach it: the channels are close-on-exec fds of the agent only.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use sandbox_exec::fdpass;

use super::policy::{Policy, Verdict};
use super::resolve::Config;

/// Connections the helper opens at once (one thread per channel).
const CHANNELS: usize = 8;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_REQUEST: usize = 512;
/// The largest policy message: its rules, one per line (the manager holds a policy to 256
/// rules of at most 260 bytes).
const MAX_POLICY: usize = 128 << 10;
/// The first byte of a policy message (a connection request starts with a host name).
const POLICY: u8 = 0x01;
/// The helper's uid and gid where the sandbox's programs have ids of their own (a host range).
pub const NOBODY: u32 = 65534;

/// The answer to one connection request.
pub enum Reply {
    Connected(TcpStream),
    Refused(String),
    Failed(String),
}

/// The agent's end: a free list of channels to the helper.
pub struct Helper {
    channels: Mutex<Vec<OwnedFd>>,
    permits: tokio::sync::Semaphore,
}

/// Forks the helper. `netns`: the network namespace connections are made in (None: the
/// current one). `own_mounts`: the helper keeps the file system the agent is about to leave
/// (a mount namespace of its own, which the agent's pivot does not move). Must run while the
/// agent has one thread. `id`: the uid and gid it drops to, one no program has (a program with
/// it could signal the helper).
pub fn start(
    policy: &Policy,
    netns: Option<OwnedFd>,
    own_mounts: bool,
    id: u32,
) -> Result<Helper, String> {
    let mut ours = Vec::with_capacity(CHANNELS);
    let mut theirs = Vec::with_capacity(CHANNELS);
    for _ in 0..CHANNELS {
        let (a, b) = fdpass::socket_pair(libc::SOCK_SEQPACKET)
            .map_err(|e| format!("egress channel: {e}"))?;
        ours.push(a);
        theirs.push(b);
    }
    // Read here, in the outside's file system: the helper reads no file after the fork.
    let resolver = Config::read();
    let (ready_r, ready_w) =
        sandbox_exec::fds::pipe().map_err(|e| format!("egress helper: pipe: {e}"))?;
    // SAFETY: getpid has no preconditions.
    let agent = unsafe { libc::getpid() };
    // SAFETY: the agent has no thread yet, so the child is an ordinary process.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!(
            "egress helper: fork: {}",
            std::io::Error::last_os_error()
        ));
    }
    if pid == 0 {
        drop(ours);
        drop(ready_r);
        let code = match serve(
            policy, &resolver, netns, own_mounts, theirs, agent, id, ready_w,
        ) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("sandbox-agent: egress helper: {e}");
                1
            }
        };
        // SAFETY: ending the helper without running the agent's exit path.
        unsafe { libc::_exit(code) };
    }
    drop(theirs);
    drop(netns);
    drop(ready_w);
    // The agent builds the sandbox's root next: not before the helper has left its mounts.
    let mut word = Vec::new();
    let _ = std::fs::File::from(ready_r).read_to_end(&mut word);
    if word != b"R" {
        let why = String::from_utf8_lossy(word.get(1..).unwrap_or_default()).into_owned();
        return Err(format!(
            "egress helper did not start: {}",
            if why.is_empty() { "it exited" } else { &why }
        ));
    }
    Ok(Helper {
        channels: Mutex::new(ours),
        permits: tokio::sync::Semaphore::new(CHANNELS),
    })
}

fn os(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Closes every fd of the helper but stdio and `keep` (it inherits the agent's: its socket,
/// readiness pipe, token).
fn close_others(keep: &[i32]) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: closing an fd this process inherited and never uses.
            unsafe { libc::close(fd) };
        }
    }
}

/// Sets the helper up, tells the agent (`R` on `ready`, or `F` and why) and serves.
#[allow(clippy::too_many_arguments)]
fn serve(
    policy: &Policy,
    resolver: &Config,
    netns: Option<OwnedFd>,
    own_mounts: bool,
    channels: Vec<OwnedFd>,
    agent: libc::pid_t,
    id: u32,
    ready: OwnedFd,
) -> Result<(), String> {
    let mut keep: Vec<i32> = channels.iter().map(AsRawFd::as_raw_fd).collect();
    keep.extend(netns.as_ref().map(AsRawFd::as_raw_fd));
    keep.push(ready.as_raw_fd());
    close_others(&keep);
    let mut ready = std::fs::File::from(ready);
    if let Err(e) = set_up(netns, own_mounts, agent, id) {
        let _ = ready.write_all(format!("F{e}").as_bytes());
        return Err(e);
    }
    let _ = ready.write_all(b"R");
    drop(ready);
    let policy = Arc::new(RwLock::new(policy.clone()));
    let resolver = Arc::new(resolver.clone());
    let threads: Vec<_> = channels
        .into_iter()
        .map(|ch| {
            let (policy, resolver) = (policy.clone(), resolver.clone());
            std::thread::spawn(move || channel_loop(&policy, &resolver, ch))
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

fn set_up(
    netns: Option<OwnedFd>,
    own_mounts: bool,
    agent: libc::pid_t,
    id: u32,
) -> Result<(), String> {
    // SAFETY: plain syscalls on this process's own state.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(os("PR_SET_PDEATHSIG"));
        }
        if libc::getppid() != agent {
            // The agent already died (we were re-parented): nothing to serve.
            libc::_exit(0);
        }
        if own_mounts {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(os("unshare(CLONE_NEWNS)"));
            }
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return Err(os("make / private"));
            }
        }
        if let Some(ns) = &netns {
            if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(os("setns into the outside network namespace"));
            }
        }
        // Nothing it does needs a privilege: a parsing bug in the resolver must not hand one out.
        let _ = libc::setgroups(0, std::ptr::null());
        let _ = libc::setresgid(id, id, id);
        let _ = libc::setresuid(id, id, id);
    }
    drop(netns);
    Ok(())
}

/// A policy message: `POLICY`, `a` or `d` (allow- or deny-list), then the rules, one per line.
fn policy_message(policy: &Policy) -> Vec<u8> {
    let mut msg = vec![POLICY, if policy.is_deny() { b'd' } else { b'a' }];
    let rules: Vec<String> = policy.rules().iter().map(ToString::to_string).collect();
    msg.extend_from_slice(rules.join("\n").as_bytes());
    msg
}

fn parse_policy_message(msg: &[u8]) -> Result<Policy, String> {
    let text = std::str::from_utf8(msg.get(2..).unwrap_or_default())
        .map_err(|_| "a policy message is not UTF-8".to_string())?;
    let rules: Vec<String> = text
        .split('\n')
        .filter(|r| !r.is_empty())
        .map(str::to_string)
        .collect();
    Policy::parse_as(&rules, msg.get(1) == Some(&b'd'))
}

fn channel_loop(policy: &RwLock<Policy>, resolver: &Config, ch: OwnedFd) {
    let mut buf = vec![0u8; MAX_POLICY];
    loop {
        let n = match fdpass::recv_with_fd(&ch, &mut buf) {
            Ok((0, _)) | Err(_) => {
                // The agent is gone: so is every reason to exist.
                // SAFETY: ending the helper.
                unsafe { libc::_exit(0) };
            }
            Ok((n, _)) => n,
        };
        if buf.first() == Some(&POLICY) {
            let reply = match parse_policy_message(&buf[..n]) {
                Ok(p) => {
                    *policy.write().unwrap_or_else(|e| e.into_inner()) = p;
                    b"O".to_vec()
                }
                Err(e) => [b"F", e.as_bytes()].concat(),
            };
            // SAFETY: our channel; no fd is sent.
            unsafe { fdpass::send_with_fd(ch.as_raw_fd(), &reply, -1) };
            continue;
        }
        let policy = policy.read().unwrap_or_else(|e| e.into_inner()).clone();
        let reply = match std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|s| s.split_once('\0'))
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        {
            Some((host, port)) => open(&policy, resolver, &host, port),
            None => Reply::Failed("malformed request".into()),
        };
        let (status, text, fd) = match reply {
            Reply::Connected(s) => (b'C', String::new(), s.into_raw_fd()),
            Reply::Refused(why) => (b'R', why, -1),
            Reply::Failed(why) => (b'F', why, -1),
        };
        let mut msg = vec![status];
        msg.extend_from_slice(&text.as_bytes()[..text.len().min(MAX_REQUEST - 1)]);
        // SAFETY: our channel; `fd` is -1 or the socket just connected, closed right after.
        unsafe {
            fdpass::send_with_fd(ch.as_raw_fd(), &msg, fd);
            if fd >= 0 {
                libc::close(fd);
            }
        }
    }
}

fn open(policy: &Policy, resolver: &Config, host: &str, port: u16) -> Reply {
    if policy.check(host, port) == Verdict::Refused {
        return Reply::Refused(format!(
            "{host}:{port} is refused by the sandbox's egress policy"
        ));
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => match resolver.resolve(bare) {
            Ok(a) => {
                let all: Vec<SocketAddr> =
                    a.into_iter().map(|ip| SocketAddr::new(ip, port)).collect();
                let ok: Vec<SocketAddr> = all
                    .iter()
                    .copied()
                    .filter(|a| policy.address_ok(a.ip(), port))
                    .collect();
                if ok.is_empty() && !all.is_empty() {
                    return Reply::Refused(format!(
                        "{host} resolves only to addresses the egress policy refuses ({})",
                        all[0].ip()
                    ));
                }
                ok
            }
            Err(e) => return Reply::Failed(format!("cannot resolve {host}: {e}")),
        },
    };
    let mut last = format!("{host} has no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(s) => return Reply::Connected(s),
            Err(e) => last = format!("connect to {a}: {e}"),
        }
    }
    Reply::Failed(last)
}

impl Helper {
    /// Takes a free channel (waiting for one) and runs `f` on it off the runtime thread.
    async fn on_channel<T: Send + 'static>(
        &self,
        f: impl FnOnce(&OwnedFd) -> T + Send + 'static,
    ) -> Result<T, String> {
        let Ok(_permit) = self.permits.acquire().await else {
            return Err("egress helper closed".into());
        };
        let Some(ch) = self
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
        else {
            return Err("no egress channel free".into());
        };
        let (ch, out) = tokio::task::spawn_blocking(move || {
            let out = f(&ch);
            (ch, out)
        })
        .await
        .map_err(|e| format!("egress request: {e}"))?;
        self.channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ch);
        Ok(out)
    }

    /// Gives the helper a new policy; it holds for every connection asked for after this.
    pub async fn set_policy(&self, policy: &Policy) -> Result<(), String> {
        let msg = policy_message(policy);
        if msg.len() > MAX_POLICY {
            return Err(format!("an egress policy is at most {MAX_POLICY} bytes"));
        }
        self.on_channel(move |ch| {
            // SAFETY: our channel; no fd is sent.
            if unsafe { fdpass::send_with_fd(ch.as_raw_fd(), &msg, -1) } < 0 {
                return Err(os("egress helper is gone"));
            }
            let mut buf = [0u8; MAX_REQUEST];
            match fdpass::recv_with_fd(ch, &mut buf) {
                Ok((n, _)) if n > 0 && buf[0] == b'O' => Ok(()),
                Ok((n, _)) if n > 0 => Err(String::from_utf8_lossy(&buf[1..n]).into_owned()),
                Ok(_) => Err("egress helper is gone".into()),
                Err(e) => Err(format!("egress helper: {e}")),
            }
        })
        .await?
    }

    /// Asks the helper for a connection to `host:port` (blocking work off the runtime thread).
    pub async fn connect(&self, host: &str, port: u16) -> Reply {
        let request = format!("{host}\0{port}");
        self.on_channel(move |ch| ask(ch, request.as_bytes()))
            .await
            .unwrap_or_else(Reply::Failed)
    }
}

fn ask(ch: &OwnedFd, request: &[u8]) -> Reply {
    // SAFETY: our channel; no fd is sent.
    if unsafe { fdpass::send_with_fd(ch.as_raw_fd(), request, -1) } < 0 {
        return Reply::Failed(os("egress helper is gone"));
    }
    let mut buf = [0u8; MAX_REQUEST];
    match fdpass::recv_with_fd(ch, &mut buf) {
        Ok((0, _)) => Reply::Failed("egress helper is gone".into()),
        Ok((n, fd)) => {
            let text = String::from_utf8_lossy(&buf[1..n]).into_owned();
            match (buf[0], fd) {
                // SAFETY: the helper sent us a connected TCP socket; we own it now.
                (b'C', Some(fd)) => {
                    Reply::Connected(unsafe { TcpStream::from_raw_fd(fd.into_raw_fd()) })
                }
                (b'R', _) => Reply::Refused(text),
                _ => Reply::Failed(text),
            }
        }
        Err(e) => Reply::Failed(format!("egress helper: {e}")),
    }
}
