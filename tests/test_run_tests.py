"""`Sandbox.run_tests` through the real agent: every verdict from a program made to produce it,
one case's verdict never disturbing the next, compare modes, check-script isolation, bad requests."""

from __future__ import annotations

import json
import math
import os
import types
from pathlib import Path

import pytest
from helpers import warm_zygote

import sandboxes
from sandboxes import InvalidRequest, Limits, TestCase, TestReport, Verdict, _bridge
from sandboxes.judging import MAX_CASES, build_run_tests_request

# Reads one line: "loop" spins, "sleep" blocks, "hog" allocates, "spam" floods stdout, "exit"
# exits 3, "raise" raises; anything else is a number, doubled. So one program gives every verdict.
MULTI = """
import sys, time
line = sys.stdin.readline().strip()
if line == "loop":
    while True:
        pass
elif line == "sleep":
    time.sleep(60)
elif line == "hog":
    chunks = []
    while True:
        chunks.append(bytearray(16 << 20))
elif line == "spam":
    while True:
        sys.stdout.write("x" * 65536)
elif line == "exit":
    sys.exit(3)
elif line == "raise":
    raise ValueError("boom")
print(int(line) * 2)
"""

C_DOUBLE = r"""
#include <stdio.h>
int main(void) {
    long x;
    if (scanf("%ld", &x) != 1) return 1;
    printf("%ld\n", 2 * x);
    return 0;
}
"""

CPP_SORT = r"""
#include <algorithm>
#include <iostream>
#include <vector>
int main() {
    int n; std::cin >> n;
    std::vector<int> v(n);
    for (auto& x : v) std::cin >> x;
    std::sort(v.begin(), v.end());
    for (int i = 0; i < n; i++) std::cout << v[i] << (i + 1 < n ? ' ' : '\n');
}
"""


def verdicts(report: TestReport) -> list[Verdict]:
    return [c.verdict for c in report.cases]


async def test_accepted_and_wrong_answer(sb) -> None:
    r = await sb.run_tests(MULTI, [TestCase("3\n", "6\n"), TestCase("21", b"42"), TestCase("5", "11")])
    assert verdicts(r) == [Verdict.ACCEPTED, Verdict.ACCEPTED, Verdict.WRONG_ANSWER]
    assert (r.passed, r.total, r.compiled) == (2, 3, True)
    assert r.pass_rate == pytest.approx(2 / 3) and not r.all_passed
    assert r.verdict is Verdict.WRONG_ANSWER
    wrong = r.cases[2]
    assert wrong.stdout == b"10\n" and "10" in wrong.message and wrong.exit_code == 0
    assert r.verdict_counts() == {"accepted": 2, "wrong_answer": 1}
    assert all(c.duration_s > 0 for c in r.cases)


async def test_time_limit_then_a_passing_case(sb) -> None:
    r = await sb.run_tests(
        MULTI,
        [TestCase("loop", "0"), TestCase("1", "2"), TestCase("sleep", "0"), TestCase("2", "4")],
        time_limit=0.5,
    )
    assert verdicts(r) == [Verdict.TIME_LIMIT, Verdict.ACCEPTED, Verdict.TIME_LIMIT, Verdict.ACCEPTED]
    assert r.passed == 2


async def test_memory_limit_then_a_passing_case(sb) -> None:
    r = await sb.run_tests(
        MULTI, [TestCase("hog", "0"), TestCase("4", "8")], memory_limit_mb=64, time_limit=10
    )
    assert verdicts(r) == [Verdict.MEMORY_LIMIT, Verdict.ACCEPTED]


async def test_output_limit_then_a_passing_case(sb) -> None:
    r = await sb.run_tests(
        MULTI,
        [TestCase("spam", "x"), TestCase("5", "10")],
        time_limit=10,
        limits=Limits(max_output_bytes=1 << 20),
    )
    assert verdicts(r) == [Verdict.OUTPUT_LIMIT, Verdict.ACCEPTED]
    assert len(r.cases[0].stdout) <= 1024  # an excerpt, not the flood


async def test_runtime_errors_then_a_passing_case(sb) -> None:
    r = await sb.run_tests(MULTI, [TestCase("exit", "0"), TestCase("raise", "0"), TestCase("6", "12")])
    assert verdicts(r) == [Verdict.RUNTIME_ERROR, Verdict.RUNTIME_ERROR, Verdict.ACCEPTED]
    assert r.cases[0].exit_code == 3
    assert b"ValueError: boom" in r.cases[1].stderr


