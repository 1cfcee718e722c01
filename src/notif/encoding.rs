//! The encodings a notification message is sent in (RFC 8639 `encoding`, the UDP-notif
//! media types of draft-ietf-netconf-udp-notif section 3.2) and one notification ready
//! to be rendered in any of them, so a transport picks the encoding its receiver wants
//! (HTTPS-notif learns it from the receiver's capabilities) without the producer knowing.

use chrono::{DateTime, Utc};

use super::json;

/// One encoding of a notification message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// RFC 7951 JSON (`sn:encode-json`), media type application/yang-data+json.
    Json,
    /// XML as RFC 5277 writes it (`sn:encode-xml`), application/yang-data+xml.
    Xml,
    /// CBOR (RFC 9254) with names as identifiers (`csnr:encode-cbor`, the `id=name` form of
    /// application/yang-data+cbor): the JSON tree in CBOR's data model; YANG SIDs are not
    /// supported.
    Cbor,
}

impl Encoding {
    /// The media type of a message in this encoding (RFC 8040 section 11.3, RFC 9254
    /// section 7).
    pub fn media_type(self) -> &'static str {
        match self {
            Encoding::Json => "application/yang-data+json",
            Encoding::Xml => "application/yang-data+xml",
            Encoding::Cbor => "application/yang-data+cbor; id=name",
        }
    }

    /// The identity of ietf-subscribed-notifications (or cats-sma-notif-receivers for
    /// CBOR) that names this encoding in the `encoding` leaf.
    pub fn identity(self) -> &'static str {
        match self {
            Encoding::Json => "ietf-subscribed-notifications:encode-json",
            Encoding::Xml => "ietf-subscribed-notifications:encode-xml",
            Encoding::Cbor => "cats-sma-notif-receivers:encode-cbor",
        }
    }

    /// The encoding an `encoding` leaf names (prefix or module name before the colon).
    pub fn from_identity(identity: &str) -> Option<Encoding> {
        match identity.rsplit(':').next()? {
            "encode-json" => Some(Encoding::Json),
            "encode-xml" => Some(Encoding::Xml),
            "encode-cbor" => Some(Encoding::Cbor),
            _ => None,
        }
    }
}

/// The member that wraps a JSON notification: RFC 8040 section 6.4 names it
/// `ietf-restconf:notification`; draft-ietf-netconf-https-notif (section "Sending Event
/// Notifications") renames the module to `ietf-https-notif`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Envelope {
    Restconf,
    HttpsNotif,
}

impl Envelope {
    pub fn member(self) -> &'static str {
        match self {
            Envelope::Restconf => "ietf-restconf:notification",
            Envelope::HttpsNotif => "ietf-https-notif:notification",
        }
    }
}

/// One notification message, kept in both of its source forms: the XML message the
/// NETCONF side already writes (`<notification>` with eventTime, from `push::encode`) and
/// the JSON notification content of [`json`]. Rendering picks one; CBOR is rendered from
/// the JSON tree.
#[derive(Clone, Debug)]
pub struct Notification {
    pub event_time: DateTime<Utc>,
    /// The complete XML `<notification>` message, when the producer wrote one.
    pub xml: Option<String>,
    /// The JSON content: `{"module:name": {...}}`.
    pub json: json::Content,
}

impl Notification {
    /// The message in `encoding`; None when XML is asked and the producer wrote none.
    pub fn render(&self, encoding: Encoding, envelope: Envelope) -> Option<Vec<u8>> {
        match encoding {
            Encoding::Xml => self.xml.as_ref().map(|x| x.clone().into_bytes()),
            Encoding::Json => Some(json::message(envelope, self.event_time, &self.json).to_string().into_bytes()),
            Encoding::Cbor => {
                let tree = json::message(envelope, self.event_time, &self.json);
                let mut out = Vec::with_capacity(256);
                // Serialising a serde_json tree into a Vec cannot fail: no I/O, no
                // unrepresentable value (JSON numbers and strings all have CBOR forms).
                ciborium::into_writer(&tree, &mut out).ok()?;
                Some(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_round_trip_through_their_rfc8639_identities() {
        for e in [Encoding::Json, Encoding::Xml, Encoding::Cbor] {
            assert_eq!(Encoding::from_identity(e.identity()), Some(e));
        }
        assert_eq!(Encoding::from_identity("sn:encode-json"), Some(Encoding::Json));
        assert_eq!(Encoding::from_identity("sn:encode-sid"), None);
    }
}
