//! UDP-notif (draft-ietf-netconf-udp-notif): notification messages in UDP datagrams, each
//! behind a small binary header, large messages cut into segments. `packet.rs` is the wire
//! format (pure encode and decode), `sender.rs` the socket of one receiver instance. DTLS
//! (the draft's `dtls` feature) is not supported: the agent sends in the clear, for
//! collection networks the operator trusts.

pub mod packet;
pub mod sender;

pub use packet::{MediaType, Segment};
pub use sender::{Sender, SenderConfig, SenderCounters};
