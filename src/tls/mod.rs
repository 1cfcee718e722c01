//! TLS shared by the agent's transports. Server side, for RESTCONF, the SCI HTTP listener
//! and NETCONF over TLS (seed 004, SCI Authentication: client certificates validated
//! against trusted CAs, the certificate mapped to the identity it may speak for, revocation
//! by CRL; RFC 7589): `server.rs` builds and reloads the rustls configuration and
//! classifies handshake failures; `cert_to_name.rs` is RFC 7589 / RFC 7407 cert-to-name;
//! `crl.rs` reads CRL files; `yang.rs` reads a TLS container of the YANG model. Client
//! side, for the agent's own SCI connections (HTTPS pull, MQTT to the broker): `client.rs`.

pub mod cert_to_name;
pub mod client;
pub mod crl;
pub mod server;
pub mod yang;

pub use cert_to_name::{CertToName, Entry, Fingerprint, MapType, Mapped};
pub use server::{ClientAuth, Failure, Listener, Peer, Refused, ServerTls, Status, TlsSettings};
