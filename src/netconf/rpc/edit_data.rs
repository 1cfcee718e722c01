//! `<edit-data>` (RFC 8526 section 3.1.2): an edit of running, candidate or startup.

use yang2::data::DataFormat;

use super::get_data::datastore_identity;
use super::{config_text, locate, missing, one, Body, OpResult, SessionCtx};
use crate::datastore::{Datastore, EditOp, EditOptions, Source};
use crate::error::{ErrorTag, RpcError};
use crate::netconf::NS_NMDA;
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element, src: &str) -> OpResult {
    let target = datastore_identity(op)?;
    if !matches!(target, Datastore::Running | Datastore::Candidate | Datastore::Startup) {
        return Err(one(RpcError::protocol(ErrorTag::InvalidValue, "edit-data targets a configuration datastore")
            .with_bad_element("datastore")));
    }
    let default_operation = match op.child(NS_NMDA, "default-operation").map(|d| d.trimmed()) {
        None | Some("merge") => EditOp::Merge,
        Some("replace") => EditOp::Replace,
        Some("none") => EditOp::None,
        Some(other) => {
            return Err(one(RpcError::protocol(
                ErrorTag::InvalidValue,
                format!("invalid default-operation \"{other}\""),
            )
            .with_bad_element("default-operation")))
        }
    };
    if op.child(NS_NMDA, "url").is_some() {
        return Err(one(RpcError::protocol(ErrorTag::OperationNotSupported, "the :url capability is not supported")
            .with_bad_element("url")));
    }
    let config = op.child(NS_NMDA, "config").ok_or_else(|| missing("config", "edit-data"))?;
    let text = config_text(config, src)?;
    let ds = &ctx.server.datastores;
    if default_operation == EditOp::Replace {
        let tree = ds.parse_config(text.as_bytes(), DataFormat::XML).map_err(locate(config, src))?;
        ds.copy(ctx.id, Source::Config(&tree), target).map_err(one)?;
        return Ok(Body::Ok);
    }
    let edit = ds.parse_edit(text.as_bytes(), DataFormat::XML).map_err(locate(config, src))?;
    ds.edit_owned(ctx.id, target, edit, EditOptions { default_operation, ..Default::default() })?;
    Ok(Body::Ok)
}
