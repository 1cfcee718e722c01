//! `<get-data>` (RFC 8526 section 3.1.1): any NMDA datastore, subtree or XPath filter,
//! config-filter, max-depth, origin filters, with-origin and with-defaults.

use yang2::data::{DataNodeRef, DataTree};
use yang2::iter::NodeIterable;

use super::{missing, one, print_data, OpResult, SessionCtx};
use crate::datastore::Datastore;
use crate::error::{ErrorTag, RpcError};
use crate::mgmt::filter::{subtree, xpath};
use crate::mgmt::with_defaults::WithDefaults;
use crate::netconf::{NS_NMDA, NS_WITH_DEFAULTS};
use crate::xml::Element;

pub const NS_DATASTORES: &str = "urn:ietf:params:xml:ns:yang:ietf-datastores";
const NS_ORIGIN: &str = "urn:ietf:params:xml:ns:yang:ietf-origin";

/// Reads `<datastore>ds:name</datastore>`, resolving the identity prefix in scope.
pub(crate) fn datastore_identity(op: &Element) -> Result<Datastore, Vec<RpcError>> {
    let el = op.child(NS_NMDA, "datastore").ok_or_else(|| missing("datastore", &op.name))?;
    let value = el.trimmed();
    let (prefix, name) = match value.split_once(':') {
        Some((p, n)) => (Some(p), n),
        None => (None, value),
    };
    let ns = el.scope.resolve(prefix);
    let ds = match ns {
        Some(NS_DATASTORES) => Datastore::from_identity(name),
        _ => None,
    };
    ds.ok_or_else(|| {
        one(RpcError::protocol(
            ErrorTag::InvalidValue,
            format!("\"{value}\" is not an ietf-datastores identity this server has"),
        )
        .with_bad_element("datastore"))
    })
}

/// The origin an operational node reports (RFC 8342 section 5.3.4): configuration is
/// intended; state the agent learned from SCIs and C-PSes is learned; the rest is system.
fn origin_of(node: &DataNodeRef<'_, '_>) -> &'static str {
    let s = node.schema();
    if s.is_config() {
        "ietf-origin:intended"
    } else if s.module().name().starts_with("cats-") {
        "ietf-origin:learned"
    } else {
        "ietf-origin:system"
    }
}

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let ds = datastore_identity(op)?;
    let wd = match op.child(NS_NMDA, "with-defaults").or_else(|| op.child(NS_WITH_DEFAULTS, "with-defaults")) {
        Some(_) => super::with_defaults(&rename_wd(op))?,
        None => WithDefaults::Explicit,
    };
    let with_origin = op.child(NS_NMDA, "with-origin").is_some();
    let origin_filter: Vec<String> = op
        .children
        .iter()
        .filter(|c| {
            c.ns.as_deref() == Some(NS_NMDA) && (c.name == "origin-filter" || c.name == "negated-origin-filter")
        })
        .map(|c| format!("{}{}", if c.name == "negated-origin-filter" { "!" } else { "" }, local(c.trimmed())))
        .collect();
    if (with_origin || !origin_filter.is_empty()) && ds != Datastore::Operational {
        // RFC 8526 3.1.1: origin parameters are only for operational.
        return Err(one(RpcError::protocol(
            ErrorTag::InvalidValue,
            "origin filtering and with-origin apply to the operational datastore only",
        )
        .with_bad_element(if with_origin { "with-origin" } else { "origin-filter" })));
    }
    let config_filter = match op.child(NS_NMDA, "config-filter").map(|c| c.trimmed()) {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(other) => {
            return Err(one(RpcError::protocol(ErrorTag::InvalidValue, format!("invalid config-filter \"{other}\""))
                .with_bad_element("config-filter")))
        }
    };
    let max_depth = match op.child(NS_NMDA, "max-depth").map(|c| c.trimmed()) {
        None | Some("unbounded") => None,
        Some(v) => match v.parse::<u16>() {
            Ok(d) if d >= 1 => Some(d as usize),
            _ => {
                return Err(one(RpcError::protocol(ErrorTag::InvalidValue, format!("invalid max-depth \"{v}\""))
                    .with_bad_element("max-depth")))
            }
        },
    };
    // The filter is checked before any data is read, then runs over what NACM leaves.
    let subtree_filter = op.child(NS_NMDA, "subtree-filter");
    if let Some(f) = subtree_filter {
        crate::mgmt::filter::check_subtree(f).map_err(one)?;
    }
    let xpath_filter = match op.child(NS_NMDA, "xpath-filter") {
        Some(x) => {
            let expr = xpath::to_json_prefixes(x.trimmed(), &x.scope).map_err(one)?;
            crate::mgmt::filter::check_xpath(&expr).map_err(one)?;
            Some(expr)
        }
        None => None,
    };
    let sel = match (subtree_filter, &xpath_filter) {
        (Some(f), _) => crate::datastore::select::Selection::from_subtree(f),
        (None, Some(x)) => crate::datastore::select::Selection::from_xpath(x),
        (None, None) => crate::datastore::select::Selection::all(),
    };
    // State the typed renderers serve is learned state with no configuration in it, so
    // only origin annotations and config-filter=true need the libyang path.
    if ds == Datastore::Operational && !with_origin && origin_filter.is_empty() && config_filter != Some(true) {
        if let Some(body) = super::get::typed(ctx, &sel, wd, max_depth)? {
            return Ok(super::Body::Data(nmda_data(&body)));
        }
    }
    let full = super::get::readable_covering(ctx, ds, &sel)?;
    let tree = if let Some(f) = subtree_filter {
        subtree::apply(f, &full).map_err(one)?
    } else if let Some(expr) = &xpath_filter {
        xpath::apply(expr, &full).map_err(one)?
    } else {
        full
    };
    let mut tree = tree.into_tree();
    let doomed = doomed_paths(&tree, config_filter, max_depth, &origin_filter);
    for p in doomed {
        let _ = crate::datastore::tree::remove(&mut tree, &p);
    }
    if with_origin {
        annotate_origin(&tree).map_err(one)?;
    }
    let inner = print_data(&tree, wd, max_depth.is_some())?;
    Ok(super::Body::Data(nmda_data(&inner)))
}

