//! The agent's egress allow-list rules, for Python (`sandboxes.egress`): one parser for every
//! place that reads a rule (a template's validation, a cluster's network policy).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sandbox_egress::{Policy, Reach, NON_PUBLIC};

/// Each rule as (kind, target, port): kind `name` (target a host name), `wildcard` (target the
/// domain whose subdomains it holds) or `net` (target a network in CIDR form); port None for
/// every port. A bad rule raises ValueError with the agent's reason.
#[pyfunction]
pub fn egress_rules(rules: Vec<String>) -> PyResult<Vec<(&'static str, String, Option<u16>)>> {
    let policy = Policy::parse(&rules).map_err(PyValueError::new_err)?;
    Ok(policy
        .rules()
        .iter()
        .map(|r| match r.reach() {
            (Reach::Name { name, wildcard }, port) => {
                (if wildcard { "wildcard" } else { "name" }, name, port)
            }
            (Reach::Net { cidr }, port) => ("net", cidr, port),
        })
        .collect())
}

/// The networks a name may never lead to unless a rule names them, in CIDR form.
#[pyfunction]
pub fn non_public_networks() -> Vec<String> {
    NON_PUBLIC
        .iter()
        .map(|(net, prefix)| format!("{net}/{prefix}"))
        .collect()
}
