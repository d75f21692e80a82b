# The Python zygote: an interpreter started once per sandbox, which forks one worker per Python
# execution so that no execution pays for interpreter start-up.
#
# It runs with the isolation of any user program (sandbox uid, no_new_privs, seccomp, rlimits),
# started by the agent with a SOCK_SEQPACKET control socket as fd 3. Protocol, one datagram each:
#   zygote -> agent, once its imports are done: {"ready":true}
#   agent -> zygote: JSON request + SCM_RIGHTS [stdin, stdout, stderr, go(, landlock ruleset)
#                    (, one cgroup join file per hierarchy)]
#   zygote -> agent: JSON {"pid": worker pid} or {"error": "..."} (the agent spawns instead)
#   worker -> agent, in either order with the zygote's: {"worker_ok":true}, {"worker_error": "..."}
#                    (a request it cannot decode: the agent spawns instead) or {"join_error": "..."}
# The worker is the agent's child (one clone with CLONE_PARENT where verified, else a double fork
# that reparents it to the agent, a child subreaper), which reaps it like any program it spawned.
# The zygote makes itself non-dumpable first: its workers share its uid, and must not be able to
# trace it or write its memory. On cgroup v1 the worker joins its cgroup itself (writing "0", see
# `Version::join_file` in cgroup.rs: the fast path for the kernel; on v2 the agent moves it once it
# has the pid), says so, then waits for one byte on `go` (sent once the agent has registered it, had
# its report, and moved it where it does that) before it runs any user code. The agent registers
# the worker while it decodes and joins, and watches it meanwhile: a worker that dies before its
# report does not hold the agent up.
import os
import signal
import socket
import sys
import time

# Modules most programs import; loading them here makes them free in every worker. A worker is a
# fresh fork, so nothing a program does to a module reaches the next one (the random module
# reseeds itself in every fork child).
import array
import atexit
import builtins
import ctypes
import gc
import io
import json
import resource
import struct
import traceback
import types

import bisect  # noqa: F401
import collections  # noqa: F401
import copy  # noqa: F401
import dataclasses  # noqa: F401
import datetime  # noqa: F401
import decimal  # noqa: F401
import enum  # noqa: F401
import fractions  # noqa: F401
import functools  # noqa: F401
import hashlib  # noqa: F401
import heapq  # noqa: F401
import importlib  # noqa: F401
import itertools  # noqa: F401
import math  # noqa: F401
import operator  # noqa: F401
import random  # noqa: F401
import re  # noqa: F401
import statistics  # noqa: F401
import string  # noqa: F401
import typing  # noqa: F401

CONTROL_FD = 3
MAX_REQUEST = 1 << 24
MAX_FDS = 16  # stdin, stdout, stderr, go, a Landlock ruleset and a join file per cgroup hierarchy


def join(msg, fds):
    """Decodes the request, joins the worker's cgroup (v1) and tells the agent how that went.
    Never returns on failure."""
    try:
        req = DECODE(msg.decode())[0]
        landlock, n_join = bool(req.get("landlock")), req.get("join", 0)
        if len(fds) != 4 + landlock + n_join:
            raise ValueError(f"got {len(fds)} fds for the request")
    except Exception as e:  # noqa: BLE001 (the agent spawns the program instead)
        os.write(CONTROL_FD, json.dumps({"worker_error": f"{type(e).__name__}: {e}"}).encode())
        os._exit(127)
    try:
        for fd in fds[4 + landlock :]:
            os.write(fd, b"0")
            os.close(fd)
    except OSError as e:
        os.write(CONTROL_FD, json.dumps({"join_error": str(e)}).encode())
        os._exit(127)
    os.write(CONTROL_FD, b'{"worker_ok":true}')
    return req


