//! The management core: what every management transport (NETCONF, RESTCONF, the
//! notification receivers) shares, and nothing specific to one of them.
//!
//! - `core.rs`: [`Core`], the shared state: datastores, users, NACM, sessions and their
//!   identities, statistics, the event streams, the YANG-Push registry, the agent's RPCs.
//! - `events.rs`: event streams with replay (RFC 5277) and the RFC 6470 base notifications.
//! - `filter/`: subtree (RFC 6241 section 6) and XPath selection, with their cost limits.
//! - `with_defaults.rs`: RFC 6243 retrieval modes.
//! - `confirmed_commit.rs`: RFC 6241 section 8.4 confirmed commits.
//! - `error.rs`: the XML encoding of rpc-errors (RFC 6241 section 4.3), shared by NETCONF and
//!   RESTCONF's XML error bodies.
//! - `audit.rs`: the audit trail; `auth_limits.rs`: what a peer costs before it has
//!   authenticated, on every listener.
//! - `ns.rs`: the shared XML namespaces.
//!
//! The subscription mechanics (RFC 8639 / 8641) live in `crate::push`, which depends on
//! this core and on no front end.

pub mod audit;
pub mod auth_limits;
pub mod confirmed_commit;
pub mod core;
pub mod error;
pub mod events;
pub mod filter;
pub mod metrics;
pub mod ns;
pub mod users;
pub mod with_defaults;

pub use self::core::{AppRpc, Core, SessionInfo, Statistics};
