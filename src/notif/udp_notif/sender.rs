//! The UDP socket of one UDP-notif receiver instance: the message-id counter of that
//! receiver (draft-ietf-netconf-udp-notif section 3.2: starts at 1, one more per message,
//! wraps to 0), segmentation to the configured max-segment-size, and counters of what went
//! out and what could not.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tokio::net::UdpSocket;

use super::packet::{self, EncodeError, MediaType};
use crate::notif::{Encoding, Envelope, Notification};

/// max-segment-size when segmentation is enabled and the leaf is absent: a UDP-notif
/// segment that fits the IPv6 minimum MTU (1280) after the IPv6 and UDP headers, so no
/// path fragments it.
pub const DEFAULT_MAX_SEGMENT_SIZE: u16 = 1232;

/// The receiver-instance leaves the sender uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SenderConfig {
    pub remote: SocketAddr,
    /// The local address to send from (unspecified: the system picks).
    pub local: Option<SocketAddr>,
    /// The Message Publisher ID of the header.
    pub generator_id: u32,
    /// `enable-segmentation` (default true).
    pub segmentation: bool,
    /// `max-segment-size`; None: [`DEFAULT_MAX_SEGMENT_SIZE`].
    pub max_segment_size: Option<u16>,
}

/// What one receiver instance sent.
#[derive(Debug, Default)]
pub struct SenderCounters {
    /// Notification messages sent (whole or as all of their segments).
    pub messages: AtomicU64,
    /// Datagrams sent.
    pub datagrams: AtomicU64,
    /// Messages not sent because they cannot be encoded (too large unsegmented, too many
    /// segments).
    pub too_large: AtomicU64,
    /// Messages the socket refused (no route, ICMP port unreachable, ...).
    pub send_errors: AtomicU64,
}

/// Why one message did not go out.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("send: {0}")]
    Io(#[from] io::Error),
    #[error("the producer wrote no XML form of this notification")]
    NoXml,
}

pub struct Sender {
    socket: UdpSocket,
    config: SenderConfig,
    next_id: AtomicU32,
    pub counters: SenderCounters,
}

impl Sender {
    /// A socket connected to the receiver (so an ICMP error is reported on a later send).
    pub async fn bind(config: SenderConfig) -> io::Result<Sender> {
        let local = config.local.unwrap_or_else(|| match config.remote {
            SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
            SocketAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
        });
        let socket = UdpSocket::bind(local).await?;
        socket.connect(config.remote).await?;
        Ok(Sender { socket, config, next_id: AtomicU32::new(1), counters: SenderCounters::default() })
    }

    pub fn config(&self) -> &SenderConfig {
        &self.config
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    fn max_segment_size(&self) -> Option<u16> {
        self.config.segmentation.then(|| self.config.max_segment_size.unwrap_or(DEFAULT_MAX_SEGMENT_SIZE))
    }

    /// Sends one encoded message; answers its message id.
    pub async fn send(&self, media: MediaType, payload: &[u8]) -> Result<u32, SendError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let datagrams = match packet::encode(media, self.config.generator_id, id, payload, self.max_segment_size()) {
            Ok(d) => d,
            Err(e) => {
                self.counters.too_large.fetch_add(1, Ordering::Relaxed);
                return Err(e.into());
            }
        };
        for d in &datagrams {
            if let Err(e) = self.socket.send(d).await {
                self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                return Err(e.into());
            }
            self.counters.datagrams.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.messages.fetch_add(1, Ordering::Relaxed);
        Ok(id)
    }

    /// Renders `n` in `encoding` (JSON in the RFC 8040 section 6.4 envelope) and sends it.
    pub async fn send_notification(&self, n: &Notification, encoding: Encoding) -> Result<u32, SendError> {
        let payload = n.render(encoding, Envelope::Restconf).ok_or(SendError::NoXml)?;
        self.send(encoding.into(), &payload).await
    }
}
