//! What one datastore subscription sees: a full snapshot for push-update, and the YANG
//! Patch edits of a batch of typed changes for push-change-update. Both go through the
//! subscription's selection filter and the subscriber's NACM read rules (RFC 8641 section
//! 3.9: a node the receiver may not read is never pushed).

use std::sync::Arc;

use yang2::data::{Data, DataFormat, DataPrinterFlags, DataTree};

use super::encode::{restconf_path, Edit};
use super::params::{EditOp, Filter};
use crate::datastore::tree::{quote, set};
use crate::datastore::{ChangeOp, Datastore, Datastores};
use crate::engine::changes::{ChangeSet, StateChange};
use crate::error::RpcError;
use crate::nacm::Nacm;
use crate::netconf::filter::{subtree, xpath};

const ROOT: &str = "/cats-sma:cats-sma";

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
}

fn print(tree: &DataTree<'static>, siblings: bool) -> Result<String, RpcError> {
    let mut flags = DataPrinterFlags::SHRINK | DataPrinterFlags::WD_EXPLICIT;
    if siblings {
        flags |= DataPrinterFlags::WITH_SIBLINGS;
    }
    if tree.reference().is_none() {
        return Ok(String::new());
    }
    Ok(tree.print_string(DataFormat::XML, flags).map_err(|e| RpcError::from_libyang(&e))?.unwrap_or_default())
}

impl DatastoreView {
    /// Applies the selection filter and NACM to a tree.
    fn select(&self, tree: DataTree<'static>) -> Result<DataTree<'static>, RpcError> {
        let mut tree = match &self.selection {
            None => tree,
            Some(Filter::Subtree(el, _)) => subtree::apply(el, &tree)?,
            Some(Filter::XPath(x)) => xpath::apply(x, &tree)?,
        };
        self.nacm.filter_read(&self.user, &mut tree);
        Ok(tree)
    }

    /// The edit for the node at `path` of `tree` after selection, if any of it is left.
    fn edit(&self, tree: DataTree<'static>, path: &str, op: EditOp) -> Option<Edit> {
        let tree = self.select(tree).ok()?;
        let node = tree.find_path(path).ok()?;
        let value = match op {
            EditOp::Delete => None,
            _ => Some(print(&node.duplicate(false).ok()?, false).ok()?),
        };
        Some(Edit { target: restconf_path(path), op, value })
    }

    fn engine_edit(&self, change: &StateChange) -> Option<Edit> {
        let ctx = crate::yang::context();
        let mut tree = DataTree::new(ctx);
        let (base, leaves) = match change {
            StateChange::Sci { csci_id, leaves } => {
                (format!("{ROOT}/metric-cache/entry[csci-id={}]", quote(csci_id)), leaves)
            }
            StateChange::Service { cs_id, leaves } => {
                (format!("{ROOT}/services/service[cs-id={}]", quote(cs_id)), leaves)
            }
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
        let xp = match &self.selection {
            Some(Filter::XPath(x)) => Some(x.as_str()),
            _ => None,
        };
        let tree = self.datastores.read(self.datastore, xp)?;
        let mut tree = match &self.selection {
            Some(Filter::Subtree(el, _)) => subtree::apply(el, &tree)?,
            _ => tree,
        };
        self.nacm.filter_read(&self.user, &mut tree);
        print(&tree, true)
    }

    fn edits(&self, batch: &Batch) -> Vec<Edit> {
        match batch {
            Batch::Engine(set) => {
                if self.datastore != Datastore::Operational {
                    return Vec::new();
                }
                set.changes.iter().filter_map(|c| self.engine_edit(c)).collect()
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
    if !ok {
        return true;
    }
    let selected = match selection {
        Filter::Subtree(el, _) => subtree::apply(el, &tree),
        Filter::XPath(x) => xpath::apply(x, &tree),
    };
    let Ok(selected) = selected else { return false };
    let has = |p: &str| selected.find_path(p).is_ok();
    // Metric data is on-change capable; a selection of only the engine's counters is not
    // (they change with every report). Anything else (configuration) is.
    has(&entry) || has(&service) || !has(&stats)
}