def run_worker(msg, fds):
    # Never return into the serve loop: whatever happens, this process ends here.
    try:
        req = join(msg, fds)
        if os.getsid(0) != os.getpid():  # a program made in place of a zygote has its session
            os.setsid()
        stdin, stdout, stderr, go = fds[:4]
        os.dup2(stdin, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        for fd in (stdin, stdout, stderr):
            if fd > 2:
                os.close(fd)
        os.close(CONTROL_FD)
        # [resource, soft, hard], -1 meaning unlimited (resource.RLIM_INFINITY on Linux).
        for res, soft, hard in req.get("rlimits", []):
            resource.setrlimit(res, (soft, hard))
        # The agent releases us once it registered us and had our report; EOF means it gave up.
        if os.read(go, 1) != b"G":
            os._exit(137)
        os.close(go)
        if req.get("landlock"):
            # Writes only beneath the case's directory (see landlock.rs); no_new_privs is set.
            if LANDLOCK_RESTRICT_SELF(SYS_LANDLOCK_RESTRICT_SELF, fds[4], 0) != 0:
                raise OSError(ctypes.get_errno(), "landlock_restrict_self")
            os.close(fds[4])
        LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # like any spawned program (the zygote is not)
        os.chdir(req["cwd"])
        # The agent sends the environment as changes to the zygote's (usually TMPDIR alone):
        # walking the whole environment would copy pages of the inherited heap.
        for k in req["env_unset"]:
            os.environ.pop(k, None)
        for k, v in req["env_set"].items():
            os.environ[k] = v
        if req.get("unbuffered"):
            enc = sys.stdout.encoding
            sys.stdout = io.TextIOWrapper(open(1, "wb", 0, closefd=False), encoding=enc, write_through=True)
            sys.stderr = io.TextIOWrapper(
                open(2, "wb", 0, closefd=False), encoding=enc, errors="backslashreplace", write_through=True
            )
        if req.get("no_bytecode"):
            sys.dont_write_bytecode = True
        # No importlib.invalidate_caches(): the zygote runs isolated (-I), so the only directories
        # whose listings it cached are the interpreter's own, read-only in the sandbox; the
        # program's directories get fresh finders in the worker. (It cost ~60 page copies.)
    except BaseException:  # noqa: BLE001
        try:
            traceback.print_exc()
        finally:
            os._exit(127)
    code = 0
    try:
        if "code" in req:
            sys.argv = ["-c", *req["args"]]
            if not req.get("isolated"):
                sys.path.insert(0, "")
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = builtins
            sys.modules["__main__"] = main
            exec(compile(req["code"], "<string>", "exec"), main.__dict__)
        else:
            path = req["path"]
            sys.argv = [path, *req["args"]]
            if not req.get("isolated"):
                sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
            if "entry" in req:
                run_entry(PRELUDE[req["entry"]], path, req["args"])
            else:
                run_file(path)
    except SystemExit as e:
        code = exit_code(e)
    except BaseException as e:  # noqa: BLE001 (an uncaught exception ends the program like python3 does)
        print_user_exception(e)
        code = 1
    # What interpreter shutdown does first: wait for non-daemon threads, run atexit handlers.
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
    except SystemExit as e:
        code = exit_code(e)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = code or 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        code = code or 120
    os._exit(code)


def run_file(path):
    """What `python3 FILE` does with FILE: compile it and run it as the `__main__` module."""
    with io.open_code(path) as f:
        source = f.read()
    code = compile(source, path, "exec")
    main = types.ModuleType("__main__")
    main.__dict__.update({"__file__": path, "__cached__": None, "__builtins__": builtins})
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def run_entry(fn, path, args):
    """What `python3 FILE ARGS` does when FILE is the agent's own program whose function `fn` the
    prelude compiled: `__main__` is a fresh module named after FILE, and `fn(*ARGS)` runs."""
    main = types.ModuleType("__main__")
    main.__dict__.update({"__file__": path, "__cached__": None, "__builtins__": builtins})
    sys.modules["__main__"] = main
    fn(*args)


def print_user_exception(e):
    # Like python3: the traceback starts at the program's own frames, not the zygote's.
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_globals is globals():
        tb = tb.tb_next
    try:
        traceback.print_exception(type(e), e, tb)
    except BaseException:  # noqa: BLE001
        pass


def exit_code(e):
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    try:
        print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001
        pass
    return 1


def serve():
    ctl = socket.socket(fileno=CONTROL_FD)
    fds_size = socket.CMSG_LEN(MAX_FDS * 4)
    ctl.send(b'{"ready":true}')  # the agent sends requests from now on (and spawns until then)
    while True:
        try:
            msg, ancdata, _flags, _addr = ctl.recvmsg(MAX_REQUEST, fds_size)
        except InterruptedError:
            continue
        if not msg:
            return  # the agent closed the control socket
        fds = []
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", data[: len(data) - len(data) % 4])
        try:
            # The worker decodes and checks the request (see `join`).
            pid = fork_worker(msg, fds)
            reply = b'{"pid":%d}' % pid if pid > 0 else b'{"error":"fork failed"}'
        except Exception as e:  # noqa: BLE001 (nothing the agent sends may end the zygote)
            reply = json.dumps({"error": f"{type(e).__name__}: {e}"}).encode()
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        ctl.send(reply)


def make_undumpable():
    """Workers run as the zygote's uid; a non-dumpable zygote cannot be traced, nor its memory
    (/proc/PID/mem), environment or fds read or written by them (and hidepid hides it), so one
    program cannot change what the zygote runs for the next. Each worker is made dumpable again
    before it runs user code, like any spawned program. The zygote refuses to run (the agent then
    spawns) when it cannot make itself non-dumpable."""
    if LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or LIBC.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot make the zygote non-dumpable")


# The request's decoder: `json.loads` also detects the bytes' encoding and matches whitespace around
# the document with a regular expression, which copies more pages of the inherited heap.
DECODE = json.JSONDecoder().raw_decode
LIBC = ctypes.CDLL(None, use_errno=True)
# Typed once here: a worker's call of an untyped foreign function builds argument converters and
# copies more pages of the inherited heap.
LIBC.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
LIBC.prctl.restype = ctypes.c_int
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
# Its own handle, typed (the same syscall number on every architecture); warmed below.
LANDLOCK_RESTRICT_SELF = ctypes.CDLL(None, use_errno=True).syscall
LANDLOCK_RESTRICT_SELF.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_uint]
LANDLOCK_RESTRICT_SELF.restype = ctypes.c_long
SYS_LANDLOCK_RESTRICT_SELF = 446
make_undumpable()


