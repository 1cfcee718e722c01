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

#[cfg(test)]
mod tests {
    //! Issue 14, "correctness is not traded": the typed renderer's answer equals the
    //! libyang path's (running plus the providers' trees, NACM pruning, the filter,
    //! max-depth, with-defaults printing) on randomised engine states, filters and NACM
    //! rules, compared as canonical trees (both parsed by libyang and printed as JSON with
    //! list entries sorted), not as strings.
    use std::sync::Arc;

    use yang2::data::{DataFormat, DataParserFlags, DataPrinterFlags, DataTree, DataValidationFlags};

    use super::*;
    use crate::datastore::render::{read_typed, Format, Options};
    use crate::datastore::{Datastores, Source};
    use crate::engine::clock::Clock;
    use crate::engine::northbound::{config, state::EngineState};
    use crate::engine::report::RawReport;
    use crate::engine::Engine;
    use crate::mgmt::filter::Filter;
    use crate::nacm::Nacm;
    use crate::yang::PrintText as _;

    const NS: &str = "urn:cats-sma:yang:cats-sma";

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn sci(i: usize) -> String {
        format!("10.0.{}.{}:80", i / 250, i % 250)
    }

    /// Running with `n` SCIs in 5 services, the engine with reports from some of them
    /// (some out of range, so rejections are counted).
    fn state(rng: &mut Rng, rt: &tokio::runtime::Runtime, n: usize) -> (Datastores, Arc<EngineState>) {
        let ds = Datastores::open(crate::yang::context(), None).unwrap();
        let mut xml = format!(r#"<cats-sma xmlns="{NS}"><agent><csma-id>t</csma-id></agent><scis>"#);
        for i in 0..n {
            xml.push_str(&format!(
                "<sci><csci-id>{}</csci-id><cs-id>CS{}</cs-id><authentication>none</authentication></sci>",
                sci(i),
                i % 5
            ));
        }
        xml.push_str("</scis></cats-sma>");
        // NACM configuration in running on some rounds: a reader NACM applies to is then not
        // given the default-deny-all /nacm whole.
        if n % 2 == 1 {
            xml.push_str(
                "<nacm xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-acm\"><groups><group><name>ops</name>\
                 <user-name>bob</user-name></group></groups></nacm>",
            );
        }
        let cfg = ds.parse_config(xml.as_bytes(), DataFormat::XML).unwrap();
        ds.copy(1, Source::Config(&cfg), Datastore::Running).unwrap();
        let engine = {
            let _g = rt.enter();
            Engine::start(Clock::new(), Arc::new(|_: &str, _: &str, _: String| {}))
        };
        ds.with_tree(Datastore::Running, |t| config::load_all(&engine, t)).unwrap();
        let reporting: Vec<usize> = (0..n).filter(|_| rng.below(4) != 0).collect();
        let reports: Vec<RawReport> = reporting
            .into_iter()
            .map(|i| RawReport {
                csci_id: sci(i),
                cs_id: format!("CS{}", i % 5),
                sequence: 1 + rng.below(3) as u64,
                timestamp: chrono::Utc::now(),
                gas: if rng.below(8) == 0 { -5 } else { rng.below(1000) as i64 },
                computing_time: rng.below(50) as i64,
                health: ["HEALTHY", "DEGRADED", "UNHEALTHY"][rng.below(3)].into(),
                cost: (rng.below(2) == 0).then(|| rng.below(100) as i64),
                reputation: (rng.below(2) == 0).then(|| rng.below(5) as i64),
                security_label: (rng.below(3) == 0).then(|| rng.below(7) as i64),
            })
            .collect();
        engine
            .query_blocking(move |core| {
                for r in &reports {
                    let _ = core.ingest(r, None);
                }
                core.settle();
                core.events.clear();
            })
            .unwrap();
        let provider = Arc::new(EngineState { engine });
        ds.register_state_provider(provider.clone());
        // NACM's counters, the state inside /nacm (the agent registers its own NACM).
        ds.register_state_provider(Nacm::new(None));
        (ds, provider)
    }

    fn nacm(rule: Option<(&str, &str)>, read_default: &str) -> Arc<Nacm> {
        let n = Nacm::new(None);
        let rules = match rule {
            None => String::new(),
            Some((path, action)) => {
                // XML instance identifiers prefix every step.
                let path: String = path
                    .split('/')
                    .filter(|s| !s.is_empty())
                    .map(|s| match s.split_once(':') {
                        Some(("cats-sma-policy", l)) => format!("/p:{l}"),
                        Some((_, l)) => format!("/c:{l}"),
                        None => format!("/c:{s}"),
                    })
                    .collect();
                format!(
                    "<rule-list><name>r</name><group>g</group><rule><name>x</name><path>{path}</path>\
                 <access-operations>read</access-operations><action>{action}</action></rule></rule-list>"
                )
            }
        };
        let xml = format!(
            "<nacm xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-acm\" xmlns:c=\"{NS}\" \
             xmlns:p=\"urn:cats-sma:yang:cats-sma-policy\"><read-default>{read_default}</read-default>\
             <groups><group><name>g</name><user-name>alice</user-name></group></groups>{rules}</nacm>\0"
        );
        let t = DataTree::parse_string(
            crate::yang::context(),
            xml.as_bytes(),
            DataFormat::XML,
            DataParserFlags::NO_VALIDATION,
            DataValidationFlags::empty(),
        )
        .unwrap();
        n.load(&t);
        n
    }

    /// A tree printed as JSON with the entries of every list sorted.
    fn canonical(xml: &str) -> serde_json::Value {
        if xml.trim().is_empty() {
            return serde_json::Value::Null;
        }
        let flags = DataParserFlags::STRICT
            | DataParserFlags::from_bits_retain(yang2::ffi::LYD_PARSE_STORE_ONLY)
            | DataParserFlags::NO_VALIDATION;
        // The with-defaults tag (RFC 6243 report-all-tagged) is metadata of a module the
        // parser here does not load: both sides are printed in the same mode, so it is
        // dropped from both.
        let untagged = xml
            .replace(" xmlns:ncwd=\"urn:ietf:params:xml:ns:netconf:default:1.0\"", "")
            .replace(" ncwd:default=\"true\"", "");
        let text = format!("{untagged}\0");
        let t = DataTree::parse_string(
            crate::yang::context(),
            text.as_bytes(),
            DataFormat::XML,
            flags,
            DataValidationFlags::empty(),
        )
        .unwrap_or_else(|e| panic!("{e}: {xml}"));
        let json = t
            .print_text(DataFormat::JSON, DataPrinterFlags::WITH_SIBLINGS | DataPrinterFlags::KEEP_EMPTY_CONT)
            .unwrap()
            .unwrap_or_default();
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap_or(serde_json::Value::Null);
        fn sort(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Array(a) => {
                    a.iter_mut().for_each(sort);
                    a.sort_by_key(|x| x.to_string());
                }
                serde_json::Value::Object(o) => {
                    // A countdown on the engine's clock, read at two different instants.
                    if let Some(t) = o.get_mut("ttl-remaining") {
                        *t = serde_json::Value::Null;
                    }
                    o.values_mut().for_each(sort)
                }
                _ => {}
            }
        }
        sort(&mut v);
        v
    }