async def test_compile_error_in_c(sb) -> None:
    r = await sb.run_tests(
        "int main(void) { return 0 }\n", [TestCase("", ""), TestCase("1", "1")], language="c"
    )
    assert not r.compiled
    assert verdicts(r) == [Verdict.COMPILE_ERROR, Verdict.COMPILE_ERROR]
    assert b"error" in r.compile_output and r.passed == 0


async def test_c_cpp_and_bash_accepted(sb) -> None:
    r = await sb.run_tests(C_DOUBLE, [TestCase("21", "42"), TestCase("-4", "-8")], language="c")
    assert r.all_passed and r.compiled and r.compile_time_s > 0, r
    r = await sb.run_tests(CPP_SORT, [TestCase("3\n3 1 2\n", "1 2 3"), TestCase("1\n7", "7")], language="cpp")
    assert r.all_passed, r
    bash = "read a b\necho $((a + b))\n"
    r = await sb.run_tests(bash, [TestCase("1 2", "3"), TestCase("40 2", "42")], language="bash")
    assert r.all_passed, r
    r = await sb.run_tests(
        "add() { echo $(($1 + $2)); }\n", [TestCase(check='[ "$(add 2 3)" = 5 ]\n')], language="bash"
    )
    assert r.all_passed, r


async def test_stop_on_first_failure_skips_the_rest(sb) -> None:
    cases = [TestCase("1", "2"), TestCase("2", "5"), TestCase("3", "6"), TestCase("4", "8")]
    r = await sb.run_tests(MULTI, cases, stop_on_first_failure=True)
    assert verdicts(r) == [Verdict.ACCEPTED, Verdict.WRONG_ANSWER, Verdict.SKIPPED, Verdict.SKIPPED]
    r = await sb.run_tests(MULTI, cases)
    assert verdicts(r) == [Verdict.ACCEPTED, Verdict.WRONG_ANSWER, Verdict.ACCEPTED, Verdict.ACCEPTED]


async def test_compare_modes(sb) -> None:
    third = "print(1 / 3)\n"  # 0.3333333333333333
    r = await sb.run_tests(third, [TestCase("", "0.333333333")], compare="float")
    assert r.all_passed, r
    r = await sb.run_tests(third, [TestCase("", "0.333333333")])
    assert verdicts(r) == [Verdict.WRONG_ANSWER]
    r = await sb.run_tests(third, [TestCase("", "0.334")], compare="float")
    assert verdicts(r) == [Verdict.WRONG_ANSWER]
    r = await sb.run_tests(third, [TestCase("", "0.334")], compare="float", float_tolerance=0.01)
    assert r.all_passed, r
    spaced = "print('1  2 ')\nprint()\n"
    r = await sb.run_tests(spaced, [TestCase("", "1 2")])
    assert r.all_passed, r
    r = await sb.run_tests(spaced, [TestCase("", "1 2\n"), TestCase("", "1  2 \n\n")], compare="exact")
    assert verdicts(r) == [Verdict.WRONG_ANSWER, Verdict.ACCEPTED]


# --- check-script style: each case starts from a clean slate ---------------------------------------

COUNTER = "counter = 0\n\ndef bump():\n    global counter\n    counter += 1\n    return counter\n"


async def test_check_cases_do_not_share_interpreter_state(sb) -> None:
    check = "assert bump() == 1\nimport builtins\nassert not hasattr(builtins, 'leak')\nbuiltins.leak = 1\n"
    r = await sb.run_tests(COUNTER, [TestCase(check=check), TestCase(check=check), TestCase(check=check)])
    assert r.all_passed, r


async def test_a_background_process_does_not_survive_its_case(sb) -> None:
    start = "import subprocess\nsubprocess.Popen(['sleep', '300'], start_new_session=True)\n"
    look = (
        "import os\n"
        "cmds = [open(f'/proc/{p}/cmdline', 'rb').read() for p in os.listdir('/proc') if p.isdigit()]\n"
        "assert not any(c.startswith(b'sleep') for c in cmds), cmds\n"
    )
    r = await sb.run_tests("pass\n", [TestCase(check=look), TestCase(check=start), TestCase(check=look)])
    assert r.all_passed, r


