//! `<validate>` (RFC 6241 section 8.6, :validate:1.1): a datastore or inline `<config>`.

use yang2::data::DataFormat;

use super::{config_text, datastore_param, locate, one, Body, OpResult, SessionCtx};
use crate::datastore::Source;
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element, src: &str) -> OpResult {
    let ds = &ctx.server.datastores;
    match op.param("source").and_then(|s| s.param("config")) {
        Some(config) => {
            let tree =
                ds.parse_config(config_text(config, src)?.as_bytes(), DataFormat::XML).map_err(locate(config, src))?;
            ds.validate(Source::Config(&tree)).map_err(one)?;
        }
        None => {
            let source = datastore_param(op, "source")?;
            ds.validate(Source::Datastore(source)).map_err(one)?;
        }
    }
    Ok(Body::Ok)
}