    /// Null, or objects holding only empty objects.
    fn only_empty(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Null => true,
            serde_json::Value::Object(o) => o.values().all(only_empty),
            _ => false,
        }
    }

    fn body(data: &str) -> &str {
        data.strip_prefix("<data>").and_then(|b| b.strip_suffix("</data>")).unwrap_or("")
    }

    #[test]
    fn issue14_typed_reads_equal_libyang_on_random_states_filters_and_rules() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let mut rng = Rng(14);
        let base = "/cats-sma:cats-sma";
        let rules: &[(Option<(&str, &str)>, &str)] = &[
            (None, "permit"),
            (Some(("/cats-sma:cats-sma/metric-cache/entry/gas", "deny")), "permit"),
            (Some(("/cats-sma:cats-sma/statistics", "deny")), "permit"),
            (Some(("/cats-sma:cats-sma/services/service/cats-sma-policy:reported-gas", "deny")), "permit"),
            (Some(("/cats-sma:cats-sma/metric-cache", "permit")), "deny"),
            (Some(("/cats-sma:cats-sma/metric-cache/entry", "deny")), "permit"),
        ];
        let (mut typed_served, mut compared, mut direct_served, mut tops_served) = (0, 0, 0, 0);
        for round in 0..4 {
            let n = [0, 3, 12, 41][round];
            let (ds, _p) = state(&mut rng, &rt, n);
            for _ in 0..60 {
                let k = sci(rng.below(n.max(1) + 2));
                let cs = format!("CS{}", rng.below(6));
                let xpaths = [
                    format!("{base}/metric-cache"),
                    format!("{base}/metric-cache/entry[csci-id='{k}']"),
                    format!("{base}/metric-cache/entry[csci-id='{k}']/gas"),
                    format!("{base}/metric-cache/entry[csci-id='{k}']/csci-id"),
                    format!("{base}/metric-cache/entry/health"),
                    format!("{base}/services/service[cs-id='{cs}']"),
                    format!("{base}/services/service/cats-sma-policy:reported-gas"),
                    format!("{base}/statistics"),
                    format!("{base}/statistics/reports-received"),
                    format!("{base}/statistics/rejection"),
                    format!("{base}/statistics | {base}/metric-cache/entry[csci-id='{k}']"),
                    format!("{base}/metric-cache/entry[gas>500]"),
                    // Steps that read up or sideways: the covering read must reach them.
                    format!("{base}/metric-cache/entry[csci-id='{k}']/gas/parent::*"),
                    format!("{base}/statistics/reports-received/.."),
                    format!("{base}/metric-cache/entry[csci-id='{k}']/csci-id/following-sibling::*"),
                    format!("{base}/scis/sci[csci-id='{k}']/csci-id/parent::*"),
                    format!("{base}/scis/sci[csci-id='{k}']/csci-id/following-sibling::*"),
                ];
                let subtrees = [
                    format!("<cats-sma xmlns=\"{NS}\"><metric-cache/></cats-sma>"),
                    format!("<cats-sma xmlns=\"{NS}\"><metric-cache><entry><csci-id>{k}</csci-id></entry></metric-cache></cats-sma>"),
                    format!("<cats-sma xmlns=\"{NS}\"><metric-cache><entry><gas/><state/></entry></metric-cache></cats-sma>"),
                    format!("<cats-sma xmlns=\"{NS}\"><services><service><cs-id>{cs}</cs-id></service></services><statistics/></cats-sma>"),
                    format!("<cats-sma xmlns=\"{NS}\"><statistics><reports-accepted/><rejection/></statistics></cats-sma>"),
                    format!("<cats-sma xmlns=\"{NS}\"><metric-cache><entry><health>healthy</health></entry></metric-cache></cats-sma>"),
                    // Configuration and state together, selection nodes only (get's direct path).
                    format!("<cats-sma xmlns=\"{NS}\"><scis/><statistics><reports-received/></statistics></cats-sma>"),
                    format!("<cats-sma xmlns=\"{NS}\"/><nacm xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-acm\"/>"),
                    "<nacm xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-acm\"><denied-operations/><groups/></nacm>".to_owned(),
                    // Whole top-level selection nodes: the state is moved in unfiltered.
                    "<nacm xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-acm\"/>".to_owned(),
                    format!("<cats-sma xmlns=\"{NS}\"/>"),
                ];
                let filter_xml = if rng.below(2) == 0 {
                    let x = &xpaths[rng.below(xpaths.len())];
                    format!(
                        "<filter type=\"xpath\" xmlns:cats-sma=\"{NS}\" \
                         xmlns:cats-sma-policy=\"urn:cats-sma:yang:cats-sma-policy\" select=\"{x}\"/>"
                    )
                } else {
                    format!("<filter type=\"subtree\">{}</filter>", subtrees[rng.below(subtrees.len())])
                };
                let el = crate::xml::parse(&filter_xml).unwrap();
                let filter = Filter::parse(&el).unwrap();
                let sel = super::super::get::selection(&filter);
                let (rule, default) = rules[rng.below(rules.len())];
                let nacm = nacm(rule, default);
                let user = if rng.below(5) == 0 { "admin" } else { "alice" };
                let wd = [
                    WithDefaults::Explicit,
                    WithDefaults::Trim,
                    WithDefaults::ReportAll,
                    WithDefaults::ReportAllTagged,
                ][rng.below(4)];
                let max_depth = [None, None, Some(1), Some(2), Some(3), Some(4)][rng.below(6)];
                // The libyang path, as get-data runs it.
                let full = nacm.readable(user, ds.read(Datastore::Operational, None).unwrap());
                let mut tree = filter.apply(&full).unwrap().into_tree();
                for p in doomed_paths(&tree, None, max_depth, &[]) {
                    let _ = crate::datastore::tree::remove(&mut tree, &p);
                }
                let expected = print_data(&tree, wd, max_depth.is_some()).unwrap();
                let Some(access) = nacm.read_access(user) else { continue };
                let opts = Options { format: Format::Xml, skip: 0, max_depth, with_defaults: wd };
                compared += 1;
                if let Some(got) = read_typed(&ds, &sel, &access, opts).unwrap() {
                    typed_served += 1;
                    assert_eq!(
                        canonical(&got),
                        canonical(body(&expected)),
                        "filter {filter_xml}, rule {rule:?} default {default}, user {user}, {wd:?}, max-depth {max_depth:?}\ntyped: {got}\nlibyang: {expected}"
                    );
                }
                // get's direct path (subtree filters of selection nodes only, readers NACM
                // hides nothing from) gives the same answer as the full read.
                // Also for the recovery user, whom NACM never restricts (the agent's admin).
                if let Filter::Subtree(f) = &filter {
                    let root = Nacm::new(Some("root".into()));
                    for (nacm, user) in [(&nacm, user), (&root, "root")] {
                        // Whole top-level nodes printed from running, with the providers'
                        // text inside (get) or without (get-config).
                        for (state, source) in [(true, Datastore::Operational), (false, Datastore::Running)] {
                            let printed =
                                super::super::get_config::print_tops(&ds, Datastore::Running, nacm, user, f, wd, state)
                                    .unwrap();
                            let Some(got) = printed else { continue };
                            tops_served += 1;
                            let full = nacm.readable(user, ds.read(source, None).unwrap());
                            let want = filter.apply(&full).unwrap().into_tree();
                            let want = canonical(body(&print_data(&want, wd, false).unwrap()));
                            let got = canonical(body(&got));
                            if !only_empty(&want) || !only_empty(&got) {
                                assert_eq!(
                                    got, want,
                                    "printed tops, filter {filter_xml}, user {user}, {wd:?}, {source:?}"
                                );
                            }
                        }
                        let Some(mut tree) = super::super::get::select_direct(&ds, nacm, user, f, &sel).unwrap() else {
                            continue;
                        };
                        direct_served += 1;
                        let full = nacm.readable(user, ds.read(Datastore::Operational, None).unwrap());
                        let mut want = filter.apply(&full).unwrap().into_tree();
                        for t in [&mut tree, &mut want] {
                            for p in doomed_paths(t, None, max_depth, &[]) {
                                let _ = crate::datastore::tree::remove(t, &p);
                            }
                        }
                        let want = canonical(body(&print_data(&want, wd, max_depth.is_some()).unwrap()));
                        let got = canonical(body(&print_data(&tree, wd, max_depth.is_some()).unwrap()));
                        if !only_empty(&want) || !only_empty(&got) {
                            assert_eq!(got, want, "direct read, filter {filter_xml}, user {user}, {wd:?}");
                        }
                    }
                }
                // The covering read gives the same answer as the full one.
                let covering = nacm.readable(user, ds.read_covering(Datastore::Operational, &sel).unwrap());
                let mut tree = filter.apply(&covering).unwrap().into_tree();
                for p in doomed_paths(&tree, None, max_depth, &[]) {
                    let _ = crate::datastore::tree::remove(&mut tree, &p);
                }
                let want = canonical(body(&expected));
                let got = canonical(body(&print_data(&tree, wd, max_depth.is_some()).unwrap()));
                // Known difference: when NACM leaves only emptied containers, libyang prints
                // the empty top container or not depending on where the node came from
                // (running's copy or a provider's tree); no data differs.
                if !only_empty(&want) || !only_empty(&got) {
                    assert_eq!(got, want, "covering read, filter {filter_xml}");
                }
            }
        }
        // Many reads were served typed (the rest: value matches, max-depth with NACM, or
        // NACM leaving a selected container empty).
        assert!(typed_served * 3 > compared, "{typed_served} of {compared} served typed");
        assert!(direct_served * 20 > compared, "{direct_served} of {compared} served by get's direct path");
        assert!(tops_served * 20 > compared, "{tops_served} of {compared} printed as whole top-level nodes");
    }
}
