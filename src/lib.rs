//! cats-sma: a CATS Service Metric Agent (C-SMA) managed as a NETCONF/YANG-Push agent.
//!
//! The management plane (datastores, NETCONF, RESTCONF, YANG-Push) sits on libyang trees;
//! the metric engine underneath keeps typed state and is driven by datastore commits.

// RpcError (tag, type, path, message, error-info) is returned on the cold path only; boxing
// it would make every error site noisier for no measurable gain.
#![allow(clippy::result_large_err)]

pub mod agent;
pub mod backoff;
pub mod config;
pub mod cps;
pub mod datastore;
pub mod engine;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod hierarchy;
pub mod ipm;
pub mod mgmt;
pub mod nacm;
pub mod netconf;
pub mod notif;
pub mod overload;
pub mod push;
pub mod record;
pub mod restconf;
pub mod routing;
pub mod sim;
#[doc(hidden)]
pub mod testing;
pub mod text;
pub mod tls;
pub mod xml;
pub mod yang;
