//! What one datastore subscription sees: a full snapshot for push-update, and the YANG
//! Patch edits of a batch of typed changes for push-change-update. Both go through the
//! subscription's selection filter and the subscriber's NACM read rules (RFC 8641 section
//! 3.9: a node the receiver may not read is never pushed).

use crate::yang::PrintText as _;
use std::sync::Arc;

use yang2::data::{Data, DataFormat, DataPrinterFlags, DataTree};

use std::fmt::Write as _;

use super::encode::{percent_encode, restconf_path, Edit, Encoding};
use super::params::{EditOp, Filter};
use crate::datastore::tree::{quote, set};
use crate::datastore::{ChangeOp, Datastore, Datastores};
use crate::engine::changes::{ChangeSet, StateChange};
use crate::error::RpcError;
use crate::mgmt::filter::{subtree, xpath, Readable};
use crate::nacm::Nacm;
use crate::text::xml as escape_text;

const ROOT: &str = "/cats-sma:cats-sma";
const NS_CATS: &str = "urn:cats-sma:yang:cats-sma";

/// One change of running, with the node after the change (or, for a delete, its path
/// with keys and old value) and its ancestors, ready to be filtered.
pub struct RunningEdit {
    pub op: ChangeOp,
    pub path: String,
    pub tree: DataTree<'static>,
}

/// A batch of typed changes a datastore subscription consumes.
#[derive(Clone)]
pub enum Batch {
    /// Operational state changed in the engine.
    Engine(Arc<ChangeSet>),
    /// A commit changed running (also part of operational).
    Running(Arc<Vec<RunningEdit>>),
}

/// Reads and filters for one subscriber; `Sync`, so snapshots can run on a blocking thread.
pub trait View: Send + Sync + 'static {
    /// The selected, NACM-pruned content (children of datastore-contents).
    fn snapshot(&self) -> Result<String, RpcError>;
    /// The edits of a batch this subscriber may see.
    fn edits(&self, batch: &Batch) -> Vec<Edit>;
    /// Whether `snapshot` blocks (reads the datastores, asks the engine) and must run on a
    /// blocking thread.
    fn blocking(&self) -> bool {
        true
    }
}

pub struct DatastoreView {
    pub datastores: Arc<Datastores>,
    pub nacm: Arc<Nacm>,
    pub user: String,
    pub datastore: Datastore,
    pub selection: Option<Filter>,
    /// The selection takes every metric-cache entry / service whole, so their edits can
    /// be written straight from the typed change when NACM does not restrict the reader.
    whole: (bool, bool),
    /// XML or JSON (what snapshots and edit values are written in).
    pub encoding: Encoding,
}

fn print(tree: &DataTree<'static>, siblings: bool, enc: Encoding) -> Result<String, RpcError> {
    let mut flags = DataPrinterFlags::SHRINK | DataPrinterFlags::WD_EXPLICIT;
    if siblings {
        flags |= DataPrinterFlags::WITH_SIBLINGS;
    }
    if tree.reference().is_none() {
        return Ok(String::new());
    }
    let format = if enc == Encoding::Xml { DataFormat::XML } else { DataFormat::JSON };
    Ok(tree.print_text(format, flags).map_err(|e| RpcError::from_libyang(&e))?.unwrap_or_default())
}

/// How a leaf of a metric-cache entry or service is written in JSON (RFC 7951 section 6).
#[derive(Clone, Copy, PartialEq, Eq)]
enum JsonKind {
    /// A number or boolean, bare.
    Bare,
    /// A string (also 64-bit integers and decimal64, section 6.1).
    Str,
    /// Anything else (unions, identityrefs, empty): written by libyang.
    Other,
}

