//! HTTPS-notif (draft-ietf-netconf-https-notif): the agent is an HTTPS client of each
//! receiver; it learns what the receiver takes by GET of `<path>/capabilities` and POSTs
//! each notification to `<path>/relay-notification`. `capabilities.rs` is the wire format
//! of the discovery (pure, fuzzed), `client.rs` the connection, queue and retries of one
//! receiver instance. Plain HTTP is not offered (the draft makes TCP without TLS a logical
//! impossibility).

pub mod capabilities;
pub mod client;

pub use capabilities::{Capabilities, CapabilityError};
pub use client::{Client, ClientConfig, ClientCounters, Link};
