//! The management core: what every management transport (NETCONF, RESTCONF, the
//! notification receivers) shares: the audit trail, and `auth_limits`, which bounds what a
//! peer costs before it has authenticated (connections, time, password checks) on every
//! listener. The users, sessions, event streams and the subscription registry move here
//! with the core restructure.

pub mod audit;
pub mod auth_limits;