class ParentFork:
    """One fork instead of two: `clone(CLONE_PARENT)` makes the worker a child of the agent right
    away. It does what `os.fork()` does around the syscall (the interpreter's before/after-fork
    hooks, with the GIL held throughout) and has the kernel store the child's thread id where the
    C library keeps it (`CLONE_CHILD_SETTID`), as the C library's own fork does. Used only where
    that place is known (x86_64) and verified at start: a probe child checks its own thread id
    there and reports through a pipe. Otherwise the zygote double-forks."""

    CLONE_PARENT, CLONE_CHILD_SETTID, CLONE_CHILD_CLEARTID, SIGCHLD = 0x8000, 0x01000000, 0x00200000, 17
    SYS_CLONE, SYS_GETTID, TID_OFFSET = 56, 186, 0x2D0  # x86_64

    def __init__(self, probe=True):
        self.ok, self.probe_pid = False, 0
        if os.uname().machine != "x86_64":
            return
        py = ctypes.PyDLL(None)  # calls keep the GIL, as os.fork() does
        self.before, self.parent, self.child = py.PyOS_BeforeFork, py.PyOS_AfterFork_Parent, py.PyOS_AfterFork_Child
        self.syscall = py.syscall
        self.syscall.restype = ctypes.c_long
        self.syscall.argtypes = [ctypes.c_long] * 6
        LIBC.pthread_self.restype = ctypes.c_ulong
        self.tid_addr = LIBC.pthread_self() + self.TID_OFFSET
        if ctypes.c_int.from_address(self.tid_addr).value != self.syscall(self.SYS_GETTID, 0, 0, 0, 0, 0):
            return
        if not probe:
            self.ok = None  # to be probed (see `template_parent_fork`)
            return
        r, w = os.pipe()
        pid = self.fork()
        if pid == 0:
            good = ctypes.c_int.from_address(self.tid_addr).value == os.getpid() == self.syscall(self.SYS_GETTID, 0, 0, 0, 0, 0)
            os.write(w, b"y" if good else b"n")
            os._exit(0)
        os.close(w)
        self.ok = pid > 0 and os.read(r, 1) == b"y"
        self.probe_pid = max(pid, 0)
        os.close(r)

    def fork(self):
        """0 in the worker, its pid in the zygote (-1 on failure)."""
        flags = self.CLONE_PARENT | self.CLONE_CHILD_SETTID | self.CLONE_CHILD_CLEARTID | self.SIGCHLD
        self.before()
        pid = self.syscall(self.SYS_CLONE, flags, 0, 0, self.tid_addr, 0)
        if pid == 0:
            self.child()
        else:
            self.parent()
        return pid


