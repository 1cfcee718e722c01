//! `<get-schema>` (RFC 6022 section 3.1): the YANG text of a module the server implements.

use super::{missing, one, Body, OpResult, SessionCtx};
use crate::error::{ErrorTag, RpcError};
use crate::netconf::NS_MONITORING;
use crate::xml::{escape_text, Element};

pub fn run(_ctx: &SessionCtx, op: &Element) -> OpResult {
    let id = op.child(NS_MONITORING, "identifier").ok_or_else(|| missing("identifier", "get-schema"))?.trimmed();
    let version = op.child(NS_MONITORING, "version").map(|v| v.trimmed()).filter(|v| !v.is_empty());
    let format = op.child(NS_MONITORING, "format").map(|f| f.trimmed()).unwrap_or("yang");
    if !matches!(format.rsplit(':').next(), Some("yang")) {
        return Err(one(RpcError::protocol(
            ErrorTag::InvalidValue,
            format!("schema format \"{format}\" is not available; only yang"),
        )
        .with_bad_element("format")));
    }
    let ctx = crate::yang::context();
    let loaded = ctx.get_module_latest(id).map(|m| m.revision().map(str::to_owned));
    let source = match (loaded, version) {
        (Some(rev), Some(v)) if rev.as_deref() != Some(v) => None,
        (Some(_), v) => crate::yang::module_source(id, v).or_else(|| crate::yang::module_source(id, None)),
        (None, _) => None,
    };
    let Some(source) = source else {
        // RFC 6022 3.1: unknown schema → invalid-value.
        return Err(one(RpcError::protocol(
            ErrorTag::InvalidValue,
            format!("no schema \"{id}\"{}", version.map(|v| format!(" revision {v}")).unwrap_or_default()),
        )
        .with_bad_element("identifier")));
    };
    Ok(Body::Data(format!("<data xmlns=\"{NS_MONITORING}\">{}</data>", escape_text(source.text))))
}