async def test_python_cases_run_through_the_zygote(sb) -> None:
    await warm_zygote(sb)
    r = await sb.run_tests("print(int(input()) * 2)\n", [TestCase("3\n", "6\n"), TestCase("4\n", "8\n")])
    assert r.all_passed, r
    assert [c.path for c in r.cases] == ["zygote", "zygote"]
    r = await sb.run_tests("def f(x):\n    return 2 * x\n", [TestCase(check="assert f(2) == 4\n")])
    assert r.all_passed and r.cases[0].path == "zygote", r


async def test_a_check_case_reads_the_program_as_python3_reads_a_file(sb) -> None:
    """A program saved with a byte-order mark and Windows line endings runs in a check case as
    `python3 solution.py` runs it (the bytes, decoded by the interpreter), as it does on stdin."""
    await warm_zygote(sb)
    program = "\ufeffdef f(x):\r\n    return 2 * x\r\nprint(f(int(input())))\r\n"
    r = await sb.run_tests(program, [TestCase("2\n", "4\n"), TestCase("3\n", check="assert f(3) == 6\r\n")])
    assert r.all_passed, r
    assert [c.path for c in r.cases] == ["zygote", "zygote"]


async def test_a_file_written_in_cwd_is_not_seen_by_the_next_case(sb) -> None:
    """Each case runs in a fresh working directory of its own."""
    check = "import os\nassert not os.path.exists('marker')\nopen('marker', 'w').write('x')\n"
    r = await sb.run_tests("pass\n", [TestCase(check=check), TestCase(check=check)])
    assert r.all_passed, r


@pytest.mark.parametrize("language", ["python", "bash"])
async def test_a_case_writes_only_beneath_its_own_directory(sb, language) -> None:
    """Files a case leaves in the sandbox's shared places (/tmp, /dev/shm, the work dir) would be
    seen by later cases and calls: the kernel (Landlock) refuses those writes, on the zygote path
    (python) and the spawn path (bash). Its own directory (cwd, TMPDIR), /dev/null and its own
    stdio reopened by name stay writable; a plain exec is not confined."""
    if language == "python":
        await warm_zygote(sb)
        program = (
            "import os, tempfile\n"
            "for p in ['/tmp/planted', '/dev/shm/planted', '/work/planted']:\n"
            "    try:\n"
            "        open(p, 'w')\n"
            "    except PermissionError:\n"
            "        print('refused', p)\n"
            "open('mine.txt', 'w').write('x')\n"
            "tempfile.mkstemp()\n"
            "open('/dev/null', 'w').write('x')\n"
            "open('/dev/stdout', 'w').write('reopened\\n')\n"
        )
        check = "pass\n"
    else:
        program = (
            "for p in /tmp/planted /dev/shm/planted /work/planted; do\n"
            "  (echo x > $p) 2>/dev/null || echo refused $p\n"
            "done\n"
            "echo x > mine.txt && echo x > /dev/null && echo reopened > /dev/stdout\n"
        )
        check = "true\n"
    r = await sb.run_tests(program, [TestCase(check=check)], language=language)
    assert r.all_passed, r
    # (Python's print is buffered, the reopened /dev/stdout is not: compare as sets.)
    assert sorted(r.cases[0].stdout.decode().splitlines()) == [
        "refused /dev/shm/planted",
        "refused /tmp/planted",
        "refused /work/planted",
        "reopened",
    ], r
    if language == "python":
        assert r.cases[0].path == "zygote", r
    look = await sb.exec(
        [
            "sh",
            "-c",
            "ls /tmp/planted /dev/shm/planted /work/planted 2>&1; echo y > /tmp/free && cat /tmp/free",
        ]
    )
    assert look.stdout.decode().count("No such file") == 3 and look.stdout.endswith(b"y\n"), look


async def test_a_case_cannot_rewrite_the_program_of_later_cases(sb) -> None:
    """The program, binary and checks are read-only to the program (no reward hacking)."""
    prog = (
        "import sys\nif sys.stdin.read() == 'hack':\n    try:\n        open(__file__, 'w').write('print(2)')\n"
        "    except OSError:\n        pass\nprint(1)\n"
    )
    r = await sb.run_tests(prog, [TestCase("hack", "1"), TestCase("", "1")])
    assert r.all_passed, r


