//! One BGP session per neighbor (RFC 4271 section 8): connect (or wait on the listener for a
//! passive neighbor), OPEN exchange with capability checks, KEEPALIVE and hold timer, the
//! Adj-RIB-Out sent as UPDATEs, NOTIFICATION on every error, reconnect with backoff.
//!
//! Received UPDATEs are decoded (a malformed one ends the session with the NOTIFICATION its
//! error calls for) and discarded: the speaker only originates. A ROUTE-REFRESH is answered
//! by a full re-advertisement.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use chrono::{DateTime, Utc};
use netgauze_bgp_pkt::capabilities::BgpCapability;
use netgauze_bgp_pkt::codec::{BgpCodec, BgpCodecDecoderError};
use netgauze_bgp_pkt::nlri::BgpLsNlri;
use netgauze_bgp_pkt::notification::{
    BgpNotificationMessage, CeaseError, FiniteStateMachineError, HoldTimerExpiredError, MessageHeaderError,
    OpenMessageError,
};
use netgauze_bgp_pkt::BgpMessage;
use netgauze_iana::address_family::AddressType;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tokio_util::codec::Decoder;

use super::encode::{announce, describe_notification, open, to_bytes, withdraw, PeerParams, AS_TRANS, WITHDRAW_BATCH};
use super::rib::{Published, Route};
use crate::backoff::Backoff;
use crate::cps::session::lock;
use crate::engine::model::CsId;

/// RFC 4271 section 8: the hold timer while waiting for the neighbor's OPEN ("a large value",
/// 4 minutes suggested).
const OPEN_WAIT: Duration = Duration::from_secs(240);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest BGP message without the extended message capability (RFC 4271 section 4.1).
const MAX_MESSAGE: usize = 4096;
/// A session that stayed established this long resets the reconnect backoff.
const STABLE: Duration = Duration::from_secs(30);

/// YANG `session-state`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FsmState {
    #[default]
    Idle,
    Connect,
    Active,
    OpenSent,
    OpenConfirm,
    Established,
}

impl FsmState {
    pub fn yang(self) -> &'static str {
        match self {
            FsmState::Idle => "idle",
            FsmState::Connect => "connect",
            FsmState::Active => "active",
            FsmState::OpenSent => "open-sent",
            FsmState::OpenConfirm => "open-confirm",
            FsmState::Established => "established",
        }
    }
}

/// One neighbor (YANG `neighbor`), checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NeighborConfig {
    pub address: IpAddr,
    pub remote_as: u32,
    pub port: u16,
    pub passive: bool,
    /// RFC 2385 key (YANG `tcp-md5-key`).
    pub md5_key: Option<Md5Key>,
}

/// A TCP MD5 key; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Md5Key(pub Vec<u8>);

impl std::fmt::Debug for Md5Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Md5Key(..)")
    }
}

/// Connects to `addr`, signing with `key` (RFC 2385) when there is one.
async fn connect(addr: SocketAddr, key: Option<&Md5Key>) -> std::io::Result<TcpStream> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    if let Some(k) = key {
        super::md5::set_key(&socket, addr.ip(), Some(&k.0))?;
    }
    socket.connect(addr).await
}

/// What the operational state shows of a session.
#[derive(Clone, Debug, Default)]
pub struct Status {
    pub state: FsmState,
    pub established_since: Option<DateTime<Utc>>,
    pub transitions: u32,
    pub hold_time: Option<u16>,
    pub peer_id: Option<Ipv4Addr>,
    pub messages_in: u64,
    pub messages_out: u64,
    pub updates_in: u64,
    pub updates_out: u64,
    pub refreshes_in: u64,
    pub advertised: u32,
    pub withdrawals: u64,
    pub last_error: Option<String>,
}

/// A session up or down, for the `bgp-ls-session` notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionEvent {
    pub neighbor: IpAddr,
    pub up: bool,
    pub reason: Option<String>,
}

