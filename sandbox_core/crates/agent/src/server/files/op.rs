//! FileOp: the verbs of `pb::FileOpRequest`, each its own module; this file only dispatches.

use std::sync::atomic::AtomicBool;

use pb::file_op_request::Op;
use sandbox_proto as pb;

use super::{find, make_dir, moving, permissions, search, stat};
use crate::error::AgentError;
use crate::paths::Roots;
use crate::server::accounts::Accounts;

pub fn file_op(
    roots: &Roots,
    accounts: &Accounts,
    req: pb::FileOpRequest,
    cancel: &AtomicBool,
) -> Result<pb::FileOpResponse, AgentError> {
    let Some(op) = req.op else {
        return Err(AgentError::Invalid(
            "a file operation names its verb".into(),
        ));
    };
    let mut out = pb::FileOpResponse::default();
    let entry = |path: &str| -> Result<pb::DirEntry, AgentError> {
        stat::stat(roots, &accounts.ids(), path)
    };
    match op {
        Op::Stat(o) => out.entries.push(entry(&o.path)?),
        Op::MakeDir(o) => {
            make_dir::make_dir(roots, accounts.owner(&o.user)?, &o)?;
            out.entries.push(entry(&o.path)?);
        }
        Op::Move(o) => {
            let moved = moving::move_entry(roots, accounts.owner(&o.user)?, &o)?;
            out.entries.push(entry(&moved)?);
        }
        Op::SetPermissions(o) => {
            permissions::set_permissions(roots, accounts, &o)?;
            out.entries.push(entry(&o.path)?);
        }
        Op::Find(o) => out.paths = find::find(roots, &o.path, &o.pattern, cancel)?,
        Op::Search(o) => out.matches = search::search(roots, &o.path, &o.text, cancel)?,
    }
    Ok(out)
}
