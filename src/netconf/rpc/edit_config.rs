//! `<edit-config>` (RFC 6241 section 7.2): operations, default-operation, test-option and
//! error-option, applied by the datastore layer.

use yang2::data::DataFormat;

use super::{config_text, datastore_param, locate, missing, one, Body, OpResult, SessionCtx};
use crate::datastore::{Datastore, EditOp, EditOptions, ErrorOption, Source, TestOption};
use crate::error::{ErrorTag, RpcError};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element, src: &str) -> OpResult {
    let target = datastore_param(op, "target")?;
    if target == Datastore::Startup {
        return Err(one(RpcError::protocol(
            ErrorTag::InvalidValue,
            "edit-config cannot target startup; use copy-config",
        )
        .with_bad_element("startup")));
    }
    let mut opts = EditOptions::default();
    if let Some(d) = op.param("default-operation") {
        opts.default_operation = match d.trimmed() {
            "merge" => EditOp::Merge,
            "replace" => EditOp::Replace,
            "none" => EditOp::None,
            other => return Err(bad_value("default-operation", other)),
        };
    }
    if let Some(t) = op.param("test-option") {
        opts.test_option = match t.trimmed() {
            "test-then-set" => TestOption::TestThenSet,
            "set" => TestOption::Set,
            "test-only" => TestOption::TestOnly,
            other => return Err(bad_value("test-option", other)),
        };
    }
    if let Some(e) = op.param("error-option") {
        opts.error_option = match e.trimmed() {
            "stop-on-error" => ErrorOption::StopOnError,
            "continue-on-error" => ErrorOption::ContinueOnError,
            "rollback-on-error" => ErrorOption::RollbackOnError,
            other => return Err(bad_value("error-option", other)),
        };
    }
    if op.param("url").is_some() {
        return Err(one(RpcError::protocol(ErrorTag::OperationNotSupported, "the :url capability is not supported")
            .with_bad_element("url")));
    }
    let config = op.param("config").ok_or_else(|| missing("config", "edit-config"))?;
    let text = config_text(config, src)?;
    let ds = &ctx.server.datastores;
    if opts.default_operation == EditOp::Replace {
        // RFC 6241 7.2: with default-operation replace, <config> replaces the whole target.
        let tree = ds.parse_config(text.as_bytes(), DataFormat::XML).map_err(locate(config, src))?;
        if opts.test_option == TestOption::TestOnly {
            ds.validate(Source::Config(&tree)).map_err(one)?;
        } else {
            ds.copy(ctx.id, Source::Config(&tree), target).map_err(one)?;
        }
        return Ok(Body::Ok);
    }
    let edit = ds.parse_edit(text.as_bytes(), DataFormat::XML).map_err(locate(config, src))?;
    ds.edit_owned(ctx.id, target, edit, opts)?;
    Ok(Body::Ok)
}

fn bad_value(param: &str, value: &str) -> Vec<RpcError> {
    one(RpcError::protocol(ErrorTag::InvalidValue, format!("invalid {param} \"{value}\"")).with_bad_element(param))
}