pub type EventFn = dyn Fn(&SessionEvent) + Send + Sync;

/// What every session of the speaker shares.
pub struct SessionParams {
    pub local_as: u32,
    pub router_id: Ipv4Addr,
    pub hold_time: u16,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    pub published: watch::Receiver<Arc<Published>>,
    pub events: Arc<EventFn>,
}

pub struct Neighbor {
    pub config: NeighborConfig,
    pub status: Mutex<Status>,
}

impl Neighbor {
    pub fn new(config: NeighborConfig) -> Neighbor {
        Neighbor { config, status: Mutex::new(Status::default()) }
    }

    pub fn status(&self) -> Status {
        lock(&self.status).clone()
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut lock(&self.status))
    }

    fn set_state(&self, s: FsmState) {
        self.update(|st| st.state = s);
    }
}

/// Why the speaker stops a session: the Cease subcode sent (RFC 4486).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The agent shuts down or the speaker is removed: 6/2 Administrative Shutdown.
    Shutdown,
    /// The neighbor was removed from the configuration: 6/3 Peer De-configured.
    Deconfigured,
    /// A setting every session depends on changed: 6/6 Other Configuration Change.
    Reconfigured,
}

impl Stop {
    fn cease(self) -> BgpNotificationMessage {
        let value = Box::new([]);
        BgpNotificationMessage::CeaseError(match self {
            Stop::Shutdown => CeaseError::AdministrativeShutdown { value },
            Stop::Deconfigured => CeaseError::PeerDeConfigured { value },
            Stop::Reconfigured => CeaseError::OtherConfigurationChange { value },
        })
    }
}

pub type StopRx = watch::Receiver<Option<Stop>>;

fn stop_reason(stop: &StopRx) -> Stop {
    stop.borrow().unwrap_or(Stop::Shutdown)
}

/// Why a connection ended.
enum End {
    /// Stopped by the speaker: Cease sent.
    Stopped {
        was_established: bool,
        reason: String,
    },
    Down {
        reason: String,
        established_for: Option<Duration>,
    },
}

/// The session task: connections one after the other until `stop`.
pub async fn run(
    n: Arc<Neighbor>,
    params: Arc<SessionParams>,
    mut incoming: mpsc::Receiver<TcpStream>,
    mut stop: StopRx,
) {
    let mut backoff = Backoff::new(params.retry_initial, params.retry_max);
    loop {
        let stream = if n.config.passive {
            n.set_state(FsmState::Active);
            tokio::select! {
                s = incoming.recv() => match s { Some(s) => Ok(s), None => return },
                _ = stop.changed() => return,
            }
        } else {
            n.set_state(FsmState::Connect);
            let addr = SocketAddr::new(n.config.address, n.config.port);
            tokio::select! {
                r = timeout(CONNECT_TIMEOUT, connect(addr, n.config.md5_key.as_ref())) => match r {
                    Ok(Ok(s)) => Ok(s),
                    Ok(Err(e)) => Err(format!("connect to {addr}: {e}")),
                    Err(_) => Err(format!("connect to {addr}: no answer in {} s", CONNECT_TIMEOUT.as_secs())),
                },
                _ = stop.changed() => return,
            }
        };
        let reason = match stream {
            Ok(s) => match connection(&n, &params, s, &mut stop).await {
                End::Stopped { was_established, reason } => {
                    if was_established {
                        (params.events)(&SessionEvent { neighbor: n.config.address, up: false, reason: Some(reason) });
                    }
                    n.update(|st| *st = Status { state: FsmState::Idle, ..std::mem::take(st) });
                    return;
                }
                End::Down { reason, established_for } => {
                    if established_for.is_some_and(|d| d >= STABLE) {
                        backoff.reset();
                    }
                    if established_for.is_some() {
                        (params.events)(&SessionEvent {
                            neighbor: n.config.address,
                            up: false,
                            reason: Some(reason.clone()),
                        });
                    }
                    reason
                }
            },
            Err(e) => e,
        };
        tracing::info!(neighbor = %n.config.address, "BGP-LS session down: {reason}");
        n.update(|st| {
            st.state = FsmState::Idle;
            st.last_error = Some(reason);
            st.established_since = None;
            st.advertised = 0;
        });
        let wait = backoff.fail();
        tokio::select! {
            _ = sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One TCP connection, from OPEN to its end.
struct Conn<'a> {
    n: &'a Neighbor,
    wr: OwnedWriteHalf,
    write_timeout: Duration,
}

impl Conn<'_> {
    async fn send(&mut self, msg: &BgpMessage) -> Result<(), String> {
        let bytes = to_bytes(msg)?;
        match timeout(self.write_timeout, self.wr.write_all(&bytes)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("write: {e}")),
            Err(_) => return Err(format!("write: the neighbor took no data for {} s", self.write_timeout.as_secs())),
        }
        self.n.update(|st| {
            st.messages_out += 1;
            if matches!(msg, BgpMessage::Update(_)) {
                st.updates_out += 1;
            }
        });
        Ok(())
    }

    /// Sends `n` when there is one (a malformed NOTIFICATION is not answered) and gives
    /// the reason the session ends with.
    async fn fail(&mut self, n: Option<BgpNotificationMessage>) -> String {
        match n {
            Some(n) => self.notify(n).await,
            None => {
                let _ = self.wr.shutdown().await;
                "a malformed NOTIFICATION was received: connection closed".into()
            }
        }
    }

    /// Sends `n` and gives the reason the session ends with.
    async fn notify(&mut self, n: BgpNotificationMessage) -> String {
        let text = format!("NOTIFICATION sent: {}", describe_notification(&n));
        let _ = self.send(&BgpMessage::Notification(n)).await;
        let _ = self.wr.shutdown().await;
        text
    }
}

