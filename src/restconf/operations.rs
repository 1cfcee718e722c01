//! `{+restconf}/operations` (RFC 8040 sections 3.3.2 and 4.4.2): the list of operations,
//! and POST to invoke one. The agent's own RPCs (resync, clear-quarantine, probe-sci,
//! report-sci-failure, local-steering) go to the same handler NETCONF uses, after the same
//! NACM exec check; RFC 8650's establish/modify/delete/kill-subscription go to
//! `subscriptions.rs`.

use hyper::Method;

use super::error::{Failure, NS_RESTCONF};
use super::media::{BodyKind, Encoding};
use super::{get_reply, no_content, reply, Caller, Reply, Req, Restconf};
use crate::error::{ErrorTag, RpcError};

/// The RPCs RESTCONF serves: those of the agent's own modules. NETCONF protocol operations
/// (ietf-netconf, ietf-netconf-nmda, …) have RESTCONF methods instead (RFC 8040 section 1.3).
fn operations() -> Vec<(String, String, String)> {
    let ctx = crate::yang::context();
    let ours: Vec<&str> = crate::yang::sources().filter(|m| m.ours).map(|m| m.name).collect();
    let mut out = Vec::new();
    for m in ctx.modules(true) {
        if !m.is_implemented() || !ours.contains(&m.name()) {
            continue;
        }
        for r in m.rpcs() {
            out.push((m.name().to_owned(), r.name().to_owned(), m.namespace().to_owned()));
        }
    }
    // RFC 8650's dynamic subscription operations.
    for name in [super::subscriptions::MODULE, super::subscriptions::YANG_PUSH] {
        let Some(m) = ctx.get_module_implemented(name) else { continue };
        for r in m.rpcs() {
            if super::subscriptions::is_operation(m.name(), r.name()) {
                out.push((m.name().to_owned(), r.name().to_owned(), m.namespace().to_owned()));
            }
        }
    }
    out
}

pub async fn handle(rc: &std::sync::Arc<Restconf>, caller: &Caller, req: &Req, tail: &str) -> Result<Reply, Failure> {
    let tail = tail.strip_suffix('/').unwrap_or(tail);
    if tail.is_empty() {
        if !matches!(req.method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return Err(Failure::method(
                "GET, HEAD, OPTIONS",
                "the operations resource is read-only; POST to /restconf/operations/<module:rpc>",
            ));
        }
        let ops = operations();
        let body = match req.accept {
            Encoding::Json => {
                let members: Vec<String> = ops.iter().map(|(m, r, _)| format!("\"{m}:{r}\":[null]")).collect();
                format!("{{\"ietf-restconf:operations\":{{{}}}}}", members.join(","))
            }
            Encoding::Xml => {
                let members: String = ops.iter().map(|(_, r, ns)| format!("<{r} xmlns=\"{ns}\"/>")).collect();
                format!("<operations xmlns=\"{NS_RESTCONF}\">{members}</operations>")
            }
        };
        return Ok(get_reply(req, req.accept, body));
    }
    let name = super::path::percent_decode(tail)?;
    let Some((module, rpc)) = name.split_once(':') else {
        return Err(Failure::bad(ErrorTag::InvalidValue, format!("\"{name}\": an operation is named module:rpc")));
    };
    let subscription_op = super::subscriptions::is_operation(module, rpc);
    if !operations().iter().any(|(m, r, _)| m == module && r == rpc) {
        return Err(Failure::not_found(format!("{name} is not an operation of this server")));
    }
    if req.method == Method::OPTIONS {
        let mut r = no_content(200);
        r.headers_mut().insert("allow", hyper::header::HeaderValue::from_static("POST, OPTIONS"));
        return Ok(r);
    }
    if req.method != Method::POST {
        return Err(Failure::method("POST, OPTIONS", format!("{name} is invoked with POST")));
    }
    if let Some((k, _)) = req.query.first() {
        return Err(Failure::bad(
            ErrorTag::InvalidValue,
            format!("query parameter \"{k}\" does not apply to operations"),
        ));
    }
    // RFC 8341 3.4.4: exec access first.
    if !rc.core.nacm.may_exec(&caller.user, module, rpc) {
        return Err(
            RpcError::protocol(ErrorTag::AccessDenied, format!("user {} may not invoke {name}", caller.user)).into()
        );
    }
    let enc = if req.body.iter().all(|b| b.is_ascii_whitespace()) {
        req.accept
    } else {
        match super::media::content_type(req.header("content-type"))? {
            BodyKind::Data(e) => e,
            BodyKind::Patch(_) => {
                return Err(Failure::status(415, ErrorTag::InvalidValue, "operations take yang-data bodies"))
            }
        }
    };
    if !req.body.iter().all(|b| b.is_ascii_whitespace()) {
        super::data::check_syntax(&req.body, enc)?;
    }
    let input = super::yangdata::parse_rpc(module, rpc, &req.body, enc.format()).map_err(|mut e| {
        if e.tag == ErrorTag::OperationFailed {
            e.tag = ErrorTag::InvalidValue;
        }
        if subscription_op {
            e = super::subscriptions::input_error(e);
        }
        Failure::from(e)
    })?;
    if subscription_op {
        return super::subscriptions::operation(rc, caller, req, rpc, &input);
    }
    let handler = rc.core.app_rpc(module);
    let Some(handler) = handler else {
        return Err(RpcError::protocol(ErrorTag::OperationNotSupported, format!("{name} is not available yet")).into());
    };
    let (m, r) = (module.to_owned(), rpc.to_owned());
    let result = tokio::task::block_in_place(|| handler.call(&m, &r, &input));
    let tag = result.as_ref().err().map(|e| e.tag.as_str());
    crate::mgmt::audit::operation("restconf", &caller.user, caller.session, &name, tag);
    let output = result?;
    if output.is_empty() {
        return Ok(no_content(204));
    }
    let body = super::yangdata::rpc_output(module, rpc, &output, req.accept == Encoding::Json)?;
    Ok(reply(200, req.accept, body))
}