/// `<data>` of ietf-netconf-nmda instead of the base namespace.
fn nmda_data(inner: &str) -> String {
    match inner.strip_prefix("<data>").and_then(|b| b.strip_suffix("</data>")) {
        Some(b) => format!("<data xmlns=\"{NS_NMDA}\">{b}</data>"),
        None => format!("<data xmlns=\"{NS_NMDA}\"/>"),
    }
}

fn local(identity: &str) -> String {
    identity.rsplit(':').next().unwrap_or(identity).to_owned()
}

/// with-defaults in get-data is the ietf-netconf-nmda leaf; reuse the RFC 6243 parser.
fn rename_wd(op: &Element) -> Element {
    let mut e = op.clone();
    for c in &mut e.children {
        if c.name == "with-defaults" {
            c.ns = Some(NS_WITH_DEFAULTS.into());
        }
    }
    e
}

/// Paths of nodes the config-filter, max-depth and origin filters drop.
fn doomed_paths(
    tree: &DataTree<'static>,
    config: Option<bool>,
    max_depth: Option<usize>,
    origins: &[String],
) -> Vec<String> {
    let mut out = Vec::new();
    let Some(first) = tree.reference() else { return out };
    for top in first.inclusive_siblings() {
        visit(&top, 1, config, max_depth, origins, &mut out);
    }
    out
}

fn has_state(n: &DataNodeRef<'_, '_>) -> bool {
    n.traverse().any(|d| !d.schema().is_config())
}

fn origin_allowed(n: &DataNodeRef<'_, '_>, origins: &[String]) -> bool {
    if origins.is_empty() {
        return true;
    }
    let o = local(origin_of(n));
    let positive: Vec<&String> = origins.iter().filter(|x| !x.starts_with('!')).collect();
    let negated = origins.iter().any(|x| x.strip_prefix('!') == Some(o.as_str()));
    (positive.is_empty() || positive.iter().any(|x| **x == o)) && !negated
}

fn visit(
    n: &DataNodeRef<'_, '_>,
    depth: usize,
    config: Option<bool>,
    max_depth: Option<usize>,
    origins: &[String],
    out: &mut Vec<String>,
) {
    let s = n.schema();
    if s.is_list_key() {
        return;
    }
    // A node whose origin differs from its parent's starts a region of that origin; an
    // unwanted region goes unless it is the way to wanted descendants.
    let region_root = n.parent().is_none_or(|p| origin_of(&p) != origin_of(n));
    let unwanted_origin =
        region_root && !origin_allowed(n, origins) && !n.traverse().skip(1).any(|d| origin_allowed(&d, origins));
    let drop = max_depth.is_some_and(|m| depth > m)
        || config == Some(true) && !s.is_config()
        || config == Some(false) && s.is_config() && !has_state(n)
        || unwanted_origin;
    if drop {
        out.push(n.path());
        return;
    }
    for c in n.children() {
        visit(&c, depth + 1, config, max_depth, origins, out);
    }
}

/// Adds `or:origin` metadata where the origin changes from the parent's (RFC 8342 5.3.4:
/// children inherit their parent's origin).
fn annotate_origin(tree: &DataTree<'static>) -> Result<(), RpcError> {
    let Some(first) = tree.reference() else { return Ok(()) };
    let mut targets = Vec::new();
    for top in first.inclusive_siblings() {
        for n in top.traverse() {
            let mine = origin_of(&n);
            let inherited = n.parent().map(|p| origin_of(&p));
            if inherited != Some(mine) {
                targets.push((n.as_raw(), mine));
            }
        }
    }
    let name = c"ietf-origin:origin";
    for (raw, origin) in targets {
        let value = std::ffi::CString::new(origin).expect("no NUL in identity names");
        // SAFETY: `raw` is a live node of `tree` (collected above, nothing freed since); the
        // module is resolved by libyang from the prefixed name; the strings outlive the call.
        let ret = unsafe {
            yang2::ffi::lyd_new_meta(
                std::ptr::null(),
                raw,
                std::ptr::null(),
                name.as_ptr(),
                value.as_ptr(),
                0,
                std::ptr::null_mut(),
            )
        };
        if ret != yang2::ffi::LY_ERR::LY_SUCCESS {
            return Err(RpcError::application(
                ErrorTag::OperationFailed,
                format!("cannot add origin metadata ({NS_ORIGIN})"),
            ));
        }
    }
    Ok(())
}