/// The JSON kind of leaf `name` of `list` (`metric-cache/entry` or `services/service`).
fn json_kind(list: &str, name: &str) -> JsonKind {
    use yang2::schema::DataValueType as T;
    static SEEN: std::sync::Mutex<Vec<(String, JsonKind)>> = std::sync::Mutex::new(Vec::new());
    let path = format!("{ROOT}/{list}/{name}");
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, k)) = seen.iter().find(|(p, _)| *p == path) {
        return *k;
    }
    let kind = match crate::yang::context().find_path(&path).ok().and_then(|n| n.leaf_type().map(|t| t.base_type())) {
        Some(T::Uint8 | T::Uint16 | T::Uint32 | T::Int8 | T::Int16 | T::Int32 | T::Bool) => JsonKind::Bare,
        Some(T::Uint64 | T::Int64 | T::Dec64 | T::String | T::Enum | T::Bits) => JsonKind::Str,
        _ => JsonKind::Other,
    };
    seen.push((path, kind));
    kind
}

impl DatastoreView {
    pub fn new(
        datastores: Arc<Datastores>,
        nacm: Arc<Nacm>,
        user: String,
        datastore: Datastore,
        selection: Option<Filter>,
    ) -> Self {
        let whole = match &selection {
            None => (true, true),
            Some(f) => selects_whole_objects(f),
        };
        DatastoreView { datastores, nacm, user, datastore, selection, whole, encoding: Encoding::Xml }
    }

    /// The same view writing `encoding` (XML; JSON for JSON and CBOR receivers).
    pub fn with_encoding(mut self, encoding: Encoding) -> Self {
        self.encoding = if encoding == Encoding::Xml { Encoding::Xml } else { Encoding::Json };
        self
    }

    /// The edit of an engine change written directly as JSON (the fast path), when every
    /// leaf has a plain JSON form.
    fn direct_edit_json(change: &StateChange) -> Option<Edit> {
        let (base, list, key, id, leaves) = match change {
            StateChange::Sci { csci_id, leaves } => ("metric-cache/entry", "entry", "csci-id", csci_id, leaves),
            StateChange::Service { cs_id, leaves } => ("services/service", "service", "cs-id", cs_id, leaves),
            StateChange::Subtree { .. } => return None,
        };
        let mut target = format!("{ROOT}/{base}=");
        percent_encode(id, &mut target);
        let Some(leaves) = leaves else { return Some(Edit { target, op: EditOp::Delete, value: None }) };
        let quote = |v: &str| serde_json::Value::String(v.to_owned()).to_string();
        let mut v = String::with_capacity(64 + leaves.len() * 40);
        let _ = write!(v, "{{\"cats-sma:{list}\":[{{\"{key}\":{}", quote(id));
        for (name, value) in leaves {
            match json_kind(base, name) {
                JsonKind::Bare => {
                    let _ = write!(v, ",\"{name}\":{value}");
                }
                JsonKind::Str => {
                    let _ = write!(v, ",\"{name}\":{}", quote(value));
                }
                JsonKind::Other => return None,
            }
        }
        v.push_str("}]}");
        Some(Edit { target, op: EditOp::Replace, value: Some(v) })
    }

    /// The edit of an engine change written directly as XML (the fast path).
    fn direct_edit(change: &StateChange) -> Option<Edit> {
        let (base, list, key, id, leaves) = match change {
            StateChange::Sci { csci_id, leaves } => ("metric-cache/entry", "entry", "csci-id", csci_id, leaves),
            StateChange::Service { cs_id, leaves } => ("services/service", "service", "cs-id", cs_id, leaves),
            StateChange::Subtree { .. } => return None,
        };
        let mut target = format!("{ROOT}/{base}=");
        percent_encode(id, &mut target);
        let Some(leaves) = leaves else { return Some(Edit { target, op: EditOp::Delete, value: None }) };
        let mut v = String::with_capacity(64 + leaves.len() * 40);
        let _ = write!(v, "<{list} xmlns=\"{NS_CATS}\"><{key}>{}</{key}>", escape_text(id));
        for (name, value) in leaves {
            match name.split_once(':') {
                Some((module, local)) => {
                    let ns = crate::yang::context().get_module_latest(module).map(|m| m.namespace().to_owned());
                    let _ = write!(v, "<{local} xmlns=\"{}\">{}</{local}>", ns.unwrap_or_default(), escape_text(value));
                }
                None => {
                    let _ = write!(v, "<{name}>{}</{name}>", escape_text(value));
                }
            }
        }
        let _ = write!(v, "</{list}>");
        Some(Edit { target, op: EditOp::Replace, value: Some(v) })
    }

