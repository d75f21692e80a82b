//! The languages the judge knows: how to compile (once) and how to run a case.

use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    C,
    Cpp,
    Bash,
}

/// Runs the program, then the check script, in one interpreter and one namespace (HumanEval
/// style), then prints the case's completion token (argv: solution, check, token file). The token
/// is read and its file deleted before the program runs, so a program that ends early (`sys.exit`,
/// `os._exit`, a signal) cannot print it: exiting 0 is not enough to pass.
pub const PYTHON_CHECK_RUNNER: &str = r#"import os
import sys


def _judge(solution, check, token_file, write=os.write):
    with open(token_file, "rb") as f:
        token = f.read().strip()
    os.unlink(token_file)
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    with open(solution) as f:
        exec(compile(f.read(), "solution.py", "exec"), ns)
    with open(check) as f:
        exec(compile(f.read(), "check.py", "exec"), ns)
    try:
        sys.stdout.flush()
    except Exception:
        pass
    write(1, b"\n" + token + b"\n")


_judge(*sys.argv[1:4])
"#;

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
const NAMES: [(&str, Language); 11] = [
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
];

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
        }
    }

    pub const ALL: [Language; 4] = [Language::Python, Language::C, Language::Cpp, Language::Bash];

    /// The tool this language needs inside the sandbox.
    fn tool(self) -> &'static str {
        match self {
            Language::Python => "/usr/bin/python3",
            Language::C => "/usr/bin/gcc",
            Language::Cpp => "/usr/bin/g++",
            Language::Bash => "/bin/bash",
        }
    }

    /// Languages whose tools exist here, for `Info.languages`.
    pub fn available() -> Vec<&'static str> {
        Language::ALL
            .iter()
            .filter(|l| Path::new(l.tool()).exists())
            .map(|l| l.name())
            .collect()
    }

    pub fn source_file(self) -> &'static str {
        match self {
            Language::Python => "solution.py",
            Language::C => "solution.c",
            Language::Cpp => "solution.cpp",
            Language::Bash => "solution.sh",
        }
    }

    pub fn supports_check(self) -> bool {
        matches!(self, Language::Python | Language::Bash)
    }

    /// The compile step, if any: reads `dir/<source>`, writes the binary to `out`.
    pub fn compile(self, dir: &Path, out: &Path) -> Option<Vec<String>> {
        let src = dir.join(self.source_file()).display().to_string();
        let out = out.display().to_string();
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
            Language::Python | Language::Bash => None,
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
            (Language::C | Language::Cpp, _) => vec![d("solution")],
        }
    }
}
