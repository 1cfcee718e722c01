//! The management core: what every management transport (NETCONF, RESTCONF, the
//! notification receivers) shares. Today it holds the audit trail; the users, sessions,
//! event streams and the subscription registry move here with the core restructure.

pub mod audit;