/// The next message in `buf` (RFC 4271 section 6.1 header checks first, then NetGauze),
/// as the session reads it (also the `bgp_message` fuzz target's entry point), or None
/// when more bytes are needed. The error is the NOTIFICATION to answer with, or None for a
/// malformed NOTIFICATION (closed without one: a NOTIFICATION is never answered).
pub(crate) fn next_message(
    codec: &mut BgpCodec,
    buf: &mut BytesMut,
) -> Result<Option<BgpMessage>, Option<BgpNotificationMessage>> {
    if buf.len() < 19 {
        return Ok(None);
    }
    if buf[..16].iter().any(|b| *b != 0xff) {
        return Err(Some(BgpNotificationMessage::MessageHeaderError(MessageHeaderError::ConnectionNotSynchronized {
            value: Box::new([]),
        })));
    }
    let len = u16::from_be_bytes([buf[16], buf[17]]) as usize;
    if !(19..=MAX_MESSAGE).contains(&len) {
        return Err(Some(BgpNotificationMessage::MessageHeaderError(MessageHeaderError::BadMessageLength {
            value: (len as u16).to_be_bytes().into(),
        })));
    }
    let is_notification = buf[18] == 3;
    match codec.decode(buf) {
        Ok(Some((m, _))) => Ok(Some(m)),
        Ok(None) => Ok(None),
        Err(_) if is_notification => Err(None),
        Err(BgpCodecDecoderError::BgpMessageParsingError(e)) => Err(Some(BgpNotificationMessage::from(e))),
        Err(e) => Err(Some(BgpNotificationMessage::MessageHeaderError(MessageHeaderError::Unspecific {
            value: e.to_string().into_bytes().into(),
        }))),
    }
}

fn fsm_error(state: FsmState) -> BgpNotificationMessage {
    let value = Box::new([]);
    BgpNotificationMessage::FiniteStateMachineError(match state {
        FsmState::OpenSent => FiniteStateMachineError::ReceiveUnexpectedMessageInOpenSentState { value },
        FsmState::OpenConfirm => FiniteStateMachineError::ReceiveUnexpectedMessageInOpenConfirmState { value },
        FsmState::Established => FiniteStateMachineError::ReceiveUnexpectedMessageInEstablishedState { value },
        _ => FiniteStateMachineError::Unspecific { value },
    })
}

