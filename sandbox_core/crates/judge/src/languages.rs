//! The languages the judge knows: how to compile (once) and how to run a case.

use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    C,
    Cpp,
    Bash,
}

/// Runs the program, then the check script, in one interpreter and one namespace (HumanEval style).
pub const PYTHON_CHECK_RUNNER: &str = r#"import sys
ns = {"__name__": "__main__", "__builtins__": __builtins__}
with open(sys.argv[1]) as f:
    exec(compile(f.read(), "solution.py", "exec"), ns)
with open(sys.argv[2]) as f:
    exec(compile(f.read(), "check.py", "exec"), ns)
"#;

impl Language {
    pub fn parse(name: &str) -> Option<Language> {
        match name.to_ascii_lowercase().as_str() {
            "python" | "python3" | "py" => Some(Language::Python),
            "c" => Some(Language::C),
            "cpp" | "c++" | "cxx" => Some(Language::Cpp),
            "bash" | "sh" | "shell" => Some(Language::Bash),
            _ => None,
        }
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

    /// The command of one case; `check` names the check script, when the case has one.
    pub fn run(self, dir: &Path, check: Option<&str>) -> Vec<String> {
        let d = |f: &str| dir.join(f).display().to_string();
        match (self, check) {
            (Language::Python, None) => {
                vec!["/usr/bin/python3".into(), "-I".into(), d("solution.py")]
            }
            (Language::Python, Some(c)) => vec![
                "/usr/bin/python3".into(),
                "-I".into(),
                d("runner.py"),
                d("solution.py"),
                d(c),
            ],
            (Language::Bash, None) => vec!["/bin/bash".into(), d("solution.sh")],
            (Language::Bash, Some(c)) => vec![
                "/bin/bash".into(),
                "-c".into(),
                "set -e; source \"$1\"; source \"$2\"".into(),
                "bash".into(),
                d("solution.sh"),
                d(c),
            ],
            (Language::C | Language::Cpp, _) => vec![d("solution")],
        }
    }
}
