//! The engine's northbound: configuration in (datastore commits become typed engine
//! settings, `config.rs`), state out (the engine's typed state rendered into the
//! operational datastore, `state.rs`).

pub mod config;
pub mod metrics;
pub mod rpc;
pub mod state;
pub mod typed;
pub mod update_status;

use yang2::data::DataTree;

pub const ROOT: &str = "/cats-sma:cats-sma";

pub(crate) use crate::datastore::tree::leaf;

pub(crate) fn leaf_u64(tree: &DataTree<'static>, path: &str) -> Option<u64> {
    leaf(tree, path).and_then(|v| v.parse().ok())
}