/// Checks the neighbor's OPEN (RFC 4271 section 6.2, RFC 6793, RFC 4760, RFC 5492);
/// returns the negotiated hold time.
fn check_open(
    o: &netgauze_bgp_pkt::open::BgpOpenMessage,
    cfg: &NeighborConfig,
    params: &SessionParams,
) -> Result<u16, BgpNotificationMessage> {
    let caps = o.capabilities();
    let asn4 = caps.iter().find_map(|c| match c {
        BgpCapability::FourOctetAs(a) => Some(a.asn4()),
        _ => None,
    });
    let peer_as = asn4.unwrap_or(o.my_as() as u32);
    if o.version() != 4 {
        return Err(BgpNotificationMessage::OpenMessageError(OpenMessageError::UnsupportedVersionNumber {
            value: 4u16.to_be_bytes().into(),
        }));
    }
    if peer_as != cfg.remote_as || (asn4.is_some() && o.my_as() != AS_TRANS && o.my_as() as u32 != peer_as) {
        return Err(BgpNotificationMessage::OpenMessageError(OpenMessageError::BadPeerAs { value: Box::new([]) }));
    }
    let id = o.bgp_id();
    if id.is_unspecified() || (peer_as == params.local_as && id == params.router_id) {
        return Err(BgpNotificationMessage::OpenMessageError(OpenMessageError::BadBgpIdentifier {
            value: Box::new([]),
        }));
    }
    if o.hold_time() == 1 || o.hold_time() == 2 {
        return Err(BgpNotificationMessage::OpenMessageError(OpenMessageError::UnacceptableHoldTime {
            value: Box::new([]),
        }));
    }
    let ls = caps
        .iter()
        .any(|c| matches!(c, BgpCapability::MultiProtocolExtensions(m) if m.address_type() == AddressType::BgpLs));
    if !ls || asn4.is_none() {
        // RFC 5492 section 3: the capabilities this speaker needs, in the data field.
        let mut data = Vec::new();
        if !ls {
            data.extend_from_slice(&[1, 4, 0x40, 0x04, 0, 71]);
        }
        if asn4.is_none() {
            data.extend_from_slice(&[65, 4]);
            data.extend_from_slice(&params.local_as.to_be_bytes());
        }
        return Err(BgpNotificationMessage::OpenMessageError(OpenMessageError::UnsupportedCapability {
            value: data.into(),
        }));
    }
    Ok(o.hold_time().min(params.hold_time))
}

