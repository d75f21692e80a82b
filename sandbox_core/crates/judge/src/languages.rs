//! The languages the judge knows: how to compile (once) and how to run a case.

use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    C,
    Cpp,
    Bash,
    Java,
    JavaScript,
    TypeScript,
    Go,
    Rust,
}

/// The Python check runner, `_judge(solution, check, token_file)`: runs the program, then the
/// check script, in one interpreter and one namespace (HumanEval style), then prints the case's
/// completion token. The token is read and its file deleted before the program runs, so a program
/// that ends early (`sys.exit`, `os._exit`, a signal) cannot print it: exiting 0 is not enough to
/// pass. The Python zygote has it compiled in its prelude (`PYTHON_ZYGOTE_PRELUDE`, called as the
/// case's `zygote_entry`); a spawned case runs `python_check_runner()`, this and its call.
pub const PYTHON_CHECK_JUDGE: &str = r#"import os
import sys


def _judge(solution, check, token_file, write=os.write):
    with open(token_file, "rb") as f:
        token = f.read().strip()
    os.unlink(token_file)
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    with open(solution, "rb") as f:
        exec(compile(f.read(), "solution.py", "exec"), ns)
    with open(check, "rb") as f:
        exec(compile(f.read(), "check.py", "exec"), ns)
    try:
        sys.stdout.flush()
    except Exception:
        pass
    write(1, b"\n" + token + b"\n")
"#;

/// The file `runner.py` a spawned Python check case runs: `PYTHON_CHECK_JUDGE` and its call.
pub fn python_check_runner() -> String {
    format!("{PYTHON_CHECK_JUDGE}\n\n_judge(*sys.argv[1:4])\n")
}

/// What the Python zygote runs before it serves: the check runner's function.
pub const PYTHON_ZYGOTE_PRELUDE: &str = PYTHON_CHECK_JUDGE;

/// The same for Bash: the token is held on fd 9 (its file deleted) while the program and the check
/// are sourced, and printed at the end.
const BASH_CHECK_RUNNER: &str = r#"exec 9<"$3" && rm -f "$3" || exit 120
set -e
source "$1"
source "$2"
read -r __token <&9
printf '\n%s\n' "$__token""#;

/// Every name a language is known by, on every surface (the judge, the API server's validation,
/// the HTTP-compatible APIs, the RL adapters read this table through `sandboxes.languages`).
const NAMES: [(&str, Language); 23] = [
    ("python", Language::Python),
    ("python3", Language::Python),
    ("py", Language::Python),
    ("c", Language::C),
    ("cpp", Language::Cpp),
    ("c++", Language::Cpp),
    ("cxx", Language::Cpp),
    ("cc", Language::Cpp),
    ("bash", Language::Bash),
    ("sh", Language::Bash),
    ("shell", Language::Bash),
    ("java", Language::Java),
    ("javascript", Language::JavaScript),
    ("js", Language::JavaScript),
    ("nodejs", Language::JavaScript),
    ("node", Language::JavaScript),
    ("typescript", Language::TypeScript),
    ("ts", Language::TypeScript),
    ("go", Language::Go),
    ("golang", Language::Go),
    ("rust", Language::Rust),
    ("rs", Language::Rust),
    ("rustc", Language::Rust),
];

/// TypeScript is transpiled (types stripped, syntax checked, no type check: what `ts-node
/// --transpile-only` and `tsx` do) by Debian's TypeScript compiler library, run by node
/// (argv: source, output). A syntax error is a compile error. `esModuleInterop`, as `tsc --init`
/// sets it: a default import of one of Node's CommonJS modules (`import assert from "assert"`)
/// is the module itself, not its missing `default` export.
const TYPESCRIPT_TRANSPILER: &str = r#"const ts = require("/usr/share/nodejs/typescript");
const fs = require("fs");
const [src, out] = process.argv.slice(1);
const r = ts.transpileModule(fs.readFileSync(src, "utf8"), {
  fileName: src,
  reportDiagnostics: true,
  compilerOptions: {
    target: ts.ScriptTarget.ES2020,
    module: ts.ModuleKind.CommonJS,
    esModuleInterop: true,
  },
});
const errors = r.diagnostics.filter((d) => d.category === ts.DiagnosticCategory.Error);
for (const d of errors) {
  const at = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : null;
  const where = at ? `${src}:${at.line + 1}:${at.character + 1}: ` : "";
  console.error(where + ts.flattenDiagnosticMessageText(d.messageText, "\n"));
}
if (errors.length) process.exit(1);
fs.writeFileSync(out, r.outputText);"#;

