//! A NETCONF client over SSH (RFC 6241, RFC 6242) for the coordinator role: one session
//! to a subordinate C-SMA, whose replies are matched by message-id and whose YANG-Push
//! notifications (RFC 8641 over RFC 8640) are handed over whole for `decode.rs`.
//!
//! The subordinate is a peer that may be another implementation or a compromised agent,
//! so nothing it says is trusted further than it must be: its host key is checked against
//! a pin at the first key exchange and at every re-key (never trust on first use), every
//! step of setting the session up is bounded in time, every message it sends is bounded
//! in size by the framing decoder, and the few messages read here (hello, rpc-reply) are
//! walked once with quick-xml's namespace-resolving reader, building nothing but what is
//! kept. Anything malformed ends the session as a protocol error; the caller's answer to
//! that is a new session, whose push-update brings its view back to a known state.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use quick_xml::events::{BytesRef, BytesStart, Event};
use quick_xml::name::{Namespace, PrefixDeclaration, ResolveResult};
use quick_xml::{NsReader, XmlVersion};
use russh::client;
use russh::keys::ssh_key::Fingerprint;
use russh::keys::{
    load_secret_key, parse_public_key_base64, HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate,
};
use russh::{Channel, ChannelMsg};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::mgmt::events::NS_NOTIFICATION;
use crate::netconf::framing::{encode, Decoder, Framing, FramingError, EOM};
use crate::netconf::{CAP_BASE_10, CAP_BASE_11, NS_BASE};
use crate::push::{NS_DS, NS_SN, NS_YP};
use crate::text::printable;
use crate::xml::{escape_attr, escape_text, is_xml_char};

/// Notifications kept while an rpc waits for its reply. A subscription pushing faster
/// than the session answers is not a reason to buffer without bound: past this many the
/// session is given up, and the caller's resynchronisation on a new one is cheaper than
/// the memory.
const MAX_QUEUED: usize = 1024;
/// Namespace bindings in scope at once while reading a message: quick-xml resolves a
/// prefix by scanning them, so this bounds the work per element (real messages use a
/// handful).
const MAX_BINDINGS: usize = 64;
/// The longest text kept of one leaf (a capability URI, an error-message): a real one is
/// far shorter, and what is kept ends up in logs and the operational state.
const MAX_TEXT: usize = 64 * 1024;
/// SSH keepalives: a subscription can be silent for long, and without them a subordinate
/// that vanished (powered off, partitioned) would leave the session waiting for ever on
/// a connection TCP still believes open. Three unanswered at this interval end it.
const KEEPALIVE: Duration = Duration::from_secs(15);
const KEEPALIVE_MAX: usize = 3;

/// How the coordinator proves itself to the subordinate (the methods our server accepts:
/// RFC 4252 password and publickey).
#[derive(Clone)]
pub enum ClientAuth {
    Password(String),
    /// An unencrypted OpenSSH (or PEM) private key file: the coordinator runs unattended,
    /// so there is nobody to ask for a passphrase.
    PrivateKey(std::path::PathBuf),
}

/// How the subordinate's SSH host key is verified: never trust on first use.
#[derive(Clone)]
pub enum HostKeyPin {
    /// An OpenSSH public key line ("ssh-ed25519 AAAA… [comment]") or its base64 body.
    Key(String),
    /// "SHA256:<base64 without padding>" as `ssh-keygen -lf` prints it.
    Fingerprint(String),
}

/// Where a subordinate is and how to reach it.
#[derive(Clone)]
pub struct Target {
    /// An IP address (IPv6 with or without brackets) or a name, resolved at each connect so
    /// that a renumbered subordinate is found again.
    pub host: String,
    pub port: u16,
    pub username: String,
    pub auth: ClientAuth,
    pub host_key: HostKeyPin,
    /// Bounds each step of setting up a session (TCP connect, SSH handshake,
    /// authentication, subsystem, hello) separately, so a peer stalling in any of them
    /// cannot hold the coordinator's task.
    pub connect_timeout: Duration,
    /// The largest message accepted from the subordinate: a push-update carries its whole
    /// metric cache, so the caller sizes this from what it allows a subordinate to hold.
    pub max_message_size: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connect: {0}")]
    Connect(String),
    /// The server's key did not match the pin; carries the fingerprint it presented, so
    /// an operator can tell a re-keyed subordinate from an impostor.
    #[error("host key refused: {0}")]
    HostKey(String),
    #[error("authentication refused")]
    Auth,
    /// Bad hello, framing error, message too large, unexpected reply: the session cannot
    /// be trusted to be in step with the server any more, and is not used again.
    #[error("protocol: {0}")]
    Protocol(String),
    /// From an `<rpc-reply><rpc-error>`: the session itself is still sound.
    #[error("rpc-error: {tag}: {message}")]
    Rpc { tag: String, message: String },
    #[error("timed out: {0}")]
    Timeout(&'static str),
    #[error("session closed")]
    Closed,
}

/// Why a session cannot be used any more; kept so that every later call says so at once
/// instead of reading a stream that is no longer in step.
enum Dead {
    Closed,
    Protocol(String),
}

impl Dead {
    fn error(&self) -> ClientError {
        match self {
            Dead::Closed => ClientError::Closed,
            Dead::Protocol(m) => ClientError::Protocol(m.clone()),
        }
    }
}

/// One NETCONF session to a subordinate.
pub struct Session {
    /// Held for the session's life: the SSH connection lives as long as its handle.
    handle: client::Handle<Verifier>,
    channel: Channel<client::Msg>,
    inbox: Inbox,
    framing: Framing,
    next_id: u64,
    session_id: u32,
    capabilities: Vec<String>,
    fingerprint: String,
    /// How long `close` waits for the server, the connect timeout: a polite end must not
    /// hold the caller longer than a new connection would.
    grace: Duration,
    dead: Option<Dead>,
    /// A message is being written. Still set when a call is entered, an earlier call was
    /// dropped mid-write (a `select!`, a timeout of the caller's own): part of a frame may
    /// be on the wire, and whatever follows would be read by the server as its rest.
    sending: bool,
}

impl Session {
    /// Connects, verifies the host key, authenticates, opens the "netconf" subsystem and
    /// exchanges <hello> (advertise base:1.0 and base:1.1; chunked framing when both sides
    /// have 1.1, RFC 6242 section 4.1). Returns the session with the server's session-id
    /// and capabilities.
    pub async fn connect(t: &Target) -> Result<Session, ClientError> {
        // A pin that cannot be read is a configuration error: said before any traffic.
        let pin = pin_fingerprint(&t.host_key).map_err(|e| ClientError::Connect(format!("host-key pin: {e}")))?;
        let proof = match &t.auth {
            ClientAuth::Password(p) => Proof::Password(p),
            ClientAuth::PrivateKey(path) => Proof::Key(Box::new(load_key(path).await?)),
        };
        let limit = t.connect_timeout;
        let host = t.host.trim_start_matches('[').trim_end_matches(']');
        let tcp = match tokio::time::timeout(limit, TcpStream::connect((host, t.port))).await {
            Err(_) => return Err(ClientError::Timeout("TCP connect")),
            Ok(Err(e)) => return Err(ClientError::Connect(format!("{}:{}: {e}", printable(host, 256), t.port))),
            Ok(Ok(s)) => s,
        };
        let _ = tcp.set_nodelay(true);

        let seen = Arc::new(Mutex::new(None));
        let verifier = Verifier { pin, seen: seen.clone() };
        let config = Arc::new(client::Config {
            keepalive_interval: Some(KEEPALIVE),
            keepalive_max: KEEPALIVE_MAX,
            nodelay: true,
            ..Default::default()
        });
        let handshake = tokio::time::timeout(limit, client::connect_stream(config, tcp, verifier)).await;
        let presented: Option<(String, bool)> = lock(&seen).clone();
        if let Some((fp, false)) = &presented {
            return Err(ClientError::HostKey(format!("the server presented {fp}, the pin is {pin}")));
        }
        let mut handle = match handshake {
            Err(_) => return Err(ClientError::Timeout("SSH handshake")),
            Ok(Err(e)) => return Err(ClientError::Connect(format!("SSH: {e}"))),
            Ok(Ok(h)) => h,
        };
        let Some((fingerprint, true)) = presented else {
            return Err(ClientError::HostKey("the server presented no host key".into()));
        };

        let user = t.username.as_str();
        let attempt = async {
            match proof {
                Proof::Password(p) => handle.authenticate_password(user, p).await,
                Proof::Key(key) => {
                    // RSA signs with a hash the server must accept: ask (RFC 8308
                    // server-sig-algs), and when it does not say, use SHA-256 (RFC 8332),
                    // never the SHA-1 of plain ssh-rsa by default.
                    let hash = if key.algorithm().is_rsa() {
                        match handle.best_supported_rsa_hash().await {
                            Ok(Some(h)) => h,
                            _ => Some(HashAlg::Sha256),
                        }
                    } else {
                        None
                    };
                    handle.authenticate_publickey(user, PrivateKeyWithHashAlg::new(Arc::new(*key), hash)).await
                }
            }
        };
        match tokio::time::timeout(limit, attempt).await {
            Err(_) => return Err(ClientError::Timeout("SSH authentication")),
            Ok(Err(e)) => return Err(ClientError::Connect(format!("SSH authentication: {e}"))),
            Ok(Ok(r)) if !r.success() => return Err(ClientError::Auth),
            Ok(Ok(_)) => {}
        }

        let (channel, early) = match tokio::time::timeout(limit, open_netconf(&handle, t.max_message_size)).await {
            Err(_) => return Err(ClientError::Timeout("netconf subsystem")),
            Ok(r) => r?,
        };
        let mut s = Session {
            handle,
            channel,
            inbox: Inbox::new(t.max_message_size),
            framing: Framing::EndOfMessage,
            next_id: 1,
            session_id: 0,
            capabilities: Vec::new(),
            fingerprint,
            grace: limit,
            dead: None,
            sending: false,
        };
        s.inbox.feed(&early);

        // RFC 6241 section 8.1: both sides send their hello at once, end-of-message framed
        // whatever follows.
        let deadline = deadline_after(limit);
        s.send(client_hello().as_bytes(), deadline, "sending the hello").await?;
        let msg = match tokio::time::timeout_at(deadline, s.read_message()).await {
            Err(_) => return Err(ClientError::Timeout("hello")),
            Ok(r) => r?,
        };
        let hello = parse_hello(&msg).map_err(|e| ClientError::Protocol(format!("server hello: {e}")))?;
        s.framing = hello.framing();
        // Bytes that came after the hello are already chunked: the decoder rereads them.
        s.inbox.decoder.set_framing(s.framing);
        s.session_id = hello.session_id;
        s.capabilities = hello.capabilities;
        Ok(s)
    }