async def test_temporary_files_go_to_the_case_directory(sb) -> None:
    """TMPDIR is the case's own directory, removed with it: tempfile users leave nothing behind."""
    check = (
        "import os, tempfile\n"
        "assert os.environ['TMPDIR'] == os.getcwd() == tempfile.gettempdir(), os.environ['TMPDIR']\n"
        "assert os.listdir('.') == [], os.listdir('.')\n"
        "tempfile.mkstemp()\n"
    )
    r = await sb.run_tests("pass\n", [TestCase(check=check), TestCase(check=check)])
    assert r.all_passed, r


@pytest.mark.parametrize(
    "code, signal",
    [
        ("import os; os.abort()", 6),
        ("import signal; signal.raise_signal(signal.SIGTERM)", 15),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 9),
    ],
)
async def test_a_zygote_worker_signals_itself_like_python3(sb, code, signal) -> None:
    """A worker is a proper process of its own: abort() and raise() reach it, not the zygote."""
    await warm_zygote(sb)
    r = await sb.exec(["python3", "-c", code])
    assert r.path == "zygote" and r.signal == signal and r.exit_code == -1, r
    more = (
        "import threading, subprocess, os\n"
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout.strip())\n"
        "print(os.getppid())\n"
    )
    r = await sb.exec(["python3", "-c", more])
    assert r.path == "zygote" and r.stdout == b"thread\nchild\n1\n", r


def _zygote_pid_inside(agent_pid: int) -> int:
    """The zygote (a child of the agent running the zygote program), as a pid of the sandbox."""
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == agent_pid and b"Python zygote" in Path(f"/proc/{p}/cmdline").read_bytes():
                status = Path(f"/proc/{p}/status").read_text()
                return int(status.split("NSpid:")[1].splitlines()[0].split()[-1])
        except (OSError, IndexError, ValueError):
            continue
    raise AssertionError("no zygote")


async def test_a_program_cannot_tamper_with_the_python_zygote(sb) -> None:
    """The zygote shares the programs' uid but is non-dumpable: its memory, environment and fds are
    out of their reach, so one submission cannot change what later ones run (no reward hacking
    across cases). Workers themselves are dumpable again, like any spawned program."""
    await warm_zygote(sb)
    r = await sb.run_tests("pass\n", [TestCase(check="pass\n")])
    assert r.all_passed and r.cases[0].path == "zygote", r
    z = _zygote_pid_inside(sb.handle.backend_data.pid)
    check = (
        "import os\n"
        f"z = {z}\n"
        "assert z != os.getpid()\n"
        "os.kill(z, 0)  # it exists and shares our uid: signals reach it\n"
        "for path, mode in [(f'/proc/{z}/mem', 'r+b'), (f'/proc/{z}/mem', 'rb'), (f'/proc/{z}/environ', 'rb')]:\n"
        "    try:\n"
        "        open(path, mode).read(1)\n"
        "    except OSError:\n"
        "        pass\n"
        "    else:\n"
        "        raise AssertionError(f'{path} opened with {mode}')\n"
        "try:\n"
        "    os.listdir(f'/proc/{z}/fd')\n"
        "except OSError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('zygote fds listed')\n"
        "open('/proc/self/environ', 'rb').read()\n"
        "open('/proc/self/mem', 'rb').close()\n"
    )
    r = await sb.run_tests("pass\n", [TestCase(check=check)])
    assert r.all_passed and r.cases[0].path == "zygote", r


async def test_a_python_worker_has_exactly_the_environment_asked_for(sb) -> None:
    """A worker starts with the zygote's environment and changes only what differs: variables of an
    earlier execution are gone, changed ones changed, at the Python and the C level (a
    subprocess), and the whole matches what a spawned program gets."""
    await warm_zygote(sb)
    show = (
        "import json, os, subprocess\n"
        "c = dict(l.split('=', 1) for l in subprocess.run(['env'], capture_output=True, text=True).stdout.splitlines())\n"
        "print(json.dumps([dict(os.environ), c]))\n"
    )
    first = await sb.exec(["python3", "-c", show], env={"ZYG_A": "1", "ZYG_C": "x"})
    second = await sb.exec(["python3", "-c", show], env={"ZYG_B": "2", "ZYG_C": "y"})
    spawned = await sb.exec(["env"], env={"ZYG_B": "2", "ZYG_C": "y"})
    assert (first.path, second.path) == ("zygote", "zygote"), (first, second)
    py1, c1 = json.loads(first.stdout)
    py2, c2 = json.loads(second.stdout)
    assert py1["ZYG_A"] == c1["ZYG_A"] == "1" and py1["ZYG_C"] == "x"
    assert "ZYG_A" not in py2 and "ZYG_A" not in c2, (py2, c2)
    assert py2["ZYG_B"] == c2["ZYG_B"] == "2" and py2["ZYG_C"] == c2["ZYG_C"] == "y"
    want = dict(line.split("=", 1) for line in spawned.stdout.decode().splitlines())
    assert py2 == want, (py2, want)