def fork_worker(msg, fds):
    """Starts the worker for request `msg` as a child of the agent; returns its pid (0: failed)."""
    if PARENT_FORK.ok:
        pid = PARENT_FORK.fork()
        if pid == 0:
            run_worker(msg, fds)
        return max(pid, 0)
    r, w = os.pipe()
    mid = os.fork()
    if mid == 0:
        os.close(r)
        try:
            worker = os.fork()
            if worker == 0:
                os.close(w)
                run_worker(msg, fds)
            os.write(w, str(worker).encode())
        finally:
            os._exit(0)
    os.close(w)
    pid = int(os.read(r, 32) or b"0")
    os.close(r)
    os.waitpid(mid, 0)
    return pid


# -- the template role ------------------------------------------------------------------------
# `python3 -I -c SOURCE PRELUDE template LISTEN RETIRE`, started by the manager as host root outside
# every sandbox, with a listening SOCK_SEQPACKET socket as fd LISTEN and the read end of a pipe
# whose end the manager holds as fd RETIRE: a zygote that sandboxes are made from
# instead of starting one each. It never runs a sandbox's code and never reads a sandbox's request:
# per connection (one per agent) it takes datagrams of two fds each, a socket of that request and
# the agent's pid namespace, and forks into that namespace a process that alone reads the request
# from the socket and becomes the sandbox's zygote:
#   agent -> request socket: JSON {"uid", "gid", "groups", "rlimits", "cwd", "env", "seccomp"
#       (the BPF program, hex)} + SCM_RIGHTS [stdin, stdout, stderr, the zygote's control socket,
#       net, ipc, uts, pid, mnt, cgroup namespaces, the programs' user namespace, join files...]
#       A program's first Python run comes with "run" (its worker request) and "run_fds" (that
#       many fds last: its `go` pipe, then its Landlock ruleset if any): the new process runs it
#       in place of serving, as a worker would (reporting on the control socket), with the
#       exec's cgroup in the join files.
#   new process -> agent: {"pid": its pid in the sandbox} or {"error": "..."}
# The template enters the agent's pid namespace for its children only while it forks a middle
# process there, which forks the new one and exits, so that the new one is a child of the agent
# (pid 1 of the sandbox's pid namespace); the template's pid namespace for children is its own
# again right after. The new process joins the zygote's cgroup (join files) and, in the other
# hierarchies, the agent's, enters the sandbox's other namespaces (but user and cgroup) as host
# root, answers once it is the agent's child, and then does what a spawned program's start does
# before exec (spawn.rs `child_main`): joins its cgroup and user namespaces, sets its session,
# rlimits, cwd, groups, gid and uid, drops every capability exec would not have given it, sets
# no_new_privs and wears the programs' seccomp filter, keeps only its stdio and control socket,
# and serves the agent like a zygote it spawned. What every sandbox made from one template
# shares: the template's address-space layout and its string-hash seed; the random module
# reseeds itself in every fork.
NS_ORDER = ("net", "ipc", "uts", "pid", "mnt")  # the request's order; then cgroup, user
CLONE_NEWPID = 0x20000000
N_STDIO_CTL = 4
LIBC.setns.argtypes = [ctypes.c_int, ctypes.c_int]
LIBC.setns.restype = ctypes.c_int
LIBC.capset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
LIBC.capset.restype = ctypes.c_int
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def check(ok, what):
    if not ok:
        raise OSError(ctypes.get_errno(), what)