async fn connection(n: &Neighbor, params: &SessionParams, stream: TcpStream, stop: &mut StopRx) -> End {
    let down = |reason: String| End::Down { reason, established_for: None };
    let _ = stream.set_nodelay(true);
    let local = match stream.local_addr() {
        // A dual-stack listener's IPv4 connection: the next hop is the IPv4 address.
        Ok(a) => match a.ip() {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        },
        Err(e) => return down(format!("socket: {e}")),
    };
    let (mut rd, wr) = stream.into_split();
    let mut c = Conn { n, wr, write_timeout: Duration::from_secs(u64::from(params.hold_time.max(30))) };
    let mut codec = BgpCodec::new(true);
    let mut buf = BytesMut::with_capacity(MAX_MESSAGE);
    if let Err(e) = c.send(&open(params.local_as, params.hold_time, params.router_id)).await {
        return down(e);
    }
    n.set_state(FsmState::OpenSent);

    // OpenSent, then OpenConfirm: each waits for one message.
    let mut hold = None;
    let mut deadline = Instant::now() + OPEN_WAIT;
    loop {
        let state = n.status().state;
        let msg = tokio::select! {
            r = read_one(&mut rd, &mut codec, &mut buf, deadline) => r,
            _ = stop.changed() => {
                let reason = c.notify(stop_reason(stop).cease()).await;
                return End::Stopped { was_established: false, reason };
            }
        };
        let msg = match msg {
            Ok(m) => m,
            Err(ReadError::Malformed(note)) => return down(c.fail(note).await),
            Err(ReadError::HoldExpired) => return down(c.notify(hold_expired()).await),
            Err(ReadError::Closed(e)) => return down(e),
        };
        n.update(|st| st.messages_in += 1);
        match (state, msg) {
            (_, BgpMessage::Notification(note)) => {
                return down(format!("NOTIFICATION received: {}", describe_notification(&note)));
            }
            (FsmState::OpenSent, BgpMessage::Open(o)) => match check_open(&o, &n.config, params) {
                Ok(h) => {
                    hold = Some(h);
                    n.update(|st| {
                        st.peer_id = Some(o.bgp_id());
                        st.hold_time = Some(h);
                    });
                    if let Err(e) = c.send(&BgpMessage::KeepAlive).await {
                        return down(e);
                    }
                    n.set_state(FsmState::OpenConfirm);
                    deadline = Instant::now() + if h == 0 { OPEN_WAIT } else { Duration::from_secs(h.into()) };
                }
                Err(note) => return down(c.notify(note).await),
            },
            (FsmState::OpenConfirm, BgpMessage::KeepAlive) => break,
            (state, _) => return down(c.notify(fsm_error(state)).await),
        }
    }
    let hold = Duration::from_secs(hold.unwrap_or(0).into());
    let up_at = Instant::now();
    n.update(|st| {
        st.state = FsmState::Established;
        st.transitions = st.transitions.saturating_add(1);
        st.established_since = Some(Utc::now());
        st.last_error = None;
    });
    tracing::info!(neighbor = %n.config.address, hold_s = hold.as_secs(), "BGP-LS session established");
    (params.events)(&SessionEvent { neighbor: n.config.address, up: true, reason: None });
    let end = established(&mut c, params, &mut rd, &mut codec, &mut buf, hold, local, stop).await;
    match end {
        Ok(reason) => End::Stopped { was_established: true, reason },
        Err(reason) => End::Down { reason, established_for: Some(up_at.elapsed()) },
    }
}

enum ReadError {
    Malformed(Option<BgpNotificationMessage>),
    HoldExpired,
    Closed(String),
}

/// Reads until one whole message is in `buf` or `deadline` passes.
async fn read_one(
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    codec: &mut BgpCodec,
    buf: &mut BytesMut,
    deadline: Instant,
) -> Result<BgpMessage, ReadError> {
    loop {
        match next_message(codec, buf) {
            Ok(Some(m)) => return Ok(m),
            Ok(None) => {}
            Err(n) => return Err(ReadError::Malformed(n)),
        }
        tokio::select! {
            r = rd.read_buf(buf) => match r {
                Ok(0) => return Err(ReadError::Closed("the neighbor closed the connection".into())),
                Ok(_) => {}
                Err(e) => return Err(ReadError::Closed(format!("read: {e}"))),
            },
            _ = sleep_until(deadline) => return Err(ReadError::HoldExpired),
        }
    }
}

fn hold_expired() -> BgpNotificationMessage {
    BgpNotificationMessage::HoldTimerExpiredError(HoldTimerExpiredError::Unspecific {
        sub_code: 0,
        value: Box::new([]),
    })
}