    /// NACM, then the selection filter (which so sees only what the receiver may read).
    fn select(&self, tree: DataTree<'static>) -> Result<DataTree<'static>, RpcError> {
        let tree = self.nacm.readable(&self.user, tree);
        Ok(apply(self.selection.as_ref(), tree)?.into_tree())
    }

    /// The edit for the node at `path` of `tree` after selection, if any of it is left.
    fn edit(&self, tree: DataTree<'static>, path: &str, op: EditOp) -> Option<Edit> {
        let tree = self.select(tree).ok()?;
        let node = tree.find_path(path).ok()?;
        let value = match op {
            EditOp::Delete => None,
            _ => Some(print(&node.duplicate(false).ok()?, false, self.encoding).ok()?),
        };
        Some(Edit { target: restconf_path(path), op, value })
    }

    fn engine_edit(&self, change: &StateChange) -> Option<Edit> {
        let ctx = crate::yang::context();
        let mut tree = DataTree::new(ctx);
        if let StateChange::Subtree { path, leaves } = change {
            set(&mut tree, path, None).ok()?;
            return match leaves {
                Some(leaves) => {
                    for (name, v) in leaves {
                        set(&mut tree, &format!("{path}/{name}"), Some(v)).ok()?;
                    }
                    self.edit(tree, path, EditOp::Replace)
                }
                None => self.edit(tree, path, EditOp::Delete),
            };
        }
        let (base, leaves) = match change {
            StateChange::Sci { csci_id, leaves } => {
                (format!("{ROOT}/metric-cache/entry[csci-id={}]", quote(csci_id)), leaves)
            }
            StateChange::Service { cs_id, leaves } => {
                (format!("{ROOT}/services/service[cs-id={}]", quote(cs_id)), leaves)
            }
            StateChange::Subtree { .. } => return None,
        };
        set(&mut tree, &base, None).ok()?;
        match leaves {
            Some(leaves) => {
                for (name, v) in leaves {
                    set(&mut tree, &format!("{base}/{name}"), Some(v)).ok()?;
                }
                self.edit(tree, &base, EditOp::Replace)
            }
            None => self.edit(tree, &base, EditOp::Delete),
        }
    }
}

impl View for DatastoreView {
    fn snapshot(&self) -> Result<String, RpcError> {
        use crate::datastore::render::{read_typed, Format, Options};
        use crate::datastore::select::Selection;
        let sel = match &self.selection {
            None => Selection::all(),
            Some(Filter::Subtree(el, _)) => Selection::from_subtree(el),
            Some(Filter::XPath(x)) => Selection::from_xpath(x),
        };
        if self.datastore == Datastore::Operational {
            if let Some(access) = self.nacm.read_access(&self.user) {
                let json = self.encoding != Encoding::Xml;
                let opts = Options {
                    format: if json { Format::Json } else { Format::Xml },
                    skip: 0,
                    max_depth: None,
                    with_defaults: crate::mgmt::with_defaults::WithDefaults::Explicit,
                };
                if let Some(body) = read_typed(&self.datastores, &sel, &access, opts)? {
                    return Ok(if json { format!("{{{body}}}") } else { body });
                }
            }
        }
        let tree = self.nacm.readable(&self.user, self.datastores.read_covering(self.datastore, &sel)?);
        print(apply(self.selection.as_ref(), tree)?.tree(), true, self.encoding)
    }