async def test_a_program_that_stops_the_python_zygote_does_not_hold_up_the_next_one(sb) -> None:
    """Signals of a program reach the zygote (same uid). A stopped zygote would leave the next
    Python execution waiting for a reply until the agent's deadline (10 s) and then spawning it;
    the agent resumes the zygote before each request, so the next case runs on the fast path
    (without that, the second case is spawned after the zygote is given up)."""
    await warm_zygote(sb)
    z = _zygote_pid_inside(sb.handle.backend_data.pid)
    stop = f"import os, signal\nos.kill({z}, signal.SIGSTOP)\n"
    r = await sb.run_tests("pass\n", [TestCase(check=stop), TestCase(check="pass\n")], time_limit=5.0)
    assert r.all_passed, r
    assert [c.path for c in r.cases] == ["zygote", "zygote"], r  # not restarted, not spawned


@pytest.mark.parametrize(
    "language, program",
    [
        ("python", "import sys\nsys.exit(0)\n"),
        ("python", "import os\nos._exit(0)\n"),
        ("python", "raise SystemExit\n"),
        ("python", "import atexit, os\natexit.register(lambda: os._exit(0))\n"),
        ("python", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
        ("python", "print('\\n' + open('.check-token').read())\n"),
        ("bash", "exit 0\n"),
        ("bash", "exec 9<&-\n"),
        ("bash", "cat .check-token; exit 0\n"),
    ],
)
async def test_a_program_that_ends_before_its_check_does_not_pass(sb, language, program) -> None:
    """A check script passes when it runs to its end, not when the process exits 0: a program that
    exits early (the simplest reward hack against HumanEval-style checks) is not accepted. The
    runner prints a per-case token after the check; the token's file is gone before the program
    runs. (Checks share the program's interpreter, so a program built to fool them, e.g. one
    returning an object equal to everything, still can: see docs.)"""
    check = "assert False, 'the check ran'\n" if language == "python" else "false\n"
    r = await sb.run_tests(program, [TestCase(check=check)], language=language)
    assert r.cases[0].verdict in (Verdict.WRONG_ANSWER, Verdict.RUNTIME_ERROR), r
    assert not r.all_passed
    ok = "x = 1\n" if language == "python" else "x=1\n"
    good = "assert x == 1\nprint('done')\n" if language == "python" else '[ "$x" = 1 ]\necho done\n'
    r = await sb.run_tests(ok, [TestCase(check=good)], language=language)
    assert r.all_passed, r
    assert r.cases[0].stdout == b"done\n", r  # the token is not part of the output shown


# --- bad requests ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "program, tests, kwargs",
    [
        ("print(1)", [TestCase("", "1")], {"language": "cobol"}),
        ("print(1)", [TestCase("", "1")], {"language": ""}),
        ("print(1)", [], {}),
        ("print(1)", TestCase("", "1"), {}),
        ("print(1)", ["1"], {}),
        ("", [TestCase("", "1")], {}),
        ("int main(){}", [TestCase(check="assert True")], {"language": "c"}),
        ("int main(){}", [TestCase(check="assert True")], {"language": "cpp"}),
        ("print(1)", [TestCase("", "1")], {"time_limit": -1}),
        ("print(1)", [TestCase("", "1")], {"time_limit": 0}),
        ("print(1)", [TestCase("", "1")], {"time_limit": math.inf}),
        ("print(1)", [TestCase("", "1")], {"time_limit": 1e9}),
        ("print(1)", [TestCase("", "1")], {"memory_limit_mb": 1e12}),
        ("print(1)", [TestCase("", "1")], {"memory_limit_mb": -5}),
        ("print(1)", [TestCase("", "1")], {"limits": Limits(max_pids=-1)}),
        ("print(1)", [TestCase("", "1")], {"limits": {"wall_time_s": 1}}),
        ("print(1)", [TestCase("", "1")], {"compare": "fuzzy"}),
        ("print(1)", [TestCase("", "1")], {"float_tolerance": -1.0}),
        ("print(1)", [TestCase("", "1")], {"float_tolerance": math.nan}),
        ("print(1)", [TestCase("", "1")], {"stop_on_first_failure": "yes"}),
        ("print(1)", [TestCase("", "1")] * (MAX_CASES + 1), {}),
    ],
)
async def test_bad_requests_are_invalid_and_the_sandbox_keeps_working(sb, program, tests, kwargs) -> None:
    with pytest.raises(InvalidRequest):
        await sb.run_tests(program, tests, **kwargs)
    r = await sb.run_tests("print(int(input()) + 1)", [TestCase("1", "2")])
    assert r.all_passed, r


