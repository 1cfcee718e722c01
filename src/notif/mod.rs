//! The notification transports of configured subscriptions (RFC 8639 section 2.5): the
//! agent sends to receivers it was configured with, instead of answering a session.
//! `encoding.rs` names the encodings and their media types, `json.rs` writes the JSON
//! form of the YANG-Push and subscription state notifications (RFC 7951, RFC 8040
//! section 6.4), `udp_notif/` is draft-ietf-netconf-udp-notif and `https_notif/` is
//! draft-ietf-netconf-https-notif. Each transport keeps the wire format (pure, fuzzable)
//! apart from its I/O.

pub mod encoding;
pub mod https_notif;
pub mod json;
pub mod udp_notif;

pub use encoding::{Encoding, Envelope, Notification};