    fn edits(&self, batch: &Batch) -> Vec<Edit> {
        match batch {
            Batch::Engine(set) => {
                if self.datastore != Datastore::Operational {
                    return Vec::new();
                }
                let unrestricted = self.nacm.read_is_unrestricted(&self.user, &DataTree::new(crate::yang::context()));
                set.changes
                    .iter()
                    .filter_map(|c| {
                        let whole = match c {
                            StateChange::Sci { .. } => self.whole.0,
                            StateChange::Service { .. } => self.whole.1,
                            StateChange::Subtree { .. } => false,
                        };
                        if whole && unrestricted && self.encoding == Encoding::Xml {
                            Self::direct_edit(c)
                        } else if whole && unrestricted {
                            Self::direct_edit_json(c).or_else(|| self.engine_edit(c))
                        } else {
                            self.engine_edit(c)
                        }
                    })
                    .collect()
            }
            Batch::Running(edits) => edits
                .iter()
                .filter_map(|e| {
                    let op = match e.op {
                        ChangeOp::Create => EditOp::Create,
                        ChangeOp::Delete => EditOp::Delete,
                        ChangeOp::Modify => EditOp::Replace,
                        ChangeOp::Move => EditOp::Move,
                    };
                    let tree = e.tree.duplicate().ok()?;
                    self.edit(tree, &e.path, op)
                })
                .collect(),
        }
    }
}

/// A selection applied to readable data (none: all of it).
fn apply(selection: Option<&Filter>, tree: Readable) -> Result<Readable, RpcError> {
    match selection {
        None => Ok(tree),
        Some(Filter::Subtree(el, _)) => subtree::apply(el, &tree),
        Some(Filter::XPath(x)) => xpath::apply(x, &tree),
    }
}

/// Whether an on-change selection can see any object this server reports changes of: all
/// of running, and in operational the configuration plus the metric cache entries and
/// services (the rest of operational, counters and session lists, is not on-change
/// capable). Probed by filtering a sample tree.
pub fn selects_on_change_objects(selection: &Filter, datastore: Datastore) -> bool {
    if datastore == Datastore::Running {
        return true;
    }
    let ctx = crate::yang::context();
    let mut tree = DataTree::new(ctx);
    let entry = format!("{ROOT}/metric-cache/entry[csci-id='probe']");
    let service = format!("{ROOT}/services/service[cs-id='probe']");
    let stats = format!("{ROOT}/statistics/reports-received");
    let mut ok = set(&mut tree, &entry, None).is_ok() && set(&mut tree, &service, None).is_ok();
    for (leaf, v) in [("gas", "0"), ("computing-time", "0"), ("health", "healthy"), ("state", "active")] {
        ok &= set(&mut tree, &format!("{entry}/{leaf}"), Some(v)).is_ok();
    }
    for (leaf, v) in [("site-gas", "0"), ("computing-time", "0"), ("health", "healthy"), ("sci-count", "0")] {
        ok &= set(&mut tree, &format!("{service}/{leaf}"), Some(v)).is_ok();
    }
    ok &= set(&mut tree, &stats, Some("0")).is_ok();
    // The IP-layer metrics pushed on change (`ipm::changes`).
    let ipm = format!("{ROOT}/cats-ip-metrics:ip-metrics/application[application-id='192.0.2.1']/site[site-id='probe']/measurement/last-interval/load-index");
    ok &= set(&mut tree, &ipm, Some("0")).is_ok();
    if !ok {
        return true;
    }
    let Ok(selected) = apply(Some(selection), Readable::synthetic(tree)) else { return false };
    let selected = selected.tree();
    let has = |p: &str| selected.find_path(p).is_ok();
    // Metric data is on-change capable; a selection of only the engine's counters is not
    // (they change with every report). Anything else (configuration) is.
    has(&entry) || has(&service) || has(&ipm) || !has(&stats)
}

/// Whether a selection takes every metric-cache entry and every service whole (all their
/// leaves, whatever their values): probed with two entries and two services of different
/// keys and values, each of which must come out complete.
fn selects_whole_objects(selection: &Filter) -> (bool, bool) {
    let ctx = crate::yang::context();
    let mut tree = DataTree::new(ctx);
    let entries = [("probe-a", "0", "healthy", "active"), ("probe-b", "7", "unhealthy", "stale")];
    let services = [("probe-a", "0", "healthy"), ("probe-b", "9", "degraded")];
    let mut ok = true;
    for (key, gas, health, state) in entries {
        let base = format!("{ROOT}/metric-cache/entry[csci-id='{key}']");
        for (leaf, v) in [("cs-id", key), ("gas", gas), ("computing-time", gas), ("health", health), ("state", state)] {
            ok &= set(&mut tree, &format!("{base}/{leaf}"), Some(v)).is_ok();
        }
    }
    for (key, gas, health) in services {
        let base = format!("{ROOT}/services/service[cs-id='{key}']");
        for (leaf, v) in [("site-gas", gas), ("computing-time", gas), ("health", health), ("sci-count", gas)] {
            ok &= set(&mut tree, &format!("{base}/{leaf}"), Some(v)).is_ok();
        }
    }
    if !ok {
        return (false, false);
    }
    let Ok(selected) = apply(Some(selection), Readable::synthetic(tree)) else { return (false, false) };
    let selected = selected.tree();
    let complete =
        |path: String, leaves: usize| selected.find_path(&path).is_ok_and(|n| n.children().count() == leaves);
    let all_entries = entries.iter().all(|(k, ..)| complete(format!("{ROOT}/metric-cache/entry[csci-id='{k}']"), 6));
    let all_services = services.iter().all(|(k, ..)| complete(format!("{ROOT}/services/service[cs-id='{k}']"), 5));
    (all_entries, all_services)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(selection: Option<Filter>) -> DatastoreView {
        let ctx = crate::yang::context();
        let ds = Arc::new(Datastores::open(ctx, None).expect("datastores"));
        DatastoreView::new(ds, Nacm::new(None), "admin".into(), Datastore::Operational, selection)
    }

    #[test]
    fn the_direct_edit_is_what_libyang_prints() {
        let v = view(None);
        let leaves = vec![
            ("cs-id", "AR1".to_owned()),
            ("gas", "400".to_owned()),
            ("computing-time", "5".to_owned()),
            ("health", "healthy".to_owned()),
            ("state", "active".to_owned()),
            ("flags", "smoothed gas-zeroed".to_owned()),
        ];
        let sci = StateChange::Sci { csci_id: "1.2.3.4:80".into(), leaves: Some(leaves) };
        assert_eq!(DatastoreView::direct_edit(&sci), v.engine_edit(&sci));
        let service = StateChange::Service {
            cs_id: "AR1".into(),
            leaves: Some(vec![
                ("site-gas", "10".to_owned()),
                ("health", "degraded".to_owned()),
                ("cats-sma-policy:reported-gas", "9".to_owned()),
            ]),
        };
        assert_eq!(DatastoreView::direct_edit(&service), v.engine_edit(&service));
        let gone = StateChange::Sci { csci_id: "a,b".into(), leaves: None };
        assert_eq!(DatastoreView::direct_edit(&gone), v.engine_edit(&gone));
    }

    #[test]
    fn seed004_policy_engine_on_change_renders_cost_reputation_security_label_and_discovery() {
        use crate::engine::core::{Core, Proof, Sender};
        use crate::engine::discovery::{self, DiscoveryConfig, DomainProof, Pattern, TrustDomain};
        // A discovered SCI reporting cost, reputation and label; a policy that bounds them.
        let mut core = Core::new(crate::engine::clock::Clock::new());
        let domain = TrustDomain {
            name: "pods".into(),
            proof: DomainProof::Certificate,
            pattern: Pattern::new("pod-[0-9]+").ok(),
            cs_id_claim: None,
            cs_ids: vec!["AR1".into()],
        };
        discovery::set_config(
            &mut core,
            DiscoveryConfig { enabled: true, domains: vec![domain], ..Default::default() },
        );
        let raw = crate::engine::report::RawReport {
            csci_id: "pod-1".into(),
            cs_id: "AR1".into(),
            sequence: 1,
            timestamp: chrono::Utc::now(),
            gas: 400,
            computing_time: 5,
            health: "HEALTHY".into(),
            cost: Some(120),
            reputation: Some(4),
            security_label: Some(6),
        };
        let sender = Sender {
            csci_id: Some("pod-1".into()),
            proof: Some(Proof::Certificate),
            transport: "http",
            ..Default::default()
        };
        core.ingest_from(&raw, &sender).unwrap();
        let cfg = crate::engine::policy::PolicyConfig {
            rules: vec![crate::engine::policy::RuleConfig::new("cap", 1, "Cost > 100", "SET Cost = 100")],
            ..Default::default()
        };
        core.set_policy(crate::engine::policy::Policy::compile(&cfg).unwrap());
        core.settle();
        let leaves = crate::engine::changes::service_leaves(&core, "AR1").unwrap();
        for (name, value) in [
            ("cost", "120"),
            ("reputation", "4"),
            ("security-label", "6"),
            ("cats-sma-policy:reported-cost", "100"),
            ("cats-sma-policy:reported-reputation", "4"),
            ("cats-sma-policy:reported-security-label", "6"),
        ] {
            assert!(leaves.iter().any(|(n, v)| *n == name && v == value), "{name}={value} in {leaves:?}");
        }
        // What a YANG-Push on-change subscriber receives is what libyang prints for them.
        let v = view(None);
        let service = StateChange::Service { cs_id: "AR1".into(), leaves: Some(leaves) };
        assert_eq!(DatastoreView::direct_edit(&service), v.engine_edit(&service));
        let leaves = crate::engine::changes::sci_leaves(&core, "pod-1").unwrap();
        assert!(leaves.iter().any(|(n, v)| *n == "discovered-by" && v == "pods"), "{leaves:?}");
        assert!(leaves.iter().any(|(n, _)| *n == "discovered-at"), "{leaves:?}");
        // (Times are left out: libyang prints their canonical form with +00:00.)
        let leaves =
            leaves.into_iter().filter(|(n, _)| !matches!(*n, "timestamp" | "discovered-at" | "last-state-change"));
        let sci = StateChange::Sci { csci_id: "pod-1".into(), leaves: Some(leaves.collect()) };
        assert_eq!(DatastoreView::direct_edit(&sci), v.engine_edit(&sci));
    }

    #[test]
    fn whole_object_selections_are_recognised() {
        let x = |s: &str| Some(Filter::XPath(s.into()));
        assert_eq!(view(None).whole, (true, true));
        assert_eq!(view(x("/cats-sma:cats-sma")).whole, (true, true));
        assert_eq!(view(x("/cats-sma:cats-sma/metric-cache/entry")).whole, (true, false));
        assert_eq!(view(x("/cats-sma:cats-sma/metric-cache/entry/gas")).whole, (false, false));
        assert_eq!(view(x("/cats-sma:cats-sma/metric-cache/entry[csci-id='probe-a']")).whole, (false, false));
        assert_eq!(view(x("/cats-sma:cats-sma/metric-cache/entry[gas='0']")).whole, (false, false));
    }
}

#[cfg(test)]
mod on_change_probe_tests {
    use super::*;

    #[test]
    fn rfc8641_on_change_probe_accepts_ip_metrics_and_still_refuses_statistics_only() {
        let stats = Filter::XPath("/cats-sma:cats-sma/statistics".into());
        assert!(!selects_on_change_objects(&stats, Datastore::Operational));
        let ipm = Filter::XPath("/cats-sma:cats-sma/cats-ip-metrics:ip-metrics/application".into());
        assert!(selects_on_change_objects(&ipm, Datastore::Operational));
    }
}
