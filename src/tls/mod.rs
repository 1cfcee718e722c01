//! TLS shared by the agent's transports.

pub mod client;
