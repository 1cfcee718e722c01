//! The management core: what every management transport (NETCONF, RESTCONF, the
//! notification receivers) shares. `auth_limits` bounds what a peer costs before it has
//! authenticated (connections, time, password checks) on every listener.

pub mod auth_limits;