/// The Established state: the Adj-RIB-Out kept in step with the published routes, the
/// timers, and what the neighbor sends. Ok: stopped (Cease sent), with the reason.
#[allow(clippy::too_many_arguments)]
async fn established(
    c: &mut Conn<'_>,
    params: &SessionParams,
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    codec: &mut BgpCodec,
    buf: &mut BytesMut,
    hold: Duration,
    local: IpAddr,
    stop: &mut StopRx,
) -> Result<String, String> {
    let peer = PeerParams { local_as: params.local_as, ebgp: c.n.config.remote_as != params.local_as, next_hop: local };
    let mut published = params.published.clone();
    let mut sent: BTreeMap<CsId, Arc<Route>> = BTreeMap::new();
    let far = Duration::from_secs(86_400 * 365);
    let (hold, keepalive) = if hold.is_zero() { (far, far) } else { (hold, hold / 3) };
    let mut hold_at = Instant::now() + hold;
    let mut keepalive_at = Instant::now() + keepalive;
    let mut resend = true;
    loop {
        if resend {
            resend = false;
            let now = published.borrow_and_update().clone();
            sync(c, &peer, &mut sent, &now).await?;
            keepalive_at = Instant::now() + keepalive;
        }
        // Whole messages already buffered first.
        match next_message(codec, buf) {
            Ok(Some(m)) => {
                hold_at = Instant::now() + hold;
                c.n.update(|st| st.messages_in += 1);
                match m {
                    BgpMessage::KeepAlive => {}
                    BgpMessage::Update(_) => c.n.update(|st| st.updates_in += 1),
                    BgpMessage::RouteRefresh(r) => {
                        c.n.update(|st| st.refreshes_in += 1);
                        if r.address_type() == AddressType::BgpLs {
                            sent.clear();
                            resend = true;
                        }
                    }
                    BgpMessage::Notification(note) => {
                        return Err(format!("NOTIFICATION received: {}", describe_notification(&note)))
                    }
                    BgpMessage::Open(_) => return Err(c.notify(fsm_error(FsmState::Established)).await),
                }
                continue;
            }
            Ok(None) => {}
            Err(note) => return Err(c.fail(note).await),
        }
        tokio::select! {
            // What the neighbor sent first: after a long write its KEEPALIVEs may be
            // waiting while the hold timer is due too.
            biased;
            r = rd.read_buf(buf) => match r {
                Ok(0) => return Err("the neighbor closed the connection".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("read: {e}")),
            },
            _ = stop.changed() => return Ok(c.notify(stop_reason(stop).cease()).await),
            r = published.changed() => {
                if r.is_err() {
                    return Ok(c.notify(Stop::Shutdown.cease()).await);
                }
                resend = true;
            }
            _ = sleep_until(hold_at) => return Err(c.notify(hold_expired()).await),
            _ = sleep_until(keepalive_at) => {
                c.send(&BgpMessage::KeepAlive).await?;
                keepalive_at = Instant::now() + keepalive;
            }
        }
    }
}

/// Sends what changed between `sent` and `now`: withdrawals first (batched), then one
/// UPDATE per new or changed route.
async fn sync(
    c: &mut Conn<'_>,
    peer: &PeerParams,
    sent: &mut BTreeMap<CsId, Arc<Route>>,
    now: &Published,
) -> Result<(), String> {
    let mut gone: Vec<BgpLsNlri> = Vec::new();
    let mut new: Vec<Arc<Route>> = Vec::new();
    for (cs, r) in now {
        match sent.get(cs) {
            Some(old) if Arc::ptr_eq(old, r) => {}
            Some(old) => {
                if old.nlri != r.nlri {
                    gone.push(old.nlri.clone());
                }
                new.push(r.clone());
            }
            None => new.push(r.clone()),
        }
    }
    for (cs, old) in sent.iter() {
        if !now.contains_key(cs) {
            gone.push(old.nlri.clone());
        }
    }
    let withdrawn = gone.len() as u64;
    for chunk in gone.chunks(WITHDRAW_BATCH) {
        c.send(&withdraw(chunk.to_vec())).await?;
    }
    for r in &new {
        c.send(&announce(peer, r.nlri.clone(), r.attribute.clone())).await?;
    }
    *sent = now.clone();
    let count = sent.len().min(u32::MAX as usize) as u32;
    c.n.update(|st| {
        st.withdrawals += withdrawn;
        st.advertised = count;
    });
    Ok(())
}