/// Go builds one file outside any module, with its caches in the build directory (made fresh
/// for each program, removed after), without cgo (argv: output, source).
const GO_BUILD: &str = r#"GOCACHE="$PWD/.gocache" GOPATH="$PWD/.gopath" HOME="$PWD" GO111MODULE=off CGO_ENABLED=0 exec /usr/bin/go build -o "$1" "$2""#;

/// What a compile step leaves in the build directory for the cases to run: one file, or a
/// directory tree (Java's classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Product {
    pub name: &'static str,
    pub tree: bool,
}

impl Language {
    pub fn parse(name: &str) -> Option<Language> {
        let name = name.to_ascii_lowercase();
        NAMES.iter().find(|(n, _)| *n == name).map(|(_, l)| *l)
    }

    /// Every name of this language, its canonical one first.
    pub fn aliases(self) -> Vec<&'static str> {
        NAMES
            .iter()
            .filter(|(_, l)| *l == self)
            .map(|(n, _)| *n)
            .collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::C => "c",
            Language::Cpp => "cpp",
            Language::Bash => "bash",
            Language::Java => "java",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Go => "go",
            Language::Rust => "rust",
        }
    }

    pub const ALL: [Language; 9] = [
        Language::Python,
        Language::C,
        Language::Cpp,
        Language::Bash,
        Language::Java,
        Language::JavaScript,
        Language::TypeScript,
        Language::Go,
        Language::Rust,
    ];

    /// The tools this language needs inside the sandbox.
    fn tools(self) -> &'static [&'static str] {
        match self {
            Language::Python => &["/usr/bin/python3"],
            Language::C => &["/usr/bin/gcc"],
            Language::Cpp => &["/usr/bin/g++"],
            Language::Bash => &["/bin/bash"],
            Language::Java => &["/usr/bin/javac", "/usr/bin/java"],
            Language::JavaScript => &["/usr/bin/node"],
            Language::TypeScript => &["/usr/bin/node", "/usr/share/nodejs/typescript/package.json"],
            Language::Go => &["/usr/bin/go"],
            Language::Rust => &["/usr/bin/rustc", "/usr/bin/cc"],
        }
    }

    /// The command that prints the language's version (Piston's runtimes).
    pub fn version_command(self) -> &'static [&'static str] {
        match self {
            Language::TypeScript => &["/usr/bin/tsc", "--version"],
            Language::Go => &["/usr/bin/go", "version"],
            Language::Python => &["/usr/bin/python3", "--version"],
            Language::C => &["/usr/bin/gcc", "--version"],
            Language::Cpp => &["/usr/bin/g++", "--version"],
            Language::Bash => &["/bin/bash", "--version"],
            Language::Java => &["/usr/bin/javac", "--version"],
            Language::JavaScript => &["/usr/bin/node", "--version"],
            Language::Rust => &["/usr/bin/rustc", "--version"],
        }
    }

    /// Languages whose tools exist here, for `Info.languages`.
    pub fn available() -> Vec<&'static str> {
        Language::ALL
            .iter()
            .filter(|l| l.tools().iter().all(|t| Path::new(t).exists()))
            .map(|l| l.name())
            .collect()
    }

    pub fn source_file(self) -> &'static str {
        match self {
            Language::Python => "solution.py",
            Language::C => "solution.c",
            Language::Cpp => "solution.cpp",
            Language::Bash => "solution.sh",
            Language::Java => "Main.java",
            Language::JavaScript => "solution.js",
            Language::TypeScript => "solution.ts",
            Language::Go => "solution.go",
            Language::Rust => "solution.rs",
        }
    }

    /// What the compile step leaves for the cases (None: nothing is compiled).
    pub fn product(self) -> Option<Product> {
        let file = |name| Some(Product { name, tree: false });
        match self {
            Language::C | Language::Cpp | Language::Go | Language::Rust => file("solution"),
            Language::TypeScript => file("solution.js"),
            Language::Java => Some(Product {
                name: "classes",
                tree: true,
            }),
            Language::Python | Language::Bash | Language::JavaScript => None,
        }
    }

    /// What the language's runtime prints on stderr when an allocation fails.
    pub fn out_of_memory_marker(self) -> Option<&'static str> {
        match self {
            Language::Python => Some("MemoryError"),
            Language::Java => Some("java.lang.OutOfMemoryError"),
            Language::JavaScript | Language::TypeScript => Some("JavaScript heap out of memory"),
            Language::Go => Some("runtime: out of memory"),
            Language::Rust => Some("memory allocation of "),
            Language::C | Language::Cpp | Language::Bash => None,
        }
    }

    pub fn supports_check(self) -> bool {
        matches!(self, Language::Python | Language::Bash)
    }

    /// The function of the Python zygote's prelude a check case calls when it runs as a fork of
    /// the zygote (see `sandbox_exec::Command::zygote_entry`).
    pub fn zygote_entry(self) -> Option<&'static str> {
        matches!(self, Language::Python).then_some("_judge")
    }

    /// The compile step, if any: reads `dir/<source>`, writes `product()` into `build`.
    pub fn compile(self, dir: &Path, build: &Path) -> Option<Vec<String>> {
        let src = dir.join(self.source_file()).display().to_string();
        let out = self
            .product()
            .map(|p| build.join(p.name).display().to_string())
            .unwrap_or_default();
        let v = |a: &[&str]| Some(a.iter().map(|s| s.to_string()).collect());
        match self {
            Language::C => v(&[
                "/usr/bin/gcc",
                "-O2",
                "-std=gnu17",
                "-pipe",
                "-o",
                &out,
                &src,
                "-lm",
            ]),
            Language::Cpp => v(&[
                "/usr/bin/g++",
                "-O2",
                "-std=gnu++17",
                "-pipe",
                "-o",
                &out,
                &src,
            ]),
            // The compiler's JVM starts as a short-lived one: serial GC, the quick JIT only.
            Language::Java => v(&[
                "/usr/bin/javac",
                "-J-XX:+UseSerialGC",
                "-J-XX:TieredStopAtLevel=1",
                "-encoding",
                "UTF-8",
                "-d",
                &out,
                &src,
            ]),
            Language::TypeScript => v(&["/usr/bin/node", "-e", TYPESCRIPT_TRANSPILER, &src, &out]),
            Language::Go => v(&["/bin/sh", "-c", GO_BUILD, "go-build", &out, &src]),
            Language::Rust => v(&[
                "/usr/bin/rustc",
                "-O",
                "--edition",
                "2021",
                "-o",
                &out,
                &src,
            ]),
            Language::Python | Language::Bash | Language::JavaScript => None,
        }
    }

    /// The command of one case. A case with a check script names it, and the file holding the
    /// token the runner prints once the check has run to its end.
    pub fn run(self, dir: &Path, check: Option<(&str, &Path)>) -> Vec<String> {
        let d = |f: &str| dir.join(f).display().to_string();
        match (self, check) {
            (Language::Python, None) => {
                vec!["/usr/bin/python3".into(), "-I".into(), d("solution.py")]
            }
            (Language::Python, Some((c, token))) => vec![
                "/usr/bin/python3".into(),
                "-I".into(),
                d("runner.py"),
                d("solution.py"),
                d(c),
                token.display().to_string(),
            ],
            (Language::Bash, None) => vec!["/bin/bash".into(), d("solution.sh")],
            (Language::Bash, Some((c, token))) => vec![
                "/bin/bash".into(),
                "-c".into(),
                BASH_CHECK_RUNNER.into(),
                "bash".into(),
                d("solution.sh"),
                d(c),
                token.display().to_string(),
            ],
            (Language::C | Language::Cpp | Language::Go | Language::Rust, _) => {
                vec![d("solution")]
            }
            // The heap may grow to most of the case's memory limit (the JVM reads it from the
            // cgroup); deep recursion gets the stack it gets in C. Assertions are enabled (`-ea`):
            // test harnesses written as `assert`s must fail when one does.
            (Language::Java, _) => vec![
                "/usr/bin/java".into(),
                "-ea".into(),
                "-XX:+UseSerialGC".into(),
                "-XX:MaxRAMPercentage=75".into(),
                "-Xss256m".into(),
                "-cp".into(),
                d("classes"),
                "Main".into(),
            ],
            (Language::JavaScript, _) => vec!["/usr/bin/node".into(), d("solution.js")],
            (Language::TypeScript, _) => vec!["/usr/bin/node".into(), d("solution.js")],
        }
    }
}
