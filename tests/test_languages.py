"""The judge's compiled and managed languages (Java, JavaScript, TypeScript, Go, Rust) through
`run_tests` with the real agent: the reference program accepted, a wrong one refused, every other
verdict (compile error, runtime error, memory limit, time limit), on the local backend (the host's
Debian toolchains, deploy/toolchains.sh) and in the sandbox image of the docker backend."""

from __future__ import annotations

import pytest
from language_programs import PROGRAMS

from sandboxes import TestCase, Verdict

pytestmark = pytest.mark.asyncio

LANGUAGES = list(PROGRAMS)
CASES = [TestCase(input="2 3\n", expected_output="5\n"), TestCase(input="40 -12\n", expected_output="28\n")]


async def verdicts(sb, program: str, language: str, **kw) -> list[Verdict]:
    report = await sb.run_tests(program, kw.pop("tests", CASES), language=language, **kw)
    return [c.verdict for c in report.cases]


async def test_every_language_is_in_the_sandbox(sb) -> None:
    assert set(LANGUAGES) <= set((await sb.info()).languages)


@pytest.mark.parametrize("language", LANGUAGES)
async def test_reference_accepted_and_wrong_refused(sb, language) -> None:
    p = PROGRAMS[language]
    assert await verdicts(sb, p.sum, language) == [Verdict.ACCEPTED, Verdict.ACCEPTED]
    assert await verdicts(sb, p.wrong, language) == [Verdict.WRONG_ANSWER, Verdict.WRONG_ANSWER]


@pytest.mark.parametrize("language", LANGUAGES)
async def test_a_syntax_error(sb, language) -> None:
    report = await sb.run_tests(PROGRAMS[language].broken, CASES, language=language)
    if language == "javascript":  # no compile step: the interpreter refuses it when it runs
        assert [c.verdict for c in report.cases] == [Verdict.RUNTIME_ERROR] * 2
        return
    assert not report.compiled
    assert [c.verdict for c in report.cases] == [Verdict.COMPILE_ERROR] * 2
    assert report.compile_output  # the compiler's message, for the model


@pytest.mark.parametrize("language", LANGUAGES)
async def test_runtime_error_memory_and_time_limits(sb, language) -> None:
    p = PROGRAMS[language]
    one = [TestCase(input="", expected_output="")]
    assert await verdicts(sb, p.crash, language, tests=one) == [Verdict.RUNTIME_ERROR]
    assert await verdicts(sb, p.hog, language, tests=one, memory_limit_mb=256, time_limit=20) == [
        Verdict.MEMORY_LIMIT
    ]
    assert await verdicts(sb, p.spin, language, tests=one, time_limit=1) == [Verdict.TIME_LIMIT]
    # The sandbox judges the next program as if nothing had happened.
    assert await verdicts(sb, p.sum, language) == [Verdict.ACCEPTED, Verdict.ACCEPTED]


# A failed assertion, as test harnesses of each language write it: a runtime error that says so.
ASSERTIONS = {
    "java": "public class Main {\n  public static void main(String[] a) {\n    assert 1 == 2;\n  }\n}\n",
    "typescript": 'import assert from "assert";\nassert.strictEqual(1, 2);\n',
}


@pytest.mark.parametrize("language", list(ASSERTIONS))
async def test_a_failed_assertion_is_a_runtime_error(sb, language) -> None:
    """Java runs with assertions enabled; TypeScript's default import of a Node module is the
    module (esModuleInterop), so its assertion fails as an AssertionError, not a TypeError."""
    one = [TestCase(input="", expected_output="")]
    report = await sb.run_tests(ASSERTIONS[language], one, language=language)
    (case,) = report.cases
    assert case.verdict == Verdict.RUNTIME_ERROR and b"AssertionError" in case.stderr, report


@pytest.mark.timeout(1800)
async def test_every_language_in_the_docker_sandbox_image(make_pool, images) -> None:
    pool = await make_pool(backend="docker", warm=1)
    async with pool.sandbox() as sb:
        assert set(LANGUAGES) <= set((await sb.info()).languages)
        for language, p in PROGRAMS.items():
            assert await verdicts(sb, p.sum, language) == [Verdict.ACCEPTED] * 2, language
            assert await verdicts(sb, p.wrong, language) == [Verdict.WRONG_ANSWER] * 2, language
            report = await sb.run_tests(p.broken, CASES, language=language)
            assert report.cases[0].verdict in (Verdict.COMPILE_ERROR, Verdict.RUNTIME_ERROR), language
            one = [TestCase(input="", expected_output="")]
            got = await verdicts(sb, p.hog, language, tests=one, memory_limit_mb=256, time_limit=20)
            assert got == [Verdict.MEMORY_LIMIT], language
