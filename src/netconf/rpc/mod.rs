//! The `<rpc>` envelope (RFC 6241 section 4.1) and dispatch to one handler per operation.

mod cancel_commit;
mod close_session;
mod commit;
mod copy_config;
mod create_subscription;
mod delete_config;
mod delete_subscription;
mod discard_changes;
mod edit_config;
mod edit_data;
mod establish_subscription;
mod get;
mod get_config;
mod get_data;
mod get_schema;
mod kill_session;
mod lock;
mod modify_subscription;
mod resync_subscription;
mod unlock;
mod validate;

use crate::yang::PrintText as _;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use yang2::data::{DataPrinterFlags, DataTree};

use super::{NS_BASE, NS_MONITORING, NS_NMDA, NS_WITH_DEFAULTS};
use crate::datastore::{Datastore, SessionId};
use crate::error::{ErrorTag, ErrorType, RpcError};
use crate::mgmt::error::reply_errors;
use crate::mgmt::error::too_big;
use crate::mgmt::filter::{Filter, Readable};
use crate::mgmt::with_defaults::{fix_default_attribute_ns, WithDefaults};
use crate::mgmt::{Core, SessionInfo};
use crate::xml::{self, escape_attr, Element};

/// One session as the operation handlers see it.
pub struct SessionCtx {
    pub id: SessionId,
    pub server: Arc<Core>,
    pub info: Arc<SessionInfo>,
    /// base:1.1 negotiated (malformed-message may be sent).
    pub base11: bool,
    /// A create-subscription accepted by the last request, for the session to start once
    /// the reply is queued.
    new_subscription: std::sync::Mutex<Option<crate::mgmt::events::SubscriptionSpec>>,
    /// RFC 5277 allows one subscription per session.
    subscribed: std::sync::atomic::AtomicBool,
    /// The session's writer queue, for YANG-Push subscriptions (RFC 8639/8641).
    outbox: std::sync::OnceLock<tokio::sync::mpsc::Sender<String>>,
    /// What to do once the reply of the current request is queued (start a subscription,
    /// send subscription-modified), so notifications follow the reply.
    after_reply: std::sync::Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

impl SessionCtx {
    pub fn new(id: SessionId, server: Arc<Core>, info: Arc<SessionInfo>, base11: bool) -> Self {
        SessionCtx {
            id,
            server,
            info,
            base11,
            new_subscription: std::sync::Mutex::new(None),
            subscribed: std::sync::atomic::AtomicBool::new(false),
            outbox: std::sync::OnceLock::new(),
            after_reply: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Connects the session's writer queue (done once by the session).
    pub fn set_outbox(&self, tx: tokio::sync::mpsc::Sender<String>) {
        let _ = self.outbox.set(tx);
    }

    pub fn outbox(&self) -> Option<tokio::sync::mpsc::Sender<String>> {
        self.outbox.get().cloned()
    }

    pub fn after_reply(&self, f: Box<dyn FnOnce() + Send>) {
        self.after_reply.lock().unwrap_or_else(|e| e.into_inner()).push(f);
    }

    /// Runs what the last request left for after its reply.
    pub fn replied(&self) {
        let actions = std::mem::take(&mut *self.after_reply.lock().unwrap_or_else(|e| e.into_inner()));
        for f in actions {
            f();
        }
    }

    pub fn take_subscription(&self) -> Option<crate::mgmt::events::SubscriptionSpec> {
        self.new_subscription.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// What an operation produced.
pub enum Body {
    Ok,
    /// Reply content (e.g. `<data>…</data>`).
    Data(String),
}

/// What the session does after replying.
#[derive(Debug, PartialEq, Eq)]
pub enum After {
    Continue,
    Close,
}

pub type OpResult = Result<Body, Vec<RpcError>>;

/// Handles one received message and returns the complete `<rpc-reply>`.
pub fn handle(ctx: &SessionCtx, src: &str) -> (String, After) {
    handle_on(ctx, src, false)
}

/// Like [`handle`], called on a runtime worker (`inline`, see `netconf/inline.rs`): once the
/// message is parsed, an operation that is not one of `inline::INLINE_OPS` in the base
/// namespace still runs on a blocking thread, whatever the cheap scan before the parse took
/// it for (an attribute value holding `>` can make the scan see another operation).
pub fn handle_on(ctx: &SessionCtx, src: &str, inline: bool) -> (String, After) {
    let stats = &ctx.server.stats;
    stats.in_rpcs.fetch_add(1, Ordering::Relaxed);
    ctx.info.in_rpcs.fetch_add(1, Ordering::Relaxed);
    let bad = |errors: Vec<RpcError>, attrs: &str| {
        stats.in_bad_rpcs.fetch_add(1, Ordering::Relaxed);
        let tag = errors.first().map_or("ok", |e| e.tag.as_str());
        ctx.server.metrics.count_rpc("netconf", "none", tag);
        ctx.info.in_bad_rpcs.fetch_add(1, Ordering::Relaxed);
        (errors_reply(ctx, attrs, &errors), After::Continue)
    };
    let root = match xml::parse_rpc(src, crate::config::message_limits::get()) {
        Ok(r) => r,
        Err(e) => {
            refused_input(ctx, &e);
            // RFC 6241 Appendix A: malformed-message is base:1.1 only.
            let tag = if ctx.base11 { ErrorTag::MalformedMessage } else { ErrorTag::OperationFailed };
            return bad(vec![RpcError::new(tag, ErrorType::Rpc, format!("the message cannot be parsed: {e}"))], "");
        }
    };
    if !root.is(NS_BASE, "rpc") {
        let e = if root.ns.as_deref() != Some(NS_BASE) {
            RpcError::new(ErrorTag::UnknownNamespace, ErrorType::Rpc, "a NETCONF message must be in the base namespace")
                .with_bad_element(root.name.clone())
        } else {
            RpcError::new(ErrorTag::UnknownElement, ErrorType::Rpc, format!("expected <rpc>, got <{}>", root.name))
                .with_bad_element(root.name.clone())
        };
        if let Some(ns) = root.ns.as_deref().filter(|ns| *ns != NS_BASE).map(str::to_owned) {
            let mut e = e;
            e.bad_namespace = Some(ns);
            return bad(vec![e], "");
        }
        return bad(vec![e], "");
    }
    let attrs = echo_attributes(&root);
    if root.attr("message-id").is_none() {
        // RFC 6241 4.1: a missing message-id is answered with missing-attribute.
        return bad(
            vec![RpcError::new(ErrorTag::MissingAttribute, ErrorType::Rpc, "the <rpc> element has no message-id")
                .with_bad_attribute("message-id")
                .with_bad_element("rpc")],
            &attrs,
        );
    }
    let op = match root.children.as_slice() {
        [op] => op,
        [] => {
            return bad(
                vec![RpcError::new(ErrorTag::MissingElement, ErrorType::Rpc, "the <rpc> element holds no operation")
                    .with_bad_element("rpc")],
                &attrs,
            )
        }
        [_, second, ..] => {
            return bad(
                vec![RpcError::new(
                    ErrorTag::UnknownElement,
                    ErrorType::Rpc,
                    "the <rpc> element holds more than one operation",
                )
                .with_bad_element(second.name.clone())],
                &attrs,
            )
        }
    };
    let result = match exec_allowed(ctx, op) {
        // A <get> runs inline or not by what its filter selects, worked out once.
        Ok(()) if op.is(NS_BASE, "get") => match get::Request::parse(op) {
            Ok(req) if inline && !req.waits_for_no_task() => tokio::task::block_in_place(|| get::run_request(ctx, req)),
            Ok(req) => get::run_request(ctx, req),
            Err(e) => Err(e),
        },
        Ok(()) if inline && !runs_inline(op) => tokio::task::block_in_place(|| dispatch(ctx, op, src)),
        Ok(()) => dispatch(ctx, op, src),
        Err(e) => Err(vec![e]),
    };
    let first_tag = result.as_ref().err().and_then(|e| e.first()).map(|e| e.tag);
    let tag = first_tag.map(ErrorTag::as_str);
    let base = op.ns.as_deref() == Some(NS_BASE);
    // The metrics label: the operation's name when it is one this server has (an unknown
    // name is the client's to choose, and would be a series of its own).
    let unknown = matches!(
        first_tag,
        Some(ErrorTag::UnknownElement | ErrorTag::UnknownNamespace | ErrorTag::OperationNotSupported)
    );
    let label = if unknown {
        std::borrow::Cow::Borrowed("unknown")
    } else if base {
        std::borrow::Cow::Borrowed(op.name.as_str())
    } else {
        std::borrow::Cow::Owned(qualified(op))
    };
    ctx.server.metrics.count_rpc("netconf", &label, tag.unwrap_or("ok"));
    if changes_state(op) {
        let name = if base { op.name.clone() } else { qualified(op) };
        crate::mgmt::audit::operation("netconf", &ctx.info.username, ctx.id, &name, tag);
    }
    let after = if op.is(NS_BASE, "close-session") && result.is_ok() { After::Close } else { After::Continue };
    match result {
        Ok(Body::Ok) => (format!("<rpc-reply xmlns=\"{NS_BASE}\"{attrs}><ok/></rpc-reply>"), after),
        Ok(Body::Data(d)) => (format!("<rpc-reply xmlns=\"{NS_BASE}\"{attrs}>{d}</rpc-reply>"), after),
        Err(errors) => (errors_reply(ctx, &attrs, &errors), after),
    }
}

/// A message that is not well-formed or over a message limit, in the audit trail: one
/// record per session and window however many follow (a flood is one line and a count).
fn refused_input(ctx: &SessionCtx, e: &xml::XmlError) {
    let mut ev = crate::mgmt::audit::event(crate::mgmt::audit::Category::InputRefused)
        .outcome("failure")
        .user(&ctx.info.username)
        .session(ctx.id)
        .transport("ssh")
        .field("reason", e.0.as_str());
    if let Some(src) = ctx.info.source {
        ev = ev.source(src);
    }
    ev.emit_aggregated(format!("netconf-input:{}", ctx.id));
}

fn errors_reply(ctx: &SessionCtx, attrs: &str, errors: &[RpcError]) -> String {
    ctx.server.stats.out_rpc_errors.fetch_add(1, Ordering::Relaxed);
    ctx.info.out_rpc_errors.fetch_add(1, Ordering::Relaxed);
    reply_errors(attrs, errors)
}

/// Operations that change the datastores, the sessions or what the engine believes, and so
/// go into the audit trail (reads and subscriptions do not).
fn changes_state(op: &Element) -> bool {
    match op.ns.as_deref() {
        Some(NS_BASE) => matches!(
            op.name.as_str(),
            "edit-config"
                | "copy-config"
                | "delete-config"
                | "lock"
                | "unlock"
                | "kill-session"
                | "commit"
                | "cancel-commit"
                | "discard-changes"
        ),
        Some(NS_NMDA) => op.name == "edit-data",
        Some(crate::push::NS_SN) => op.name == "kill-subscription",
        Some(ns) => ns.starts_with("urn:cats-sma:"),
        None => false,
    }
}

/// `module:name` of an operation outside the base namespace.
fn qualified(op: &Element) -> String {
    let ns = op.ns.as_deref().unwrap_or("");
    match crate::yang::context().get_module_latest_ns(ns) {
        Some(m) => format!("{}:{}", m.name(), op.name),
        None => op.name.clone(),
    }
}

/// NACM exec check (RFC 8341 section 3.4.4) before any operation runs.
fn exec_allowed(ctx: &SessionCtx, op: &Element) -> Result<(), RpcError> {
    let ns = op.ns.as_deref().unwrap_or("");
    let module = match ns {
        NS_BASE => "ietf-netconf".to_owned(),
        crate::mgmt::events::NS_NOTIFICATION => "notifications".to_owned(),
        _ => match crate::yang::context().get_module_latest_ns(ns) {
            Some(m) => m.name().to_owned(),
            // Unknown namespaces are reported by dispatch.
            None => return Ok(()),
        },
    };
    if ctx.server.nacm.may_exec(&ctx.info.username, &module, &op.name) {
        Ok(())
    } else {
        Err(RpcError::protocol(
            ErrorTag::AccessDenied,
            format!("user {} may not invoke {module}:{}", ctx.info.username, op.name),
        )
        .with_bad_element(op.name.clone()))
    }
}

/// What the session's user may read of a datastore (RFC 8341 3.4.5): the only input the
/// filters of get, get-config and get-data see.
pub(crate) fn readable(ctx: &SessionCtx, ds: crate::datastore::Datastore) -> Result<Readable, Vec<RpcError>> {
    ctx.server.nacm.read(&ctx.server.datastores, &ctx.info.username, ds, None).map_err(one)
}

/// Whether a parsed operation may run on a runtime worker (see `netconf/inline.rs`).
fn runs_inline(op: &Element) -> bool {
    if op.ns.as_deref() != Some(NS_BASE) {
        return false;
    }
    let name = op.name.as_str();
    // `handle_on` decides a `get` (inline::SELECTIVE_OPS) on the request it parses once;
    // the same test here.
    super::inline::INLINE_OPS.contains(&name)
        || (name == "get" && get::Request::parse(op).is_ok_and(|r| r.waits_for_no_task()))
}

fn dispatch(ctx: &SessionCtx, op: &Element, src: &str) -> OpResult {
    let ns = op.ns.as_deref().unwrap_or("");
    match (ns, op.name.as_str()) {
        (NS_BASE, "get") => get::run(ctx, op),
        (NS_BASE, "get-config") => get_config::run(ctx, op),
        (NS_BASE, "edit-config") => edit_config::run(ctx, op, src),
        (NS_BASE, "copy-config") => copy_config::run(ctx, op, src),
        (NS_BASE, "delete-config") => delete_config::run(ctx, op),
        (NS_BASE, "lock") => lock::run(ctx, op),
        (NS_BASE, "unlock") => unlock::run(ctx, op),
        (NS_BASE, "close-session") => close_session::run(ctx, op),
        (NS_BASE, "kill-session") => kill_session::run(ctx, op),
        (NS_BASE, "commit") => commit::run(ctx, op),
        (NS_BASE, "cancel-commit") => cancel_commit::run(ctx, op),
        (NS_BASE, "discard-changes") => discard_changes::run(ctx, op),
        (NS_BASE, "validate") => validate::run(ctx, op, src),
        (NS_MONITORING, "get-schema") => get_schema::run(ctx, op),
        (crate::mgmt::events::NS_NOTIFICATION, "create-subscription") => create_subscription::run(ctx, op, src),
        (crate::push::NS_SN, "establish-subscription") => establish_subscription::run(ctx, op, src),
        (crate::push::NS_SN, "modify-subscription") => modify_subscription::run(ctx, op, src),
        (crate::push::NS_SN, "delete-subscription") => delete_subscription::run(ctx, op),
        (crate::push::NS_SN, "kill-subscription") => delete_subscription::kill(ctx, op),
        (crate::push::NS_YP, "resync-subscription") => resync_subscription::run(ctx, op),
        (NS_NMDA, "get-data") => get_data::run(ctx, op),
        (NS_NMDA, "edit-data") => edit_data::run(ctx, op, src),
        (NS_BASE, name) => Err(vec![RpcError::protocol(
            ErrorTag::OperationNotSupported,
            format!("<{name}> is not a NETCONF base operation this server supports"),
        )
        .with_bad_element(name)]),
        (ns, name) => {
            let module = crate::yang::context().get_module_latest_ns(ns);
            if let Some(m) = module.as_ref().filter(|m| m.rpcs().any(|r| r.name() == name)) {
                return app_rpc(ctx, m.name(), op, src);
            }
            if module.is_some() {
                Err(vec![RpcError::protocol(
                    ErrorTag::OperationNotSupported,
                    format!("the operation <{name}> of {ns} is not supported"),
                )
                .with_bad_element(name)])
            } else {
                let mut e =
                    RpcError::protocol(ErrorTag::UnknownNamespace, format!("no YANG module has namespace \"{ns}\""))
                        .with_bad_element(name);
                e.bad_namespace = Some(ns.to_owned());
                Err(vec![e])
            }
        }
    }
}

/// An RPC of one of the agent's modules: the input is parsed and validated by libyang,
/// then handed to the part of the agent that serves it.
fn app_rpc(ctx: &SessionCtx, module: &str, op: &Element, src: &str) -> OpResult {
    let handler = ctx.server.app_rpc(module);
    let Some(handler) = handler else {
        return Err(vec![RpcError::protocol(
            ErrorTag::OperationNotSupported,
            format!("{module}:{} is not available", op.name),
        )
        .with_bad_element(op.name.clone())]);
    };
    let mut text = op.standalone_text(src).map_err(|e| vec![too_big(e)])?.into_bytes();
    text.push(0);
    let input = DataTree::parse_op_string(
        crate::yang::context(),
        &text,
        yang2::data::DataFormat::XML,
        yang2::data::DataOperation::RpcYang,
    )
    .map_err(|e| vec![RpcError::from_libyang(&e)])?;
    let output = handler.call(module, &op.name, &input).map_err(|e| vec![e])?;
    Ok(if output.is_empty() { Body::Ok } else { Body::Data(output) })
}

/// Every attribute of `<rpc>`, with the namespace declarations prefixed ones need, to be
/// repeated on `<rpc-reply>` (RFC 6241 section 4.2).
fn echo_attributes(rpc: &Element) -> String {
    let mut out = String::new();
    let mut declared: Vec<&str> = Vec::new();
    for a in &rpc.attrs {
        match (&a.prefix, &a.ns) {
            (Some(p), Some(ns)) => {
                if !declared.contains(&p.as_str()) {
                    let _ = write!(out, " xmlns:{p}=\"{}\"", escape_attr(ns));
                    declared.push(p);
                }
                let _ = write!(out, " {p}:{}=\"{}\"", a.name, escape_attr(&a.value));
            }
            _ => {
                let _ = write!(out, " {}=\"{}\"", a.name, escape_attr(&a.value));
            }
        }
    }
    out
}

// ----- shared parameter helpers ---------------------------------------------------------

pub(crate) fn missing(param: &str, op: &str) -> Vec<RpcError> {
    vec![RpcError::protocol(ErrorTag::MissingElement, format!("<{op}> needs <{param}>")).with_bad_element(param)]
}

/// Reads a datastore parameter (`<target>`, `<source>`): one of running, candidate, startup.
pub(crate) fn datastore_param(op: &Element, param: &str) -> Result<Datastore, Vec<RpcError>> {
    let p = op.param(param).ok_or_else(|| missing(param, &op.name))?;
    let Some(which) = p.children.first() else {
        return Err(missing("running/candidate/startup", param));
    };
    if !matches!(which.ns.as_deref(), None | Some("") | Some(NS_BASE)) {
        return Err(vec![RpcError::protocol(ErrorTag::UnknownElement, format!("unknown datastore <{}>", which.name))
            .with_bad_element(which.name.clone())]);
    }
    match which.name.as_str() {
        "running" => Ok(Datastore::Running),
        "candidate" => Ok(Datastore::Candidate),
        "startup" => Ok(Datastore::Startup),
        "url" => Err(vec![RpcError::protocol(ErrorTag::OperationNotSupported, "the :url capability is not supported")
            .with_bad_element("url")]),
        other => {
            Err(vec![RpcError::protocol(ErrorTag::BadElement, format!("<{other}> is not a datastore"))
                .with_bad_element(other)])
        }
    }
}

pub(crate) fn with_defaults(op: &Element) -> Result<WithDefaults, Vec<RpcError>> {
    let Some(wd) = op.child(NS_WITH_DEFAULTS, "with-defaults") else {
        return Ok(WithDefaults::Explicit);
    };
    Ok(match wd.trimmed() {
        "report-all" => WithDefaults::ReportAll,
        "report-all-tagged" => WithDefaults::ReportAllTagged,
        "trim" => WithDefaults::Trim,
        "explicit" => WithDefaults::Explicit,
        other => {
            return Err(vec![RpcError::protocol(
                ErrorTag::InvalidValue,
                format!("invalid with-defaults mode \"{other}\""),
            )
            .with_bad_element("with-defaults")])
        }
    })
}

/// Prints a data tree as the content of a `<data>` element.
pub(crate) fn data_element(tree: &DataTree<'static>, wd: WithDefaults) -> Result<String, Vec<RpcError>> {
    print_data(tree, wd, false)
}

/// Like [`data_element`]; `keep_empty` keeps containers emptied by depth pruning.
pub(crate) fn print_data(
    tree: &DataTree<'static>,
    wd: WithDefaults,
    keep_empty: bool,
) -> Result<String, Vec<RpcError>> {
    let mut flags = DataPrinterFlags::WITH_SIBLINGS | DataPrinterFlags::SHRINK;
    if keep_empty {
        flags |= DataPrinterFlags::KEEP_EMPTY_CONT;
    }
    flags |= wd.printer_flags();
    if tree.reference().is_none() {
        return Ok("<data/>".into());
    }
    let body = tree
        .print_text(yang2::data::DataFormat::XML, flags)
        .map_err(|e| vec![RpcError::from_libyang(&e)])?
        .unwrap_or_default();
    let body = if wd == WithDefaults::ReportAllTagged { fix_default_attribute_ns(body) } else { body };
    Ok(format!("<data>{body}</data>"))
}

/// Reads the optional `<filter>` of get / get-config.
pub(crate) fn filter_param(op: &Element) -> Result<Option<Filter<'_>>, Vec<RpcError>> {
    match op.param("filter") {
        None => Ok(None),
        Some(f) => Filter::parse(f).map(Some).map_err(|e| vec![e]),
    }
}

/// The content of a `<config>` parameter, standalone, ready for libyang.
pub(crate) fn config_text(config: &Element, src: &str) -> Result<String, Vec<RpcError>> {
    config.children_text(src).map_err(|e| vec![too_big(e)])
}

/// Adds the bad-element libyang cannot name to errors about the content of `config`
/// (RFC 6241 Appendix A: unknown-namespace carries bad-element and bad-namespace).
/// `src` is the message `config` was parsed from: its content was skimmed
/// ([`xml::parse_rpc`]), so on such an error it is parsed again in full to find the element.
pub(crate) fn locate<'a>(config: &'a Element, src: &'a str) -> impl Fn(RpcError) -> Vec<RpcError> + 'a {
    move |mut e| {
        if e.bad_element.is_none() {
            if let Some(ns) = e.bad_namespace.clone() {
                let full = config
                    .standalone_text(src)
                    .ok()
                    .and_then(|t| xml::parse_with(&t, crate::config::message_limits::get()).ok());
                let mut stack: Vec<&Element> = match &full {
                    Some(f) => f.children.iter().collect(),
                    None => config.children.iter().collect(),
                };
                while let Some(el) = stack.pop() {
                    if el.ns.as_deref() == Some(ns.as_str()) {
                        e.bad_element = Some(el.name.clone());
                        break;
                    }
                    stack.extend(el.children.iter());
                }
            }
        }
        vec![e]
    }
}

pub(crate) fn one(e: RpcError) -> Vec<RpcError> {
    vec![e]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(body: &str) -> Element {
        let rpc = xml::parse_with(
            &format!("<rpc xmlns=\"{NS_BASE}\" message-id=\"1\">{body}</rpc>"),
            crate::config::message_limits::get(),
        )
        .unwrap();
        rpc.children[0].clone()
    }

    #[test]
    fn only_reads_that_wait_for_no_task_stay_on_the_worker() {
        let nacm = "<filter><nacm xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-acm\"/></filter>";
        let engine = "<filter><cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><statistics/></cats-sma></filter>";
        let any_ns = "<filter><statistics xmlns=\"\"/></filter>";
        let xpath = "<filter type=\"xpath\" select=\"//statistics\"/>";
        assert!(runs_inline(&op(&format!("<get-config><source><running/></source>{nacm}</get-config>"))));
        assert!(runs_inline(&op(&format!("<get>{nacm}</get>"))));
        // The engine's state, everything, a namespace-less name that may be the engine's,
        // an XPath reaching anywhere: the engine's task is asked, so a blocking thread.
        assert!(!runs_inline(&op(&format!("<get>{engine}</get>"))));
        assert!(!runs_inline(&op("<get/>")));
        assert!(!runs_inline(&op(&format!("<get>{any_ns}</get>"))));
        assert!(!runs_inline(&op(&format!("<get>{xpath}</get>"))));
        assert!(!runs_inline(&op(&format!("<get-data xmlns=\"{NS_NMDA}\">{nacm}</get-data>"))));
    }
}
