"""Reference programs of the judge's compiled and managed languages, one set per language, for
the tests of every surface that runs them (run_tests, SandboxFusion's /run_code, Piston): the
sum of two integers read from stdin (`SUM`), a wrong one, one that does not compile (for
JavaScript, a syntax error: a runtime error, as for Python), one that fails at run time, one
that allocates without bound and one that loops."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PROGRAMS", "Programs"]


@dataclass(frozen=True)
class Programs:
    sum: str  # prints a + b of "a b" on stdin
    wrong: str  # prints a - b
    broken: str  # does not compile (a syntax error)
    crash: str  # exits non-zero at run time
    hog: str  # allocates and touches memory without bound
    spin: str  # never ends


PROGRAMS = {
    "java": Programs(
        sum="import java.util.*;\npublic class Main {\n  public static void main(String[] a) {\n"
        "    Scanner s = new Scanner(System.in);\n    System.out.println(s.nextLong() + s.nextLong());\n  }\n}\n",
        wrong="import java.util.*;\npublic class Main {\n  public static void main(String[] a) {\n"
        "    Scanner s = new Scanner(System.in);\n    System.out.println(s.nextLong() - s.nextLong());\n  }\n}\n",
        broken="public class Main { public static void main(String[] a) { System.out.println(1) } }\n",
        crash='public class Main { public static void main(String[] a) { throw new RuntimeException("boom"); } }\n',
        hog="import java.util.*;\npublic class Main { public static void main(String[] a) {\n"
        "  List<long[]> l = new ArrayList<>(); while (true) l.add(new long[1 << 20]); } }\n",
        spin="public class Main { public static void main(String[] a) { while (true) {} } }\n",
    ),
    "javascript": Programs(
        sum="const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\n"
        "console.log(a + b);\n",
        wrong="const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\n"
        "console.log(a - b);\n",
        broken="console.log(1 +);\n",
        crash="throw new Error('boom');\n",
        hog="const l = []; while (true) l.push(new Array(1 << 20).fill(1));\n",
        spin="while (true) {}\n",
    ),
    "typescript": Programs(
        sum="const [a, b]: number[] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\n"
        "console.log(a + b);\n",
        wrong="const [a, b]: number[] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\n"
        "console.log(a - b);\n",
        broken="const x: number = ;\n",
        crash="const f = (): never => { throw new Error('boom'); };\nf();\n",
        hog="const l: number[][] = [];\nwhile (true) l.push(new Array(1 << 20).fill(1));\n",
        spin="while (true) {}\n",
    ),
    "go": Programs(
        sum='package main\n\nimport "fmt"\n\nfunc main() {\n\tvar a, b int64\n\tfmt.Scan(&a, &b)\n'
        "\tfmt.Println(a + b)\n}\n",
        wrong='package main\n\nimport "fmt"\n\nfunc main() {\n\tvar a, b int64\n\tfmt.Scan(&a, &b)\n'
        "\tfmt.Println(a - b)\n}\n",
        broken="package main\n\nfunc main() { x := }\n",
        crash='package main\n\nfunc main() { panic("boom") }\n',
        hog="package main\n\nfunc main() {\n\tvar s [][]byte\n\tfor {\n\t\tb := make([]byte, 1<<20)\n"
        "\t\tfor i := range b {\n\t\t\tb[i] = 1\n\t\t}\n\t\ts = append(s, b)\n\t}\n}\n",
        spin="package main\n\nfunc main() {\n\tfor {\n\t}\n}\n",
    ),
    "rust": Programs(
        sum="use std::io::Read;\nfn main() {\n    let mut s = String::new();\n"
        "    std::io::stdin().read_to_string(&mut s).unwrap();\n"
        "    let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n"
        '    println!("{}", v[0] + v[1]);\n}\n',
        wrong="use std::io::Read;\nfn main() {\n    let mut s = String::new();\n"
        "    std::io::stdin().read_to_string(&mut s).unwrap();\n"
        "    let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n"
        '    println!("{}", v[0] - v[1]);\n}\n',
        broken="fn main() { let x = ; }\n",
        crash='fn main() { panic!("boom"); }\n',
        hog="fn main() {\n    let mut v: Vec<Vec<u8>> = Vec::new();\n    loop {\n        v.push(vec![1u8; 1 << 20]);\n    }\n}\n",
        spin="fn main() {\n    loop {\n        std::hint::spin_loop();\n    }\n}\n",
    ),
}