    pub fn session_id(&self) -> u32 {
        self.session_id
    }

    pub fn capabilities(&self) -> &[String] {
        &self.capabilities
    }

    /// SHA256:… of the key the server presented.
    pub fn host_key_fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Sends `<rpc message-id="N" xmlns="urn:ietf:params:xml:ns:netconf:base:1.0">{body}</rpc>` and
    /// waits (bounded by `timeout`) for the rpc-reply with that message-id; notifications
    /// arriving meanwhile are kept, in order, for `next_notification` (bounded queue: if
    /// more than 1024 pile up before the reply, error Protocol). Returns the reply's inner
    /// XML text (e.g. "<ok/>" or the data) or ClientError::Rpc with the first rpc-error's
    /// error-tag and error-message.
    ///
    /// `body` is XML and goes in as it is; an element without a namespace declaration of
    /// its own is in the base namespace. A reply consisting of `<ok/>` alone is "<ok/>"
    /// however the server spelled it (prefixed or not). Other content keeps the text the
    /// server sent, with the namespace declarations of `<rpc-reply>` that it relies on
    /// copied onto its top elements, so it parses on its own; top elements in the base
    /// namespace (`<data>`) stay unqualified, as callers expect them.
    ///
    /// A timeout leaves the session usable (the late reply is skipped when it arrives),
    /// unless it struck while the request was still being written.
    pub async fn rpc(&mut self, body: &str, timeout: Duration) -> Result<String, ClientError> {
        self.usable()?;
        let id = self.next_id.to_string();
        self.next_id += 1;
        let deadline = deadline_after(timeout);
        let msg = format!("<rpc message-id=\"{id}\" xmlns=\"{NS_BASE}\">{body}</rpc>");
        self.send(msg.as_bytes(), deadline, "sending the rpc").await?;
        match tokio::time::timeout_at(deadline, self.await_reply(&id)).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Timeout("waiting for the rpc-reply")),
        }
    }

    /// The next <notification> message, whole (bytes of the XML document, as received).
    /// Returns Closed when the peer closed the channel.
    ///
    /// Only the root element is looked at here; checking the rest is the decoder's work,
    /// which needs it all anyway. Cancel-safe: nothing received is lost when the future is
    /// dropped, so it can be raced against a shutdown signal.
    pub async fn next_notification(&mut self) -> Result<Vec<u8>, ClientError> {
        // What came before the session ended is still delivered, in order.
        if let Some(n) = self.inbox.queue.pop_front() {
            self.inbox.queued -= n.len();
            return Ok(n);
        }
        if let Some(d) = &self.dead {
            return Err(d.error());
        }
        loop {
            let msg = self.read_message().await?;
            match self.inbox.route(msg, None) {
                Ok(Routed::Notification(n)) => return Ok(n),
                Ok(_) => {}
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// <close-session>, best effort, then drops the connection.
    pub async fn close(mut self) {
        let grace = self.grace;
        if self.usable().is_ok() {
            if let Err(e) = self.rpc("<close-session/>", grace).await {
                tracing::debug!("close-session: {e}");
            }
        }
        let bye = async {
            let _ = self.channel.close().await;
            let _ = self.handle.disconnect(russh::Disconnect::ByApplication, "", "en").await;
        };
        let _ = tokio::time::timeout(grace, bye).await;
    }

    fn usable(&self) -> Result<(), ClientError> {
        if let Some(d) = &self.dead {
            return Err(d.error());
        }
        if self.sending {
            return Err(ClientError::Protocol(
                "an earlier request was abandoned while being written: the framing is no longer known".into(),
            ));
        }
        Ok(())
    }

    /// Records an error that ends the session, and returns it.
    fn fail(&mut self, e: ClientError) -> ClientError {
        match &e {
            ClientError::Closed => self.dead = Some(Dead::Closed),
            ClientError::Protocol(m) if self.dead.is_none() => self.dead = Some(Dead::Protocol(m.clone())),
            _ => {}
        }
        e
    }

    async fn send(&mut self, msg: &[u8], deadline: Instant, what: &'static str) -> Result<(), ClientError> {
        let mut out = Vec::with_capacity(msg.len() + 32);
        encode(self.framing, msg, &mut out);
        self.sending = true;
        match tokio::time::timeout_at(deadline, self.channel.data_bytes(out)).await {
            Ok(Ok(())) => {
                self.sending = false;
                Ok(())
            }
            Ok(Err(e)) => {
                tracing::debug!("writing to the NETCONF channel: {e}");
                Err(self.fail(ClientError::Closed))
            }
            Err(_) => {
                // Part of the frame may be out: nothing sent after it could be framed right.
                self.dead = Some(Dead::Protocol(format!("{what} timed out part-way: the framing is no longer known")));
                Err(ClientError::Timeout(what))
            }
        }
    }

    async fn await_reply(&mut self, id: &str) -> Result<String, ClientError> {
        loop {
            let msg = self.read_message().await?;
            match self.inbox.route(msg, Some(id)) {
                Ok(Routed::Reply(r)) => return r,
                Ok(_) => {}
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// The next framed message, reading the channel as needed.
    async fn read_message(&mut self) -> Result<Vec<u8>, ClientError> {
        loop {
            match self.inbox.next_message() {
                Ok(Some(m)) => return Ok(m),
                Ok(None) => self.pump().await?,
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// Waits for the next data on the channel and hands it to the decoder. Cancel-safe:
    /// the channel's queue keeps what was not taken yet.
    async fn pump(&mut self) -> Result<(), ClientError> {
        if let Some(d) = &self.dead {
            return Err(d.error());
        }
        loop {
            match self.channel.wait().await {
                Some(ChannelMsg::Data { data }) => {
                    self.inbox.feed(&data);
                    return Ok(());
                }
                Some(ChannelMsg::ExtendedData { data, .. }) => {
                    tracing::debug!(bytes = data.len(), "extended data on the NETCONF channel ignored");
                }
                // Without the server's side of the channel there is no NETCONF session.
                Some(ChannelMsg::Eof | ChannelMsg::Close) | None => return Err(self.fail(ClientError::Closed)),
                Some(_) => {}
            }
        }
    }
}

/// `now + d`, or a far future when that overflows (a caller's "no limit").
fn deadline_after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

enum Proof<'a> {
    Password(&'a str),
    Key(Box<PrivateKey>),
}

/// Loads the coordinator's private key off the runtime's worker threads (a file read).
async fn load_key(path: &Path) -> Result<PrivateKey, ClientError> {
    let owned = path.to_owned();
    let shown = printable(&path.display().to_string(), 256);
    match tokio::task::spawn_blocking(move || load_secret_key(&owned, None)).await {
        Ok(Ok(k)) => Ok(k),
        Ok(Err(e)) => Err(ClientError::Connect(format!("private key {shown}: {e}"))),
        Err(e) => Err(ClientError::Connect(format!("private key {shown}: {e}"))),
    }
}

/// Opens a session channel and starts the netconf subsystem, waiting for the server's
/// answer: a refusal (ours refuses at max-sessions) is then a clear error, not a hello
/// that never comes. Data arriving before the answer is kept for the decoder.
async fn open_netconf(
    handle: &client::Handle<Verifier>,
    max: usize,
) -> Result<(Channel<client::Msg>, Vec<u8>), ClientError> {
    let mut channel = handle
        .channel_open_session()
        .await
        .map_err(|e| ClientError::Connect(format!("opening an SSH session channel: {e}")))?;
    channel
        .request_subsystem(true, "netconf")
        .await
        .map_err(|e| ClientError::Connect(format!("requesting the netconf subsystem: {e}")))?;
    let mut early = Vec::new();
    loop {
        match channel.wait().await {
            Some(ChannelMsg::Success) => return Ok((channel, early)),
            Some(ChannelMsg::Failure) => {
                return Err(ClientError::Connect("the server refused the netconf subsystem".into()))
            }
            Some(ChannelMsg::Data { data }) => {
                if early.len() + data.len() > max.saturating_add(EOM.len()) {
                    return Err(ClientError::Protocol(format!(
                        "more than {max} bytes before the netconf subsystem was confirmed"
                    )));
                }
                early.extend_from_slice(&data);
            }
            Some(ChannelMsg::Eof | ChannelMsg::Close) | None => {
                return Err(ClientError::Connect("the channel closed before the netconf subsystem started".into()))
            }
            Some(_) => {}
        }
    }
}

// ----- host key ---------------------------------------------------------------------------

/// Checks the host key russh hands over, at the first key exchange and at every re-key:
/// the pin holds for the whole session, not just its start.
struct Verifier {
    pin: Fingerprint,
    /// The fingerprint presented last and whether it matched: for the caller's error and
    /// for the operational state.
    seen: Arc<Mutex<Option<(String, bool)>>>,
}

impl client::Handler for Verifier {
    type Error = russh::Error;

    async fn check_server_key(&mut self, key: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        // A certificate's CA signature proves nothing to a pin; the key it certifies is
        // what signs the exchange, so that is what is compared.
        let presented = match key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key.fingerprint(HashAlg::Sha256),
            PublicKeyOrCertificate::Certificate(cert) => cert.public_key().fingerprint(HashAlg::Sha256),
        };
        let ok = presented == self.pin;
        *lock(&self.seen) = Some((presented.to_string(), ok));
        Ok(ok)
    }
}

/// The SHA-256 fingerprint a pin stands for. Both forms come down to it: comparing
/// SHA-256 digests of the key blob is comparing the keys.
fn pin_fingerprint(pin: &HostKeyPin) -> Result<Fingerprint, String> {
    match pin {
        HostKeyPin::Fingerprint(f) => {
            let f = f.trim();
            let body = f
                .strip_prefix("SHA256:")
                .ok_or_else(|| "a fingerprint pin is \"SHA256:\" and base64, as ssh-keygen -l prints it".to_string())?;
            // Tools other than ssh-keygen print the base64 padded.
            let body = body.trim_end_matches('=');
            format!("SHA256:{body}")
                .parse::<Fingerprint>()
                .map_err(|_| format!("\"{}\" is not a SHA-256 fingerprint", printable(f, 80)))
        }
        HostKeyPin::Key(line) => {
            let words: Vec<&str> = line.split_whitespace().collect();
            let (kind, body) = match words.as_slice() {
                [] => return Err("the host key is empty".into()),
                [body] => (None, *body),
                [kind, body, ..] => (Some(*kind), *body),
            };
            let key = parse_public_key_base64(body).map_err(|e| format!("not an SSH public key: {e}"))?;
            if let Some(kind) = kind {
                let algorithm = key.algorithm();
                if algorithm.as_str() != kind {
                    return Err(format!(
                        "the line says {} but holds an {} key",
                        printable(kind, 64),
                        algorithm.as_str()
                    ));
                }
            }
            Ok(key.fingerprint(HashAlg::Sha256))
        }
    }
}

// ----- messages ---------------------------------------------------------------------------

/// The client's hello: both base versions, so that a 1.1 server gets chunked framing and
/// a 1.0 one still works.
fn client_hello() -> String {
    let mut s = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?><hello xmlns=\"{NS_BASE}\"><capabilities>");
    for c in [CAP_BASE_10, CAP_BASE_11] {
        s.push_str("<capability>");
        s.push_str(&escape_text(c));
        s.push_str("</capability>");
    }
    s.push_str("</capabilities></hello>");
    s
}

/// What the server's hello says.
#[derive(Debug)]
struct Hello {
    session_id: u32,
    capabilities: Vec<String>,
}

impl Hello {
    /// RFC 6242 section 4.1: chunked once both hellos carry base:1.1 (ours always does).
    fn framing(&self) -> Framing {
        if self.capabilities.iter().any(|c| c == CAP_BASE_11) {
            Framing::Chunked
        } else {
            Framing::EndOfMessage
        }
    }
}

#[derive(Clone, Copy)]
enum HelloLeaf {
    Capability,
    SessionId,
}

/// Reads the server's `<hello>` (RFC 6241 section 8.1). Elements it does not know are
/// passed over, as a later protocol version may add them.
fn parse_hello(msg: &[u8]) -> Result<Hello, String> {
    let src = xml_text(msg)?;
    let mut w = Walk::new(src, false, 2);
    let mut capabilities = Vec::new();
    let mut saw_capabilities = false;
    let mut in_capabilities = false;
    let mut session_id = None;
    let mut leaf: Option<(HelloLeaf, usize)> = None;
    let mut text = String::new();
    loop {
        match w.next()? {
            Step::Open { ns, local, depth, .. } => {
                if leaf.is_some() {
                    return Err("an element inside a capability or session-id".into());
                }
                let base = ns.as_deref() == Some(NS_BASE);
                match (depth, base, local.as_str()) {
                    (0, true, "hello") => {}
                    (0, _, _) => return Err(format!("expected <hello>, got <{}>", printable(&local, 64))),
                    (1, true, "capabilities") => {
                        saw_capabilities = true;
                        in_capabilities = true;
                    }
                    (1, true, "session-id") => {
                        if session_id.is_some() {
                            return Err("more than one session-id".into());
                        }
                        leaf = Some((HelloLeaf::SessionId, depth));
                        text.clear();
                    }
                    (2, true, "capability") if in_capabilities => {
                        leaf = Some((HelloLeaf::Capability, depth));
                        text.clear();
                    }
                    _ => {}
                }
            }
            Step::Text(t) => {
                if leaf.is_some() {
                    push_text(&mut text, &t)?;
                }
            }
            Step::Close { depth, .. } => {
                if let Some((what, d)) = leaf {
                    if d == depth {
                        leaf = None;
                        match what {
                            HelloLeaf::Capability => capabilities.push(text.trim().to_owned()),
                            HelloLeaf::SessionId => {
                                // session-id-type: uint32, 1 and up.
                                let v = text.trim();
                                match v.parse::<u32>() {
                                    Ok(n) if n > 0 => session_id = Some(n),
                                    _ => return Err(format!("session-id \"{}\" is invalid", printable(v, 32))),
                                }
                            }
                        }
                    }
                }
                if depth == 1 {
                    in_capabilities = false;
                }
            }
            Step::End => break,
        }
    }
    if !saw_capabilities {
        return Err("the hello has no capabilities".into());
    }
    let Some(session_id) = session_id else {
        return Err("the hello has no session-id".into());
    };
    if !capabilities.iter().any(|c| c == CAP_BASE_10 || c == CAP_BASE_11) {
        return Err("the server offers neither base:1.0 nor base:1.1".into());
    }
    Ok(Hello { session_id, capabilities })
}

/// What a received message is, from its root element alone.
#[derive(Debug, PartialEq)]
enum Kind {
    /// An rpc-reply and its message-id, when it has one.
    Reply(Option<String>),
    Notification,
}

fn classify(msg: &[u8]) -> Result<Kind, String> {
    let src = std::str::from_utf8(msg).map_err(|e| format!("the message is not UTF-8 (byte {})", e.valid_up_to()))?;
    let mut w = Walk::new(src, false, 0);
    loop {
        match w.next()? {
            Step::Open { ns, local, el, .. } => {
                return match (ns.as_deref(), local.as_str()) {
                    (Some(NS_BASE), "rpc-reply") => Ok(Kind::Reply(message_id(&el)?)),
                    (Some(NS_NOTIFICATION), "notification") => Ok(Kind::Notification),
                    _ => Err(format!("unexpected message <{}>", printable(&local, 64))),
                };
            }
            Step::End => return Err("an empty message".into()),
            Step::Text(_) | Step::Close { .. } => {}
        }
    }
}

fn message_id(el: &BytesStart<'_>) -> Result<Option<String>, String> {
    for a in el.attributes() {
        let a = a.map_err(|e| format!("a malformed attribute: {}", printable(&e.to_string(), 160)))?;
        // Unprefixed: in no namespace, as RFC 6241 section 4.1 has it.
        if a.key.0 == "message-id" {
            let v = a
                .normalized_value(XmlVersion::Implicit1_0)
                .map_err(|e| format!("a malformed message-id: {}", printable(&e.to_string(), 160)))?;
            return Ok(Some(v.into_owned()));
        }
    }
    Ok(None)
}

/// One rpc-reply, read.
#[derive(Debug, PartialEq)]
enum Reply {
    Data(String),
    Error { tag: String, message: String },
}

#[derive(Default)]
struct ErrorParts {
    tag: Option<String>,
    message: Option<String>,
    severity: Option<String>,
}

#[derive(Clone, Copy)]
enum ErrorLeaf {
    Tag,
    Message,
    Severity,
}

/// Reads an rpc-reply (RFC 6241 sections 4.2 and 4.3). The content handed back is bounded
/// by `max` like the message itself: copying declarations onto top elements must not
/// multiply a hostile reply's size.
fn parse_reply(msg: &[u8], max: usize) -> Result<Reply, String> {
    let src = xml_text(msg)?;
    let mut w = Walk::new(src, false, 2);
    let mut root_decls: Vec<(Option<String>, String)> = Vec::new();
    let mut inner = 0..0;
    let mut inserts: Vec<(usize, String)> = Vec::new();
    let mut oks = 0usize;
    let mut others = 0usize;
    let mut error: Option<ErrorParts> = None;
    let mut first: Option<(String, String)> = None;
    let mut leaf: Option<ErrorLeaf> = None;
    let mut text = String::new();
    loop {
        match w.next()? {
            Step::Open { ns, local, el, at, end, depth } => {
                if leaf.is_some() {
                    return Err("an element inside an rpc-error leaf".into());
                }
                let base = ns.as_deref() == Some(NS_BASE);
                match depth {
                    0 => {
                        if !(base && local == "rpc-reply") {
                            return Err(format!("expected <rpc-reply>, got <{}>", printable(&local, 64)));
                        }
                        root_decls = declarations(&el)?;
                        inner.start = end;
                    }
                    1 => {
                        if base && local == "rpc-error" {
                            error = Some(ErrorParts::default());
                        } else if base && local == "ok" {
                            oks += 1;
                        } else {
                            others += 1;
                        }
                        let extra = redeclared(&root_decls, &el)?;
                        if !extra.is_empty() {
                            // Right after `<` and the name: no whitespace may come between.
                            inserts.push((at + 1 + el.name().0.len(), extra));
                        }
                    }
                    2 if base && error.is_some() => {
                        leaf = match local.as_str() {
                            "error-tag" => Some(ErrorLeaf::Tag),
                            "error-message" => Some(ErrorLeaf::Message),
                            "error-severity" => Some(ErrorLeaf::Severity),
                            _ => None,
                        };
                        text.clear();
                    }
                    _ => {}
                }
            }
            Step::Text(t) => {
                if leaf.is_some() {
                    push_text(&mut text, &t)?;
                }
            }
            Step::Close { at, depth } => match depth {
                2 => {
                    if let (Some(which), Some(e)) = (leaf.take(), error.as_mut()) {
                        let v = text.trim().to_owned();
                        let slot = match which {
                            ErrorLeaf::Tag => &mut e.tag,
                            ErrorLeaf::Message => &mut e.message,
                            ErrorLeaf::Severity => &mut e.severity,
                        };
                        // The first of each counts.
                        if slot.is_none() {
                            *slot = Some(v);
                        }
                    }
                }
                1 => {
                    if let Some(e) = error.take() {
                        let tag = e.tag.ok_or("an rpc-error without error-tag")?;
                        let message = e.message.unwrap_or_default();
                        if e.severity.as_deref() == Some("warning") {
                            tracing::warn!(
                                tag = %printable(&tag, 64),
                                "the subordinate warns: {}",
                                printable(&message, 512)
                            );
                        } else if first.is_none() {
                            first = Some((printable(&tag, 64), printable(&message, 512)));
                        }
                    }
                }
                0 => inner.end = at,
                _ => {}
            },
            Step::End => break,
        }
    }
    if let Some((tag, message)) = first {
        return Ok(Reply::Error { tag, message });
    }
    if oks == 1 && others == 0 {
        return Ok(Reply::Data("<ok/>".into()));
    }
    let slice = |r: std::ops::Range<usize>| src.get(r).ok_or_else(|| "a reply's content is out of bounds".to_string());
    let mut out = String::with_capacity(inner.len());
    let mut from = inner.start;
    for (at, extra) in inserts {
        out.push_str(slice(from..at)?);
        out.push_str(&extra);
        from = at;
        if out.len() > max {
            return Err(format!("the reply's content with its namespace declarations exceeds {max} bytes"));
        }
    }
    out.push_str(slice(from..inner.end)?);
    Ok(Reply::Data(out))
}

/// The namespace declarations an element makes (None: the default namespace).
fn declarations(el: &BytesStart<'_>) -> Result<Vec<(Option<String>, String)>, String> {
    let mut out = Vec::new();
    for a in el.attributes() {
        let a = a.map_err(|e| format!("a malformed attribute: {}", printable(&e.to_string(), 160)))?;
        let Some(d) = a.key.as_namespace_binding() else { continue };
        let prefix = match d {
            PrefixDeclaration::Default => None,
            PrefixDeclaration::Named(p) => Some(p.to_owned()),
        };
        let uri = a
            .normalized_value(XmlVersion::Implicit1_0)
            .map_err(|e| format!("a malformed namespace: {}", printable(&e.to_string(), 160)))?;
        out.push((prefix, uri.into_owned()));
    }
    Ok(out)
}

/// The declarations of `<rpc-reply>` a top element of its content does not make itself,
/// as attribute text to add to its start tag. The default namespace is left out when it is
/// the base one: `<data>` and `<ok/>` are read as the base elements they are.
fn redeclared(root: &[(Option<String>, String)], el: &BytesStart<'_>) -> Result<String, String> {
    if root.is_empty() {
        return Ok(String::new());
    }
    let own = declarations(el)?;
    let mut s = String::new();
    for (prefix, uri) in root {
        if own.iter().any(|(p, _)| p == prefix) {
            continue;
        }
        match prefix {
            None if uri == NS_BASE => {}
            None => s.push_str(&format!(" xmlns=\"{}\"", escape_attr(uri))),
            // `xmlns:p=""` is not XML 1.0; the binding was never usable.
            Some(_) if uri.is_empty() => {}
            Some(p) => s.push_str(&format!(" xmlns:{p}=\"{}\"", escape_attr(uri))),
        }
    }
    Ok(s)
}

/// What a message did to the session.
#[derive(Debug)]
enum Routed {
    /// The reply waited for: its content, or its rpc-error.
    Reply(Result<String, ClientError>),
    /// A notification, when none is being waited for.
    Notification(Vec<u8>),
    /// A notification kept for later.
    Queued,
    /// A reply nobody waits for (an rpc that timed out, say).
    Skipped,
}

/// The receiving side of a session, apart from the channel: the framing decoder, the
/// notifications kept while an rpc waits, and the routing of each message.
struct Inbox {
    decoder: Decoder,
    max: usize,
    queue: VecDeque<Vec<u8>>,
    /// Bytes in `queue`: bounded to two maximum messages, so that the queue's memory is
    /// bounded by size as well as by count.
    queued: usize,
}

impl Inbox {
    fn new(max_message_size: usize) -> Inbox {
        Inbox { decoder: Decoder::new(max_message_size), max: max_message_size, queue: VecDeque::new(), queued: 0 }
    }

    fn feed(&mut self, data: &[u8]) {
        self.decoder.feed(data);
    }

    /// The next complete message. A message too big is a protocol error too: it may have
    /// been the reply waited for, or a push that leaves the caller's view incomplete.
    fn next_message(&mut self) -> Result<Option<Vec<u8>>, ClientError> {
        self.decoder.next_message().map_err(|e| match e {
            FramingError::TooBig(n) => {
                ClientError::Protocol(format!("a message exceeds the maximum size of {n} bytes"))
            }
            FramingError::Malformed(m) => ClientError::Protocol(format!("malformed chunked framing: {m}")),
        })
    }

    /// Routes one message while the reply to `waiting` is awaited (None: a notification).
    /// An error ends the session.
    fn route(&mut self, msg: Vec<u8>, waiting: Option<&str>) -> Result<Routed, ClientError> {
        match classify(&msg).map_err(ClientError::Protocol)? {
            Kind::Notification => match waiting {
                None => Ok(Routed::Notification(msg)),
                Some(_) if self.queue.len() >= MAX_QUEUED => Err(ClientError::Protocol(format!(
                    "more than {MAX_QUEUED} notifications arrived while an rpc-reply was awaited"
                ))),
                Some(_) if self.queued.saturating_add(msg.len()) > self.max.saturating_mul(2) => {
                    Err(ClientError::Protocol(format!(
                        "more than {} bytes of notifications arrived while an rpc-reply was awaited",
                        self.max.saturating_mul(2)
                    )))
                }
                Some(_) => {
                    self.queued += msg.len();
                    self.queue.push_back(msg);
                    Ok(Routed::Queued)
                }
            },
            Kind::Reply(id) => {
                // RFC 6241 section 4.1: a server that cannot read an rpc's message-id answers
                // with an rpc-error carrying none. Only one rpc is outstanding at a time, so
                // such an error can only be about it.
                let ours = match (waiting, id.as_deref()) {
                    (Some(w), Some(i)) => w == i,
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if !ours {
                    tracing::warn!(
                        message_id = %printable(id.as_deref().unwrap_or(""), 64),
                        "an rpc-reply no request waits for, skipped"
                    );
                    return Ok(Routed::Skipped);
                }
                match (parse_reply(&msg, self.max).map_err(|e| ClientError::Protocol(format!("rpc-reply: {e}")))?, id) {
                    (Reply::Error { tag, message }, _) => Ok(Routed::Reply(Err(ClientError::Rpc { tag, message }))),
                    (Reply::Data(d), Some(_)) => Ok(Routed::Reply(Ok(d))),
                    (Reply::Data(_), None) => {
                        tracing::warn!("an rpc-reply without message-id or rpc-error, skipped");
                        Ok(Routed::Skipped)
                    }
                }
            }
        }
    }
}

// ----- YANG-Push --------------------------------------------------------------------------

/// The establish-subscription RPC body (RFC 8639 + RFC 8641) for an on-change subscription
/// to the operational datastore with sync-on-start, selecting with a subtree filter
/// `<cats-sma xmlns="…cats-sma ns…"><metric-cache/><services/></cats-sma>` — take the
/// filter XML as a parameter so the caller chooses what is selected. `dampening` in
/// centiseconds (0 = none).
///
/// Operational, because the metric cache is state, not configuration. Sync-on-start is
/// said explicitly though it is the default: the first push-update is what a new session
/// reconciles against, and a server with another default must not skip it. The filter
/// goes in as it is, under the subscribed-notifications default namespace: its top
/// elements declare their own, as subtree filters do. Elements are in the order of the
/// YANG input (RFC 7950 section 7.14.4).
pub fn establish_on_change(filter_xml: &str, dampening_cs: u32) -> String {
    // dampening-period defaults to 0: said only when it is not.
    let dampening = if dampening_cs == 0 {
        String::new()
    } else {
        format!("<yp:dampening-period>{dampening_cs}</yp:dampening-period>")
    };
    format!(
        "<establish-subscription xmlns=\"{NS_SN}\" xmlns:yp=\"{NS_YP}\">\
         <yp:datastore xmlns:ds=\"{NS_DS}\">ds:operational</yp:datastore>\
         <yp:datastore-subtree-filter>{filter_xml}</yp:datastore-subtree-filter>\
         <yp:on-change>{dampening}<yp:sync-on-start>true</yp:sync-on-start></yp:on-change>\
         </establish-subscription>"
    )
}

/// The subscription id from an establish-subscription reply ("<id>N</id>" in the
/// ietf-subscribed-notifications namespace).
///
/// Strict about the namespace: an unqualified `<id>` is not RFC 8639's, and taking it
/// would hide a server that answered something else.
pub fn subscription_id(reply: &str) -> Result<u32, ClientError> {
    let err = |e: String| ClientError::Protocol(format!("establish-subscription reply: {e}"));
    xml_text(reply.as_bytes()).map_err(err)?;
    let mut w = Walk::new(reply, true, 0);
    let mut id = None;
    let mut reading = false;
    let mut text = String::new();
    loop {
        match w.next().map_err(err)? {
            Step::Open { ns, local, depth, .. } => {
                if reading {
                    return Err(err("<id> holds an element".into()));
                }
                if depth == 0 && ns.as_deref() == Some(NS_SN) && local == "id" {
                    if id.is_some() {
                        return Err(err("more than one <id>".into()));
                    }
                    reading = true;
                    text.clear();
                }
            }
            Step::Text(t) => {
                if reading {
                    push_text(&mut text, &t).map_err(err)?;
                }
            }
            Step::Close { depth, .. } => {
                if reading && depth == 0 {
                    reading = false;
                    let v = text.trim();
                    id = Some(
                        v.parse::<u32>().map_err(|_| err(format!("id \"{}\" is not a uint32", printable(v, 32))))?,
                    );
                }
            }
            Step::End => break,
        }
    }
    id.ok_or_else(|| err("no subscription <id>".into()))
}

// ----- reading XML ------------------------------------------------------------------------

/// The message as text, refused when it is not UTF-8 or holds a character XML 1.0 does
/// not allow (RFC 6241 section 3: well-formed XML in UTF-8); quick-xml checks neither.
fn xml_text(msg: &[u8]) -> Result<&str, String> {
    let src = std::str::from_utf8(msg).map_err(|e| format!("the message is not UTF-8 (byte {})", e.valid_up_to()))?;
    if let Some((at, _)) = src.char_indices().find(|(_, c)| !is_xml_char(*c)) {
        return Err(format!("a character XML 1.0 does not allow at byte {at}"));
    }
    Ok(src)
}

fn push_text(buf: &mut String, t: &str) -> Result<(), String> {
    if buf.len() + t.len() > MAX_TEXT {
        return Err(format!("a leaf's text is longer than {MAX_TEXT} bytes"));
    }
    buf.push_str(t);
    Ok(())
}

/// One step of a [`Walk`].
enum Step<'a> {
    /// An element opens at byte `at` (its `<`); its start tag ends at `end`. `depth` is 0
    /// for a top element. `ns` and `local` are given down to the walk's depth of interest
    /// (below it, `None` and empty: nothing is allocated for the bulk of a large reply).
    Open {
        ns: Option<String>,
        local: String,
        el: BytesStart<'a>,
        at: usize,
        end: usize,
        depth: usize,
    },
    /// The element opened at `depth` closes; its end tag starts at `at` (for an empty
    /// element, `at` is where it ends).
    Close {
        at: usize,
        depth: usize,
    },
    /// Character data, references resolved.
    Text(Cow<'a, str>),
    End,
}

/// A streaming walk over one message with quick-xml's namespace-resolving reader, with the
/// checks it leaves to its user: one root element (unless a fragment is read), no text
/// outside it, no DTD (so no entity but the predefined ones), references to XML characters
/// only, every prefix declared. It does not recurse and keeps nothing but the reader's
/// stack, so a message costs no more than its size.
struct Walk<'a> {
    reader: NsReader<&'a [u8]>,
    /// Element content (what an rpc-reply carries): any number of top elements.
    fragment: bool,
    /// The deepest level whose names are handed out.
    names_to: usize,
    depth: usize,
    /// An empty element was reported open: its close comes next.
    close_empty: bool,
    root_seen: bool,
}

impl<'a> Walk<'a> {
    fn new(src: &'a str, fragment: bool, names_to: usize) -> Walk<'a> {
        let mut reader = NsReader::from_str(src);
        reader.config_mut().check_end_names = true;
        reader.resolver_mut().set_max_namespace_bindings(MAX_BINDINGS);
        Walk { reader, fragment, names_to, depth: 0, close_empty: false, root_seen: false }
    }

    fn next(&mut self) -> Result<Step<'a>, String> {
        if self.close_empty {
            self.close_empty = false;
            let at = self.reader.buffer_position() as usize;
            return Ok(self.close(at));
        }
        loop {
            let at = self.reader.buffer_position() as usize;
            let ev = self.reader.read_event().map_err(|e| {
                format!(
                    "not well-formed XML at byte {}: {}",
                    self.reader.error_position(),
                    printable(&e.to_string(), 160)
                )
            })?;
            let end = self.reader.buffer_position() as usize;
            match ev {
                Event::Start(el) => return self.open(el, at, end),
                Event::Empty(el) => {
                    let step = self.open(el, at, end)?;
                    self.close_empty = true;
                    return Ok(step);
                }
                Event::End(_) => {
                    if self.depth == 0 {
                        return Err("an end tag without its start".into());
                    }
                    return Ok(self.close(at));
                }
                Event::Text(t) => {
                    let s = t.xml10_content();
                    if self.depth > 0 {
                        return Ok(Step::Text(s));
                    }
                    if !s.trim().is_empty() {
                        return Err("text outside the root element".into());
                    }
                }
                Event::CData(c) => {
                    if self.depth == 0 {
                        return Err("CDATA outside the root element".into());
                    }
                    let s: &str = &c;
                    return Ok(Step::Text(Cow::Owned(s.to_owned())));
                }
                Event::GeneralRef(r) => {
                    if self.depth == 0 {
                        return Err("a reference outside the root element".into());
                    }
                    return Ok(Step::Text(Cow::Owned(reference(&r)?.to_string())));
                }
                Event::DocType(_) => return Err("a DOCTYPE is not allowed in NETCONF messages".into()),
                Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
                Event::Eof => {
                    if self.depth > 0 {
                        return Err("the message ends inside an element".into());
                    }
                    if !self.fragment && !self.root_seen {
                        return Err("the message holds no element".into());
                    }
                    return Ok(Step::End);
                }
            }
        }
    }

    fn open(&mut self, el: BytesStart<'a>, at: usize, end: usize) -> Result<Step<'a>, String> {
        if self.depth == 0 {
            if self.root_seen && !self.fragment {
                return Err("content after the root element".into());
            }
            self.root_seen = true;
        }
        let depth = self.depth;
        let (ns, local) = {
            let (res, local) = self.reader.resolver().resolve_element(el.name());
            let named = depth <= self.names_to;
            let ns = match res {
                ResolveResult::Bound(Namespace(n)) if named => Some(n.to_owned()),
                ResolveResult::Bound(_) | ResolveResult::Unbound => None,
                ResolveResult::Unknown(_) => return Err("an element's namespace prefix is not declared".into()),
            };
            (ns, if named { local.into_inner().to_owned() } else { String::new() })
        };
        self.depth += 1;
        Ok(Step::Open { ns, local, el, at, end, depth })
    }

    fn close(&mut self, at: usize) -> Step<'a> {
        self.depth = self.depth.saturating_sub(1);
        Step::Close { at, depth: self.depth }
    }
}

/// A character or predefined entity reference; any other entity would need a DTD.
fn reference(r: &BytesRef<'_>) -> Result<char, String> {
    match r.resolve_char_ref() {
        Ok(Some(c)) if is_xml_char(c) => Ok(c),
        Ok(Some(_)) => Err("a character reference to a character XML 1.0 does not allow".into()),
        Ok(None) => match &**r {
            "lt" => Ok('<'),
            "gt" => Ok('>'),
            "amp" => Ok('&'),
            "apos" => Ok('\''),
            "quot" => Ok('"'),
            _ => Err("a reference to an undefined entity".into()),
        },
        Err(_) => Err("a malformed character reference".into()),
    }
}

#[cfg(test)]
mod tests {
    use russh::client::Handler;

    use super::*;
    use crate::error::{ErrorTag, RpcError};

    /// `ssh-keygen -t ed25519` public keys and what `ssh-keygen -lf` prints for them.
    const KEY1: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOsSORRFNF5o/HT8o2chwQj+B1oQUlJdYvyudK5WcWwf sub1";
    const KEY1_FP: &str = "SHA256:dc6DG3Xfu4e0a7uX3Wc6GzQY7Qc/sS+tBD0e5JIkqJg";
    const KEY2: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEyNcIg7s4A/8O5E2YNYcjwpeU0s9oT/moLl/svCX2xU";
    const KEY2_FP: &str = "SHA256:iskl+vWYWSktXZkXR54PSMPmL0KSzu23VB5lWkJoE9c";
    const CATS: &str = "urn:cats-sma:yang:cats-sma";

    fn framed(f: Framing, msg: &str) -> Vec<u8> {
        let mut out = Vec::new();
        encode(f, msg.as_bytes(), &mut out);
        out
    }

    fn hello(caps: &[&str], session_id: Option<&str>) -> String {
        let caps: String = caps.iter().map(|c| format!("<capability>{c}</capability>")).collect();
        let sid = session_id.map(|s| format!("<session-id>{s}</session-id>")).unwrap_or_default();
        format!("<hello xmlns=\"{NS_BASE}\"><capabilities>{caps}</capabilities>{sid}</hello>")
    }

    fn reply(id: u32, inner: &str) -> String {
        format!("<rpc-reply xmlns=\"{NS_BASE}\" message-id=\"{id}\">{inner}</rpc-reply>")
    }

    fn notification(n: u32) -> String {
        format!(
            "<notification xmlns=\"{NS_NOTIFICATION}\"><eventTime>2026-01-01T00:00:0{n}Z</eventTime>\
             <push-change-update xmlns=\"{NS_YP}\"><id>{n}</id></push-change-update></notification>"
        )
    }

    fn proto<T: std::fmt::Debug>(r: Result<T, ClientError>) -> String {
        match r {
            Err(ClientError::Protocol(m)) => m,
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }

    #[test]
    fn rfc6242_4_1_chunked_when_both_say_base_1_1() {
        // What our own server sends, and a chunked reply right behind it in the same read:
        // the decoder rereads those bytes once the framing is chosen.
        let server = crate::netconf::session::server_hello(42);
        let mut inbox = Inbox::new(1 << 20);
        inbox.feed(&framed(Framing::EndOfMessage, &server));
        inbox.feed(&framed(Framing::Chunked, &reply(1, "<ok/>")));
        let h = parse_hello(&inbox.next_message().unwrap().unwrap()).unwrap();
        assert_eq!(h.session_id, 42);
        assert!(h.capabilities.iter().any(|c| c == CAP_BASE_11), "{:?}", h.capabilities);
        assert_eq!(h.framing(), Framing::Chunked);
        inbox.decoder.set_framing(h.framing());
        let r = inbox.next_message().unwrap().unwrap();
        assert!(matches!(inbox.route(r, Some("1")).unwrap(), Routed::Reply(Ok(ref s)) if s == "<ok/>"));
        // Ours offers both.
        let ours = crate::xml::parse(&client_hello()).unwrap();
        let caps: Vec<&str> =
            ours.child(NS_BASE, "capabilities").unwrap().children.iter().map(|c| c.trimmed()).collect();
        assert_eq!(caps, [CAP_BASE_10, CAP_BASE_11]);
    }

    #[test]
    fn rfc6242_4_1_end_of_message_when_the_server_says_only_base_1_0() {
        let h = parse_hello(hello(&[CAP_BASE_10], Some("7")).as_bytes()).unwrap();
        assert_eq!(h.framing(), Framing::EndOfMessage);
        let h = parse_hello(hello(&[CAP_BASE_11], Some("7")).as_bytes()).unwrap();
        assert_eq!(h.framing(), Framing::Chunked);
    }

    #[test]
    fn rfc6241_8_1_client_hello_has_no_session_id() {
        let ours = crate::xml::parse(&client_hello()).unwrap();
        assert!(ours.is(NS_BASE, "hello"));
        assert!(ours.child(NS_BASE, "session-id").is_none());
    }

    #[test]
    fn rfc6241_8_1_server_hello_needs_one_valid_session_id() {
        let caps = [CAP_BASE_10, CAP_BASE_11];
        for bad in [None, Some("0"), Some("-1"), Some("x"), Some("4294967296"), Some("")] {
            assert!(parse_hello(hello(&caps, bad).as_bytes()).is_err(), "{bad:?}");
        }
        assert_eq!(parse_hello(hello(&caps, Some(" 4294967295\n")).as_bytes()).unwrap().session_id, u32::MAX);
        let twice = format!(
            "<hello xmlns=\"{NS_BASE}\"><capabilities><capability>{CAP_BASE_10}</capability></capabilities>\
             <session-id>1</session-id><session-id>2</session-id></hello>"
        );
        assert!(parse_hello(twice.as_bytes()).is_err());
    }

    #[test]
    fn rfc6241_8_1_hello_without_a_base_capability_or_not_a_hello_is_refused() {
        assert!(parse_hello(hello(&["urn:ietf:params:netconf:capability:candidate:1.0"], Some("1")).as_bytes())
            .unwrap_err()
            .contains("neither base"));
        assert!(
            parse_hello(format!("<hello xmlns=\"{NS_BASE}\"><session-id>1</session-id></hello>").as_bytes()).is_err()
        );
        let elsewhere = hello(&[CAP_BASE_10], Some("1")).replace(NS_BASE, "urn:other");
        assert!(parse_hello(elsewhere.as_bytes()).is_err());
        assert!(parse_hello(reply(1, "<ok/>").as_bytes()).is_err());
        let nested = format!(
            "<hello xmlns=\"{NS_BASE}\"><capabilities><capability><x/>{CAP_BASE_10}</capability></capabilities>\
             <session-id>1</session-id></hello>"
        );
        assert!(parse_hello(nested.as_bytes()).is_err());
    }

    #[test]
    fn rfc6241_8_1_any_prefix_whitespace_and_unknown_elements() {
        let src = format!(
            "<?xml version=\"1.0\"?>\n<!-- hi -->\n<nc:hello xmlns:nc=\"{NS_BASE}\">\n  <nc:capabilities>\n    \
             <nc:capability>\n  {CAP_BASE_11}  \n</nc:capability>\n    \
             <nc:capability>urn:x:y?a=1&amp;b=2</nc:capability>\n  </nc:capabilities>\n  \
             <ext xmlns=\"urn:future\"><capability>not one</capability></ext>\n  \
             <nc:session-id>9</nc:session-id>\n</nc:hello>\n"
        );
        let h = parse_hello(src.as_bytes()).unwrap();
        assert_eq!(h.capabilities, [CAP_BASE_11, "urn:x:y?a=1&b=2"]);
        assert_eq!(h.session_id, 9);
        assert_eq!(h.framing(), Framing::Chunked);
    }

    #[test]
    fn rfc6241_4_3_rpc_error_tag_and_message() {
        // As our server writes it: the first error counts, its text unescaped.
        let errors = [
            RpcError::application(ErrorTag::InvalidValue, "a <b> & \"c\""),
            RpcError::protocol(ErrorTag::OperationFailed, "second"),
        ];
        let msg = crate::mgmt::error::reply_errors(" message-id=\"5\"", &errors);
        assert_eq!(
            parse_reply(msg.as_bytes(), 1 << 20).unwrap(),
            Reply::Error { tag: "invalid-value".into(), message: "a <b> & \"c\"".into() }
        );
        let mut inbox = Inbox::new(1 << 20);
        match inbox.route(msg.into_bytes(), Some("5")).unwrap() {
            Routed::Reply(Err(e @ ClientError::Rpc { .. })) => {
                assert_eq!(e.to_string(), "rpc-error: invalid-value: a <b> & \"c\"")
            }
            _ => panic!("expected the rpc-error"),
        }
        // Another server's spelling: prefixed, whitespace, no message.
        let other = format!(
            "<nc:rpc-reply xmlns:nc=\"{NS_BASE}\" message-id=\"6\">\n <nc:rpc-error>\n  \
             <nc:error-type>rpc</nc:error-type>\n  <nc:error-tag> lock-denied </nc:error-tag>\n  \
             <nc:error-info><nc:session-id>3</nc:session-id></nc:error-info>\n </nc:rpc-error>\n</nc:rpc-reply>"
        );
        assert_eq!(
            parse_reply(other.as_bytes(), 1 << 20).unwrap(),
            Reply::Error { tag: "lock-denied".into(), message: String::new() }
        );
    }

    #[test]
    fn rfc6241_4_3_warnings_are_not_errors_and_error_tag_is_mandatory() {
        let warning = "<rpc-error><error-type>application</error-type><error-tag>operation-failed</error-tag>\
                       <error-severity>warning</error-severity><error-message>careful</error-message></rpc-error>";
        assert_eq!(
            parse_reply(reply(1, &format!("{warning}<ok/>")).as_bytes(), 1 << 20).unwrap(),
            Reply::Data("<ok/>".into())
        );
        let untagged = "<rpc-error><error-type>rpc</error-type><error-severity>error</error-severity></rpc-error>";
        assert!(parse_reply(reply(1, untagged).as_bytes(), 1 << 20).is_err());
        let nested = "<rpc-error><error-tag><b/>x</error-tag></rpc-error>";
        assert!(parse_reply(reply(1, nested).as_bytes(), 1 << 20).is_err());
    }

    #[test]
    fn rfc6241_4_2_ok_and_data_replies() {
        let ok = |s: &str| parse_reply(s.as_bytes(), 1 << 20).unwrap();
        assert_eq!(ok(&reply(1, "<ok/>")), Reply::Data("<ok/>".into()));
        assert_eq!(
            ok(&format!("<nc:rpc-reply xmlns:nc=\"{NS_BASE}\" message-id=\"1\"> <nc:ok></nc:ok> </nc:rpc-reply>")),
            Reply::Data("<ok/>".into())
        );
        // Our server's establish-subscription reply, unchanged.
        let id = format!("<id xmlns=\"{NS_SN}\">12</id>");
        assert_eq!(ok(&reply(2, &id)), Reply::Data(id.clone()));
        // <data> stays unqualified; its content keeps its own declarations.
        let data = format!("<data><cats-sma xmlns=\"{CATS}\"><x>a&amp;b</x></cats-sma></data>");
        assert_eq!(ok(&reply(3, &data)), Reply::Data(data.clone()));
        assert_eq!(ok(&format!("<rpc-reply xmlns=\"{NS_BASE}\" message-id=\"4\"/>")), Reply::Data(String::new()));
    }

    #[test]
    fn rfc6241_4_2_content_keeps_the_declarations_of_rpc_reply() {
        // The reply's declarations a top element relies on are copied onto it, so the text
        // handed back parses on its own; what it declares itself is left alone.
        let src = format!(
            "<nc:rpc-reply xmlns:nc=\"{NS_BASE}\" xmlns:sn=\"{NS_SN}\" xmlns=\"urn:d\" message-id=\"3\">\
             <sn:id>5</sn:id><v xmlns=\"urn:own\">1</v><nc:data/></nc:rpc-reply>"
        );
        let Reply::Data(inner) = parse_reply(src.as_bytes(), 1 << 20).unwrap() else { panic!("data") };
        assert!(inner.starts_with(&format!("<sn:id xmlns:nc=\"{NS_BASE}\" xmlns:sn=\"{NS_SN}\" xmlns=\"urn:d\">5")));
        assert!(inner.contains(&format!("<v xmlns:nc=\"{NS_BASE}\" xmlns:sn=\"{NS_SN}\" xmlns=\"urn:own\">")));
        assert_eq!(subscription_id(&inner).unwrap(), 5);
        let wrapped = crate::xml::parse(&format!("<w>{inner}</w>")).unwrap();
        assert!(wrapped.children[0].is(NS_SN, "id"));
        assert!(wrapped.children[1].is("urn:own", "v"));
        assert!(wrapped.children[2].is(NS_BASE, "data"));
        // Copies cannot make the content larger than a message may be.
        let many = format!(
            "<rpc-reply xmlns=\"{NS_BASE}\" xmlns:p=\"urn:{}\" message-id=\"1\">{}</rpc-reply>",
            "x".repeat(200),
            "<p:a/>".repeat(100)
        );
        assert!(parse_reply(many.as_bytes(), 10_000).unwrap_err().contains("exceeds"));
    }

    #[test]
    fn rfc6241_4_2_replies_are_matched_by_message_id() {
        let mut inbox = Inbox::new(1 << 20);
        for m in [notification(1), reply(7, "<ok/>"), notification(2), reply(8, "<data/>")] {
            inbox.feed(&framed(Framing::EndOfMessage, &m));
        }
        let mut routed = Vec::new();
        while let Some(m) = inbox.next_message().unwrap() {
            routed.push(match inbox.route(m, Some("8")).unwrap() {
                Routed::Reply(r) => format!("reply {}", r.unwrap()),
                Routed::Queued => "queued".into(),
                Routed::Skipped => "skipped".into(),
                Routed::Notification(_) => "notification".into(),
            });
        }
        assert_eq!(routed, ["queued", "skipped", "queued", "reply <data/>"]);
        let kept: Vec<Vec<u8>> = inbox.queue.drain(..).collect();
        assert_eq!(kept, [notification(1).into_bytes(), notification(2).into_bytes()], "whole and in order");
        // With no rpc outstanding, a notification is handed out and any reply is skipped.
        assert!(matches!(inbox.route(notification(3).into_bytes(), None).unwrap(), Routed::Notification(_)));
        assert!(matches!(inbox.route(reply(9, "<ok/>").into_bytes(), None).unwrap(), Routed::Skipped));
    }

    #[test]
    fn rfc6241_4_1_an_error_without_message_id_answers_the_pending_rpc() {
        let errors = [RpcError::protocol(ErrorTag::MissingAttribute, "no message-id")];
        let msg = crate::mgmt::error::reply_errors("", &errors);
        let mut inbox = Inbox::new(1 << 20);
        assert!(matches!(
            inbox.route(msg.clone().into_bytes(), Some("3")).unwrap(),
            Routed::Reply(Err(ClientError::Rpc { ref tag, .. })) if tag == "missing-attribute"
        ));
        assert!(matches!(inbox.route(msg.into_bytes(), None).unwrap(), Routed::Skipped));
        let plain = format!("<rpc-reply xmlns=\"{NS_BASE}\"><ok/></rpc-reply>");
        assert!(matches!(inbox.route(plain.into_bytes(), Some("3")).unwrap(), Routed::Skipped));
    }

    #[test]
    fn rfc5277_4_notifications_held_during_an_rpc_are_bounded() {
        let mut inbox = Inbox::new(1 << 20);
        for _ in 0..MAX_QUEUED {
            assert!(matches!(inbox.route(notification(1).into_bytes(), Some("1")).unwrap(), Routed::Queued));
        }
        assert!(proto(inbox.route(notification(1).into_bytes(), Some("1"))).contains("more than 1024"));
        assert_eq!(inbox.queue.len(), MAX_QUEUED);
    }

    #[test]
    fn rfc6241_3_messages_must_be_well_formed_utf8_xml() {
        let mut inbox = Inbox::new(1 << 20);
        let bad: [&[u8]; 10] = [
            b"\xff\xfe<rpc-reply/>",
            b"",
            b"just text",
            b"<!DOCTYPE x [<!ENTITY a 'b'>]><rpc-reply xmlns='urn:ietf:params:xml:ns:netconf:base:1.0'/>",
            b"<p:rpc-reply/>",
            b"<rpc-reply xmlns='urn:ietf:params:xml:ns:netconf:base:1.0' message-id='1'><ok/></rpc-repl>",
            b"<rpc-reply xmlns='urn:ietf:params:xml:ns:netconf:base:1.0' message-id='1' message-id='2'/>",
            b"<hello xmlns='urn:ietf:params:xml:ns:netconf:base:1.0'/>",
            b"<rpc-reply xmlns='urn:other' message-id='1'/>",
            b"<rpc-reply xmlns='urn:ietf:params:xml:ns:netconf:base:1.0' message-id='1'/><ok/>",
        ];
        for b in bad {
            let r = inbox.route(b.to_vec(), Some("1"));
            assert!(matches!(r, Err(ClientError::Protocol(_))), "{:?}", String::from_utf8_lossy(b));
        }
        // Inside a reply read in full: characters, references, nesting.
        for inner in ["a\u{1}b", "&#0;", "&bogus;", "<x>", "</x>", "<q:x/>"] {
            let r = parse_reply(reply(1, inner).as_bytes(), 1 << 20);
            assert!(r.is_err(), "{inner:?}");
        }
        // What is not read past the root is left to whoever reads the rest (decode.rs for
        // notifications), and a reply nobody waits for is skipped unread.
        let cut = b"<rpc-reply xmlns='urn:ietf:params:xml:ns:netconf:base:1.0' message-id='2'><".to_vec();
        assert!(matches!(inbox.route(cut, Some("1")), Ok(Routed::Skipped)));
    }

    #[test]
    fn rfc6242_4_2_framing_errors_and_oversized_messages_end_the_session() {
        let mut inbox = Inbox::new(64);
        inbox.feed(&framed(Framing::EndOfMessage, &reply(1, &"<x/>".repeat(40))));
        assert!(proto(inbox.next_message()).contains("maximum size of 64"));
        let mut inbox = Inbox::new(1 << 20);
        inbox.decoder.set_framing(Framing::Chunked);
        inbox.feed(b"\n#04\n<ok/");
        assert!(proto(inbox.next_message()).contains("chunked"));
    }

    #[test]
    fn rfc8641_4_4_1_establish_on_change_is_what_our_server_accepts() {
        use crate::push::params::{establish, Filter, Target, Trigger};
        let filter = format!("<cats-sma xmlns=\"{CATS}\"><metric-cache/><services/></cats-sma>");
        for dampening in [0, 50] {
            let xml = establish_on_change(&filter, dampening);
            let op = crate::xml::parse(&xml).unwrap();
            assert!(op.is(NS_SN, "establish-subscription"));
            let names: Vec<(&str, &str)> =
                op.children.iter().map(|c| (c.ns.as_deref().unwrap_or(""), c.name.as_str())).collect();
            assert_eq!(names, [(NS_YP, "datastore"), (NS_YP, "datastore-subtree-filter"), (NS_YP, "on-change")]);
            let ds = &op.children[0];
            assert_eq!(ds.trimmed(), "ds:operational");
            assert_eq!(ds.scope.resolve(Some("ds")), Some(NS_DS), "an identity of ietf-datastores");
            let on_change: Vec<(&str, &str, &str)> = op.children[2]
                .children
                .iter()
                .map(|c| (c.ns.as_deref().unwrap_or(""), c.name.as_str(), c.trimmed()))
                .collect();
            let mut want = vec![(NS_YP, "sync-on-start", "true")];
            if dampening > 0 {
                want.insert(0, (NS_YP, "dampening-period", "50"));
            }
            assert_eq!(on_change, want);
            let p = establish(&op, &xml, &Default::default()).unwrap_or_else(|e| panic!("{e:?}: {xml}"));
            let Target::Datastore { datastore, selection, trigger } = p.target else { panic!("a datastore target") };
            assert_eq!(datastore, crate::datastore::Datastore::Operational);
            assert_eq!(trigger, Trigger::OnChange { dampening_cs: dampening, sync_on_start: true, excluded: vec![] });
            let Some(Filter::Subtree(_, text)) = selection else { panic!("a subtree filter") };
            let f = crate::xml::parse(&text).unwrap();
            assert!(f.is(CATS, "cats-sma"));
            assert!(f.child(CATS, "metric-cache").is_some() && f.child(CATS, "services").is_some(), "{text}");
        }
    }

    #[test]
    fn rfc8639_2_4_2_subscription_id_from_the_reply() {
        assert_eq!(subscription_id(&format!("<id xmlns=\"{NS_SN}\">52</id>")).unwrap(), 52);
        let with_revision = format!(
            "\n<id xmlns=\"{NS_SN}\"> 7 </id>\n<replay-start-time-revision xmlns=\"{NS_SN}\">\
             2026-01-01T00:00:00Z</replay-start-time-revision>"
        );
        assert_eq!(subscription_id(&with_revision).unwrap(), 7);
        assert_eq!(subscription_id(&format!("<s:id xmlns:s=\"{NS_SN}\">4294967295</s:id>")).unwrap(), u32::MAX);
        for bad in [
            String::new(),
            "<ok/>".to_string(),
            "<id>5</id>".to_string(),
            format!("<id xmlns=\"{NS_YP}\">5</id>"),
            format!("<id xmlns=\"{NS_SN}\">-1</id>"),
            format!("<id xmlns=\"{NS_SN}\">4294967296</id>"),
            format!("<id xmlns=\"{NS_SN}\">x</id>"),
            format!("<id xmlns=\"{NS_SN}\"><n>5</n></id>"),
            format!("<id xmlns=\"{NS_SN}\">1</id><id xmlns=\"{NS_SN}\">2</id>"),
            format!("<x><id xmlns=\"{NS_SN}\">5</id></x>"),
            format!("<id xmlns=\"{NS_SN}\">5"),
            format!("5<id xmlns=\"{NS_SN}\">5</id>"),
        ] {
            assert!(matches!(subscription_id(&bad), Err(ClientError::Protocol(_))), "{bad}");
        }
    }

    #[test]
    fn rfc4251_4_1_host_key_pin_by_key_line_base64_body_or_fingerprint() {
        let fp = |p: HostKeyPin| pin_fingerprint(&p).map(|f| f.to_string());
        let body = KEY1.split_whitespace().nth(1).unwrap();
        for pin in [
            HostKeyPin::Key(KEY1.into()),
            HostKeyPin::Key(format!("  {KEY1}\n")),
            HostKeyPin::Key(KEY1.trim_end_matches(" sub1").into()),
            HostKeyPin::Key(body.into()),
            HostKeyPin::Fingerprint(KEY1_FP.into()),
            HostKeyPin::Fingerprint(format!(" {KEY1_FP}=\n")),
        ] {
            assert_eq!(fp(pin).unwrap(), KEY1_FP);
        }
        assert_eq!(fp(HostKeyPin::Key(KEY2.into())).unwrap(), KEY2_FP);
        for bad in [
            HostKeyPin::Key(String::new()),
            HostKeyPin::Key("ssh-ed25519".into()),
            HostKeyPin::Key(format!("ssh-rsa {body}")),
            HostKeyPin::Key("ssh-ed25519 AAAAnotakey".into()),
            HostKeyPin::Fingerprint(String::new()),
            HostKeyPin::Fingerprint(KEY1_FP.trim_start_matches("SHA256:").into()),
            HostKeyPin::Fingerprint(KEY1_FP.replace("SHA256", "MD5")),
            HostKeyPin::Fingerprint("SHA256:dc6DG3Xfu4e0a7uX3Wc6".into()),
            HostKeyPin::Fingerprint("SHA512:dc6DG3Xfu4e0a7uX3Wc6GzQY7Qc/sS+tBD0e5JIkqJg".into()),
            HostKeyPin::Fingerprint("SHA256:!!!!".into()),
        ] {
            assert!(fp(bad).is_err());
        }
    }

    #[tokio::test]
    async fn rfc4251_4_1_the_pinned_key_is_accepted_and_any_other_refused() {
        let key = |line: &str| parse_public_key_base64(line.split_whitespace().nth(1).unwrap()).unwrap();
        let seen = Arc::new(Mutex::new(None));
        let pin = pin_fingerprint(&HostKeyPin::Fingerprint(KEY1_FP.into())).unwrap();
        let mut v = Verifier { pin, seen: seen.clone() };
        assert!(v.check_server_key(&PublicKeyOrCertificate::from(key(KEY1))).await.unwrap());
        assert_eq!(lock(&seen).clone(), Some((KEY1_FP.to_string(), true)));
        // A re-key presenting another key is refused, and the caller learns which it was.
        assert!(!v.check_server_key(&PublicKeyOrCertificate::from(key(KEY2))).await.unwrap());
        assert_eq!(lock(&seen).clone(), Some((KEY2_FP.to_string(), false)));
    }
}
