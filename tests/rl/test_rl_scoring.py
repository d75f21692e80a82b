"""Program extraction and test specs in the shapes trainers' data sets use, judged for real."""

from __future__ import annotations

import json

import pytest
from sandboxes_rl.problems import problem_rows, program_of, tests_spec
from sandboxes_rl.scoring import Score, completion_text, extract_code, judge, tests_from_spec

import sandboxes
from sandboxes import TestCase


def test_extract_code_prefers_matching_language_and_last_block() -> None:
    text = "first\n```bash\necho hi\n```\nthen\n```python\nx = 1\n```\nand\n```python\nprint(2)\n```\nbye"
    assert extract_code(text, "python") == "print(2)"
    assert extract_code(text, "bash") == "echo hi"
    assert extract_code(text) == "print(2)"
    assert extract_code("```py\nprint(3)\n```", "python") == "print(3)"
    assert extract_code("```cpp\nint main(){}\n```", "c++") == "int main(){}"
    assert extract_code("no fence, just code: print(1)") == "no fence, just code: print(1)"
    assert extract_code("truncated\n```python\ndef f():\n    return 1") == "def f():\n    return 1"
    assert extract_code("") == ""


def test_completion_text_shapes() -> None:
    assert completion_text("plain") == "plain"
    assert completion_text({"role": "assistant", "content": "x"}) == "x"
    msgs = [
        {"role": "assistant", "content": "first"},
        {"role": "tool", "content": "out"},
        {"role": "assistant", "content": [{"type": "text", "text": "last"}]},
    ]
    assert completion_text(msgs) == "last"
    assert completion_text(None) == ""


def test_tests_from_spec_shapes() -> None:
    he, lang = tests_from_spec({"test": "def check(c):\n    assert c(1) == 2\n", "entry_point": "f"})
    assert lang is None and he[0].check.endswith("check(f)\n")
    vi, lang = tests_from_spec(
        json.dumps(
            {"language": "cpp", "test_cases": [{"input": "1 2\n", "output": "3\n", "type": "stdin_stdout"}]}
        )
    )
    assert lang == "cpp" and vi == [TestCase("1 2\n", "3\n")]
    io, lang = tests_from_spec({"inputs": ["1\n", ["2", "3"]], "outputs": ["1\n", "5\n"]})
    assert io[1] == TestCase("2\n3\n", "5\n") and lang is None
    call, lang = tests_from_spec({"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]})
    assert lang == "python" and call[0].check is not None
    items, _ = tests_from_spec([{"input": "", "output": "x"}, {"check": "assert True"}, TestCase("", "y")])
    assert len(items) == 3
    assert tests_from_spec(None) == ([], None)
    assert tests_from_spec({"verification_info": {"test_cases": [{"input": "", "output": "1"}]}})[0]
    with pytest.raises(sandboxes.InvalidRequest):
        tests_from_spec("not json")
    with pytest.raises(sandboxes.InvalidRequest):
        tests_from_spec([{"input": "no output"}])
    with pytest.raises(sandboxes.InvalidRequest):
        tests_from_spec({"inputs": [1], "outputs": []})


async def test_specs_judge_correctly_in_a_sandbox(sb) -> None:
    call, _ = tests_from_spec({"fn_name": "add", "inputs": [[1, 2], [5, 5]], "outputs": [3, [10]]})
    good = await judge(sb, "def add(a, b):\n    return a + b\n", call)
    assert good.reward == 1.0 and good.all_passed and good.verdict == "accepted"
    bad = await judge(sb, "def add(a, b):\n    return a - b\n", call)
    assert bad.reward == 0.0 and bad.total == 2
    leet = await judge(sb, "class Solution:\n    def add(self, a, b):\n        return a + b\n", call)
    assert leet.reward == 1.0
    io, _ = tests_from_spec({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "8\n"]})
    half = await judge(sb, "a, b = map(int, input().split())\nprint(a + b)\n", io)
    assert half.pass_rate == 0.5 and half.reward == 0.5 and not half.all_passed
    strict = await judge(sb, "a, b = map(int, input().split())\nprint(a + b)\n", io, reward="all_passed")
    assert strict.reward == 0.0
    assert (await judge(sb, "   ", io)) == Score.no_code(2)
    with pytest.raises(sandboxes.InvalidRequest):
        await judge(sb, "print(1)", [])


async def test_problem_rows_round_trip(sb) -> None:
    rows = problem_rows("humaneval", num_examples=2)
    assert rows[0]["info"]["prefix"].startswith("from typing import List")
    tests, lang = tests_from_spec(rows[0]["info"]["tests"], rows[0]["info"]["language"])
    assert lang == "python"
    # A model answer without the prompt's imports still runs: the prefix brings them.
    body = rows[0]["answer"].split("from typing import List\n", 1)[1]
    s = await judge(sb, program_of(body, rows[0]["info"]["prefix"]), tests)
    assert s.reward == 1.0
    stdio = problem_rows("stdio", num_examples=1)
    tests, _ = tests_from_spec(stdio[0]["info"]["tests"])
    assert (await judge(sb, stdio[0]["answer"], tests)).reward == 1.0
    assert tests_spec(tests) == json.loads(stdio[0]["info"]["tests"])
