//! The judge's language table, for Python (`sandboxes.languages`): one source for every surface.

use std::path::Path;

use pyo3::prelude::*;
use sandbox_judge::Language;

/// One language: (name, aliases with the name first, source file, compile argv or None, run
/// argv), with paths relative to the directory the program is in (the compile step writes its
/// product there), whether cases may carry a check script, and the command that prints the
/// language's version.
type Row = (
    &'static str,
    Vec<&'static str>,
    &'static str,
    Option<Vec<String>>,
    Vec<String>,
    bool,
    Vec<&'static str>,
);

#[pyfunction]
pub fn languages() -> Vec<Row> {
    let here = Path::new(".");
    Language::ALL
        .iter()
        .map(|&l| {
            (
                l.name(),
                l.aliases(),
                l.source_file(),
                l.compile(here, here),
                l.run(here, None),
                l.supports_check(),
                l.version_command().to_vec(),
            )
        })
        .collect()
}