def test_test_case_needs_exactly_one_expectation() -> None:
    with pytest.raises(InvalidRequest):
        TestCase("1")
    with pytest.raises(InvalidRequest):
        TestCase("1", "2", check="assert True")
    with pytest.raises(InvalidRequest):
        TestCase("1", check="   ")
    with pytest.raises(InvalidRequest):
        TestCase(1, "2")  # type: ignore[arg-type]
    t = TestCase("é", "ok")
    assert t.input == "é".encode() and t.expected_output == b"ok" and t.check is None
    assert TestCase(check=b"assert 1").to_wire() == (b"", b"", "assert 1")


# --- the request the sandbox sends, and the report it returns (no agent needed) -----------------------


def _request(**kwargs):
    base = dict(  # noqa: C408
        language="python",
        base_limits=Limits(memory_bytes=1 << 30),
        time_limit=None,
        memory_limit_mb=None,
        stop_on_first_failure=False,
        compare="whitespace",
        float_tolerance=None,
        limits=None,
    )
    base.update(kwargs)
    tests = base.pop("tests", [TestCase("", "1")])
    return build_run_tests_request("print(1)", tests, **base)


def test_limits_layering_and_deadline() -> None:
    r = _request(limits=Limits(wall_time_s=3, max_pids=8), time_limit=2, memory_limit_mb=64)
    assert r.limits.wall_time_s == 2 and r.limits.cpu_time_s == 2
    assert r.limits.memory_bytes == 64 << 20 and r.limits.max_pids == 8
    assert _request().limits.memory_bytes == 1 << 30  # the sandbox's default stays
    # The RPC deadline is a bound that grows with the number of cases and the time limit.
    one = _request(time_limit=2).deadline_s
    many = _request(time_limit=2, tests=[TestCase("", "1")] * 50).deadline_s
    slower = _request(time_limit=4, tests=[TestCase("", "1")] * 50).deadline_s
    assert one > 2 and many > one + 49 * 2 and slower > many
    assert _request().deadline_s > 30  # no limit given: the agent's default 30 s per case


def test_native_report_conversion() -> None:
    case = types.SimpleNamespace(
        verdict="time_limit",
        exit_code=-1,
        signal=9,
        wall_time_s=1.5,
        cpu_time_s=1.4,
        peak_memory_bytes=10,
        stdout=b"o",
        stderr=b"e",
        message="time limit exceeded",
        path="",
    )
    future = types.SimpleNamespace(**{**vars(case), "verdict": "partial_credit", "message": ""})
    native = types.SimpleNamespace(
        cases=[case, future],
        passed=0,
        total=2,
        compiled=True,
        compile_output=b"",
        compile_time_s=0.0,
        wall_time_s=3.0,
    )
    r = _bridge.to_test_report(native)
    assert r.cases[0] == sandboxes.CaseResult(
        Verdict.TIME_LIMIT, -1, 9, 1.5, 1.4, 10, b"o", b"e", "time limit exceeded", "spawn"
    )
    assert r.cases[1].verdict is Verdict.SANDBOX_ERROR and "partial_credit" in r.cases[1].message
    assert r.duration_s == 3.0 and r.pass_rate == 0.0 and r.verdict is Verdict.TIME_LIMIT
    assert str(Verdict.ACCEPTED) == "accepted" and Verdict("skipped") is Verdict.SKIPPED
