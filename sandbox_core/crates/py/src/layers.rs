//! `_native.pack_layer`, `squash_layers` and `apply_layer`: the `sandbox-layer` crate's
//! conversions, for the state stores (a layer as an OCI blob, layers merged) and the image cache
//! (an image's layers applied onto its root). Each runs with the GIL released.

use std::collections::HashMap;
use std::io::{self, BufReader, Read};
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sandbox_exec::Step;

use crate::errors::{from_io, launch_err};

/// Bytes read from the Python file at a time (each read takes the GIL once).
const READ_SIZE: usize = 1 << 20;

/// The layer directory `layer` written to `dest` as a gzipped OCI layer tar: the contents of each
/// directory of `relocate` (relative to the layer's top) moved to its value, and with `under` the
/// whole layer below that directory. Returns (digest of the gzip, diff_id of the tar, both
/// `sha256:<hex>`; size of the gzip).
#[pyfunction]
#[pyo3(signature = (layer, dest, relocate=HashMap::new(), under=String::new()))]
pub fn pack_layer(
    py: Python<'_>,
    layer: PathBuf,
    dest: PathBuf,
    relocate: HashMap<String, String>,
    under: String,
) -> PyResult<(String, String, u64)> {
    let placement = sandbox_layer::Placement {
        relocate: relocate
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
        under: under.into(),
    };
    let packed = py
        .detach(|| sandbox_layer::pack(&layer, &dest, &placement))
        .map_err(|e| from_io(&format!("writing the layer {}", layer.display()), e))?;
    Ok((packed.digest, packed.diff_id, packed.size))
}

/// The layer directories `layers` (bottom first) merged into the empty directory `dest`.
#[pyfunction]
pub fn squash_layers(py: Python<'_>, layers: Vec<PathBuf>, dest: PathBuf) -> PyResult<()> {
    py.detach(|| sandbox_layer::squash(&layers, &dest))
        .map_err(|e| from_io(&format!("merging layers into {}", dest.display()), e))
}

/// The layer tar that the binary file `src` holds (uncompressed; read from its start, twice)
/// applied onto the root file system at `dest`. Fails at the step `image`.
#[pyfunction]
pub fn apply_layer(py: Python<'_>, src: Py<PyAny>, dest: PathBuf) -> PyResult<()> {
    let open = || {
        let file = Python::attach(|py| -> PyResult<Py<PyAny>> {
            src.bind(py).call_method1("seek", (0,))?;
            Ok(src.clone_ref(py))
        })
        .map_err(reading)?;
        Ok(BufReader::with_capacity(READ_SIZE, PyFile(file)))
    };
    py.detach(|| sandbox_layer::apply(open, &dest))
        .map_err(|e| launch_err(Step::Image, e.to_string()))
}

/// A Python binary file read from Rust (the GIL taken for each read).
struct PyFile(Py<PyAny>);

impl Read for PyFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Python::attach(|py| {
            let data = self
                .0
                .bind(py)
                .call_method1("read", (buf.len(),))
                .map_err(reading)?;
            let data = data
                .cast::<PyBytes>()
                .map_err(|_| io::Error::other("the layer's read() gave no bytes"))?
                .as_bytes();
            if data.len() > buf.len() {
                return Err(io::Error::other("the layer's read() gave more than asked"));
            }
            buf[..data.len()].copy_from_slice(data);
            Ok(data.len())
        })
    }
}

fn reading(e: PyErr) -> io::Error {
    io::Error::other(format!("reading the layer: {e}"))
}