def drop_capabilities():
    """What exec does for a non-root uid: no permitted, effective or inheritable capability left
    (a fork keeps the ones setns gave it in the programs' user namespace)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    check(LIBC.capset(header, data) == 0, "capset")


def become_zygote(req, fds):
    """In the new zygote, inside the sandbox's pid namespace: every step of a program's start,
    then `serve`. Never returns."""
    try:
        stdio, ctl = fds[:3], fds[3]
        n_ns = len(NS_ORDER) + 2
        nss = dict(zip((*NS_ORDER, "cgroup", "user"), fds[N_STDIO_CTL : N_STDIO_CTL + n_ns]))
        check(LIBC.setns(nss["cgroup"], 0) == 0, "setns cgroup")
        os.setsid()
        for res, soft, hard in req["rlimits"]:
            resource.setrlimit(res, (soft, hard))
        os.chdir(req["cwd"])
        check(LIBC.setns(nss["user"], 0) == 0, "setns user")
        os.setgroups(req["groups"])
        os.setresgid(req["gid"], req["gid"], req["gid"])
        os.setresuid(req["uid"], req["uid"], req["uid"])
        if req["uid"] != 0:
            drop_capabilities()
        check(LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "no_new_privs")
        if req.get("seccomp"):
            code = bytes.fromhex(req["seccomp"])
            buf = ctypes.create_string_buffer(code, len(code))
            prog = SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
            installed = LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0)
            check(installed == 0, "seccomp")
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        os.dup2(ctl, CONTROL_FD)
        # A program's own fds (`go`, a Landlock ruleset) come last, numbered above every target.
        run_fds = fds[len(fds) - req.get("run_fds", 0) :]
        if run_fds and min(run_fds) <= CONTROL_FD + len(run_fds):
            raise ValueError("the program's fds are numbered too low")
        for i, fd in enumerate(run_fds):
            os.dup2(fd, CONTROL_FD + 1 + i)
        os.closerange(CONTROL_FD + 1 + len(run_fds), MAX_FD)
        os.environ.clear()
        os.environ.update(req["env"])
        make_undumpable()  # a change of ids made it dumpable again
    except BaseException:  # noqa: BLE001
        try:
            traceback.print_exc()
        finally:
            os._exit(127)
    if "run" in req:
        # Made to run one program in place of serving: the rest of its start is a worker's.
        run_worker(req["run"].encode(), [0, 1, 2, *range(CONTROL_FD + 1, CONTROL_FD + 1 + len(run_fds))])
    try:
        serve()
    finally:
        os._exit(0)


def cgroups_of(pid="self"):
    """{"hierarchy id:controllers": that line of /proc/PID/cgroup}, read with plain system calls
    (a text file object costs more than the read)."""
    fd = os.open(f"/proc/{pid}/cgroup", os.O_RDONLY | os.O_CLOEXEC)
    try:
        text = os.read(fd, 1 << 16).decode()
    finally:
        os.close(fd)
    return {line.rsplit(":", 1)[0]: line for line in text.splitlines()}


def join_cgroups_of(pid, join_files):
    """Into the zygote's own cgroup (`join_files`, some hierarchies) and, in every other
    hierarchy, into the cgroup `pid` (the agent, here in the host's view) is in: a spawned zygote
    inherits those (the freezer that pauses the sandbox, the cpu controller's share, ...). Only
    where this process is not there yet: each move takes the kernel's cgroup lock."""
    template = cgroups_of()
    for fd in join_files:
        check(os.write(fd, b"0") == 1, "join cgroup")
    joined = cgroups_of()
    mounts = CGROUP_MOUNTS
    for key, line in cgroups_of(pid).items():
        if joined.get(key) != template.get(key) or joined.get(key) == line:
            continue  # moved into the zygote's cgroup, or already where the agent is
        hid, controllers, path = line.split(":", 2)
        if hid == "0":
            where = [m for t, _o, m in mounts if t == "cgroup2"]
        else:
            want = set(controllers.split(","))
            where = [m for t, o, m in mounts if t == "cgroup" and want <= o]
        if not where:
            continue  # a hierarchy this host does not mount: nothing to be moved in
        # On v1 through `tasks`, as the agent's children join (cgroup/mod.rs `join_file`): this
        # process has one thread, and a thread's move skips the lock whose write side waits for an
        # RCU grace period, milliseconds on an idle host. v2 has only `cgroup.procs`.
        fd = os.open(f"{where[0]}{path}/{'cgroup.procs' if hid == '0' else 'tasks'}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            check(os.write(fd, b"0") == 1, "join cgroup")
        finally:
            os.close(fd)


def cgroup_mounts():
    """[(fstype, options, mount point)] of the cgroup hierarchies this host mounts at their root:
    read by the template once (each child's parse would copy pages of the inherited heap), which
    lives 10 minutes at most."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            fstype, _source, options = post.split()[:3]
            if fstype in ("cgroup", "cgroup2") and pre.split()[3] == "/":
                mounts.append((fstype, set(options.split(",")), pre.split()[4]))
    return mounts


def peer_pid(s):
    """The pid of the process that made the socket pair `s` is an end of (the agent), as this
    process's pid namespace sees it."""
    return struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]


def fork_into(sock, pid_ns):
    """In the template: forks, into the pid namespace `pid_ns` (the agent's), the middle process
    that forks `make_for` and exits. The template's own pid namespace for children is restored
    before anything else; a request that cannot be forked is answered here. Returns whether a
    middle process was made (the caller reaps it)."""
    try:
        s = socket.socket(fileno=sock)
        try:
            agent = peer_pid(s)  # the host's view, which the new process's /proc is
        finally:
            s.detach()
        if agent <= 0:
            raise ValueError("no agent at the request's socket")
        check(LIBC.setns(pid_ns, CLONE_NEWPID) == 0, "setns pid")
    except Exception as e:  # noqa: BLE001
        answer_error(sock, e)
        return False
    try:
        middle = os.fork()
    except OSError as e:
        middle, error = -1, e
    if middle == 0:
        try:
            if os.fork() == 0:
                make_for(sock, agent)
        except OSError as e:
            answer_error(sock, e)
        os._exit(0)
    if LIBC.setns(OWN_PID_NS, CLONE_NEWPID) != 0:
        os._exit(1)  # it cannot go on making processes in a sandbox's namespace
    if middle < 0:
        answer_error(sock, error)
    return middle > 0


def answer_error(sock, e):
    try:
        os.write(sock, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
    except OSError:
        pass


def make_for(sock, agent):
    """The new process, in the sandbox's pid namespace (`agent`: the agent's pid in the host's):
    reads one request from `sock`, takes the sandbox's cgroups and namespaces, answers with its
    pid once it is the agent's child, and becomes the zygote. Never returns."""
    try:
        # Nothing of the template's but its stdio (its log) reaches the sandbox's zygote.
        os.closerange(3, sock)
        os.closerange(sock + 1, MAX_FD)
        s = socket.socket(fileno=sock)
        s.settimeout(REQUEST_TIMEOUT_S)  # an agent that never sends holds this process no longer
        # Its length first: a buffer of the largest request's size would be mapped and unmapped.
        size = s.recv_into(bytearray(1), 1, socket.MSG_PEEK | socket.MSG_TRUNC)
        msg, ancdata, _flags, _addr = s.recvmsg(max(size, 1), socket.CMSG_LEN(64 * 4))
        agent_here = peer_pid(s)  # as the sandbox's pid namespace sees it
        s.detach()
        fds = []
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", data[: len(data) - len(data) % 4])
        req = DECODE(msg.decode())[0]
        n_ns, n_run = len(NS_ORDER) + 2, req.get("run_fds", 0)
        if len(fds) < N_STDIO_CTL + n_ns + n_run:
            raise ValueError(f"got {len(fds)} fds for the request")
        # Its children inherit the cgroups (the zygote's own first): none moves again.
        join_cgroups_of(agent, fds[N_STDIO_CTL + n_ns : len(fds) - n_run])
        for name, fd in zip(NS_ORDER, fds[N_STDIO_CTL:]):
            if name != "pid":  # born there
                check(LIBC.setns(fd, 0) == 0, f"setns {name}")
        await_adoption(agent_here)
        os.write(sock, b'{"pid":%d}' % os.getpid())
        os.close(sock)
    except BaseException as e:  # noqa: BLE001
        answer_error(sock, e)
        os._exit(0)
    become_zygote(req, fds)


def await_adoption(agent):
    """Until the middle process is gone and this one the agent's child (`agent`: its pid here),
    which the agent checks when it adopts the pid it is told: the middle one exits right after
    its fork, usually long before."""
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while os.getppid() != agent:
        if time.monotonic() > deadline:
            raise TimeoutError("the middle process did not exit")
        time.sleep(0.0001)


def serve_template(listen_fd, retire_fd):
    """Accepts agents' connections; per datagram (one request socket), forks `make_for`, and
    reaps those children as they end. Once the manager closes its end of `retire_fd` (it made
    another template, or it is gone), it accepts no more and serves the agents it has until they
    are gone too, then exits. It dies with the manager."""
    import selectors

    PR_SET_PDEATHSIG = 1
    check(LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0, "pdeathsig")
    if os.getppid() == 1:
        return
    global CGROUP_MOUNTS, OWN_PID_NS
    CGROUP_MOUNTS = cgroup_mounts()
    OWN_PID_NS = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    listener = socket.socket(fileno=listen_fd)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(retire_fd, selectors.EVENT_READ)
    fds_size = socket.CMSG_LEN(8)
    os.write(1, b"ready\n")
    # Its children are the middle processes, which exit right after their fork: reaped as the
    # loop goes round.
    making = 0
    while len(sel.get_map()) > 0 or making:
        while making and os.waitpid(-1, os.WNOHANG)[0] > 0:
            making -= 1
        if not sel.get_map():
            os.waitpid(-1, 0)
            making -= 1
            continue
        for key, _ in sel.select(timeout=0.05 if making else None):
            if key.fileobj == retire_fd:
                sel.unregister(retire_fd)
                sel.unregister(listener)
                listener.close()
                continue
            if key.fileobj is listener:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                sel.register(conn, selectors.EVENT_READ)
                continue
            conn = key.fileobj
            try:
                msg, ancdata, flags, _addr = conn.recvmsg(64, fds_size)
            except OSError:
                msg, ancdata, flags = b"", [], 0
            fds = []
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds += array.array("i", data[: len(data) - len(data) % 4])
            if not msg and not fds:
                sel.unregister(conn)
                conn.close()
                continue
            if len(fds) == 2 and not flags & socket.MSG_CTRUNC:
                making += fork_into(*fds)
            for fd in fds:
                os.close(fd)


def template_parent_fork():
    """The template's `ParentFork`, probed from a child of its own: the probe's child is the
    prober's sibling, so the template's to reap (a probe of its own would leave a child to the
    manager, its parent). The zygotes made from the template inherit the result."""
    pf = ParentFork(probe=False)
    if pf.ok is None:
        r, w = os.pipe()
        prober = os.fork()
        if prober == 0:
            os.close(r)
            probed = ParentFork()
            os.write(w, b"%d %d" % (probed.ok, probed.probe_pid))
            os._exit(0)
        os.close(w)
        ok, probe = (int(x) for x in (os.read(r, 64) or b"0 0").split())
        os.close(r)
        os.waitpid(prober, 0)
        if probe > 0:
            os.waitpid(probe, 0)
        pf.ok = bool(ok)
    return pf


MAX_FD = 1 << 20
REQUEST_TIMEOUT_S = 10.0
CGROUP_MOUNTS = []  # the template's `cgroup_mounts()`
OWN_PID_NS = -1  # the template's pid namespace
PARENT_FORK = template_parent_fork() if sys.argv[2:3] == ["template"] else ParentFork()
# The agent's own programs (argv[1] of `python3 -I -c SOURCE PRELUDE`), compiled once here: a
# request's "entry" names one of their functions, which the worker calls instead of reading and
# compiling the file (see `Command::zygote_entry`).
PRELUDE = {"__name__": "__prelude__", "__builtins__": builtins}
if len(sys.argv) > 1 and sys.argv[1]:
    exec(compile(sys.argv[1], "<prelude>", "exec"), PRELUDE)  # noqa: S102 (the agent's own code)
# Warm what every worker uses, then move everything allocated so far out of the collector's reach:
# a collection in a worker would otherwise touch (and copy-on-write) the whole inherited heap.
compile("pass", "<string>", "exec")
LANDLOCK_RESTRICT_SELF(SYS_LANDLOCK_RESTRICT_SELF, -1, 0)  # EBADF: builds the call's converters
gc.collect()
gc.freeze()
if sys.argv[2:3] == ["template"]:
    serve_template(int(sys.argv[3]), int(sys.argv[4]))
else:
    serve()
