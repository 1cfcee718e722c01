//! `<copy-config>` (RFC 6241 section 7.3): from a datastore or inline `<config>`.

use yang2::data::DataFormat;

use super::{config_text, datastore_param, locate, one, Body, OpResult, SessionCtx};
use crate::datastore::Source;
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element, src: &str) -> OpResult {
    let target = datastore_param(op, "target")?;
    let ds = &ctx.server.datastores;
    let inline = op.param("source").and_then(|s| s.param("config"));
    match inline {
        Some(config) => {
            let tree =
                ds.parse_config(config_text(config, src)?.as_bytes(), DataFormat::XML).map_err(locate(config, src))?;
            ds.copy(ctx.id, Source::Config(&tree), target).map_err(one)?;
        }
        None => {
            let source = datastore_param(op, "source")?;
            ds.copy(ctx.id, Source::Datastore(source), target).map_err(one)?;
        }
    }
    Ok(Body::Ok)
}
