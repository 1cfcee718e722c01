//! Wire format of YANG-Push: the notification envelope, push-update and push-change-update
//! (RFC 8641 section 3.7, a YANG Patch of RFC 8072 with RESTCONF targets), and the
//! subscription state notifications (RFC 8639 section 2.7), in XML as NETCONF carries them
//! (RFC 8640: RFC 5277's `<notification>`) and in JSON (RFC 7951, wrapped as RFC 8040
//! section 6.4 wraps an event: `{"ietf-restconf:notification": {"eventTime": ..., ...}}`).
//! The high-volume messages are written straight from their parts in either encoding; the
//! rare ones (state notifications with terms, stream events) are written as XML and
//! converted through the schema. Pure text, no I/O.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::params::EditOp;
use super::{NS_SN, NS_YP};
use crate::mgmt::events::NS_NOTIFICATION;
pub use crate::notif::Encoding;
use crate::text::xml as escape_text;
use yang2::data::{DataFormat, DataOperation, DataPrinterFlags, DataTree};

/// One YANG Patch edit.
#[derive(Clone, Debug, PartialEq)]
pub struct Edit {
    /// RESTCONF data resource identifier (RFC 8040 section 3.5.3).
    pub target: String,
    pub op: EditOp,
    /// The target node itself (for create/replace), in the subscription's encoding: XML,
    /// or a JSON object with the node as its one member (RFC 8072 section 2.3's `value`).
    pub value: Option<String>,
}

/// The member that wraps a JSON notification (RFC 8040 section 6.4).
pub const JSON_ENVELOPE: &str = "ietf-restconf:notification";

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// The start of a JSON notification, up to the content member's value.
fn json_head(name: &str, capacity: usize) -> String {
    let mut s = String::with_capacity(capacity + 128);
    let _ = write!(s, "{{\"{JSON_ENVELOPE}\":{{\"eventTime\":\"{}\",\"{name}\":", now());
    s
}

/// A complete message from the XML content element of a notification (`<name xmlns=..>`),
/// in `enc`: XML as it is, JSON through the schema (None if the schema refuses it).
pub fn message(enc: Encoding, time: DateTime<Utc>, body: &str) -> Option<String> {
    let stamp = time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    if enc == Encoding::Xml {
        return Some(format!(
            "<notification xmlns=\"{NS_NOTIFICATION}\"><eventTime>{stamp}</eventTime>{body}</notification>"
        ));
    }
    let ctx = crate::yang::context();
    let mut text = body.as_bytes().to_vec();
    text.push(0);
    let tree = DataTree::parse_op_string(ctx, &text, DataFormat::XML, DataOperation::NotificationYang).ok()?;
    let printed = crate::yang::PrintText::print_text(
        &tree,
        DataFormat::JSON,
        DataPrinterFlags::WITH_SIBLINGS | DataPrinterFlags::SHRINK,
    )
    .ok()??;
    let content: serde_json::Value = serde_json::from_str(&printed).ok()?;
    let serde_json::Value::Object(members) = content else { return None };
    // eventTime first, as every JSON message here starts (see `netconf_json`).
    let mut s = format!("{{\"{JSON_ENVELOPE}\":{{\"eventTime\":\"{stamp}\"");
    for (k, v) in members {
        let _ = write!(s, ",{}:{v}", json_str(&k));
    }
    s.push_str("}}");
    Some(s)
}

/// The namespace of `json-notification`.
pub const NS_NETCONF_SERVER: &str = "urn:cats-sma:yang:cats-sma-netconf-server";

/// A JSON message (as this module writes it: the RFC 8040 envelope with eventTime first)
/// as NETCONF sends it: an RFC 5277 `<notification>` with the same eventTime, whose content
/// is `cats-sma-netconf-server:json-notification` holding the JSON text. NETCONF's message
/// layer is XML (RFC 6241 section 4); this keeps every NETCONF client's notification
/// handling working while the subscriber gets RFC 7951 text, the same as RESTCONF's.
pub fn netconf_json(json: &str) -> String {
    let head = format!("{{\"{JSON_ENVELOPE}\":{{\"eventTime\":\"");
    let stamp = json
        .strip_prefix(head.as_str())
        .and_then(|rest| rest.split_once('"'))
        .map(|(t, _)| t.to_owned())
        .unwrap_or_else(now);
    let mut s = String::with_capacity(json.len() + 256);
    let _ = write!(
        s,
        "<notification xmlns=\"{NS_NOTIFICATION}\"><eventTime>{}</eventTime>\
         <json-notification xmlns=\"{NS_NETCONF_SERVER}\"><message>",
        escape_text(&stamp)
    );
    crate::text::push_xml_text(&mut s, json);
    s.push_str("</message></json-notification></notification>");
    s
}

pub fn now() -> String {
    time(Utc::now())
}

pub fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// `<notification>` around a body.
pub fn notification(body: &str) -> String {
    format!("<notification xmlns=\"{NS_NOTIFICATION}\"><eventTime>{}</eventTime>{body}</notification>", now())
}

/// push-update (RFC 8641): `contents` is the selected data, already filtered and
/// NACM-pruned (the children of datastore-contents).
pub fn push_update(id: u32, contents: &str, incomplete: bool) -> String {
    push_update_in(Encoding::Xml, id, contents, incomplete)
}

/// push-update in `enc`; `contents` is in that encoding (JSON: one object whose members
/// are the selected top-level nodes, `{}` when nothing is selected).
pub fn push_update_in(enc: Encoding, id: u32, contents: &str, incomplete: bool) -> String {
    if enc != Encoding::Xml {
        let mut s = json_head("ietf-yang-push:push-update", contents.len());
        let _ = write!(s, "{{\"id\":{id},\"datastore-contents\":");
        s.push_str(if contents.trim().is_empty() { "{}" } else { contents });
        if incomplete {
            s.push_str(",\"incomplete-update\":[null]");
        }
        s.push_str("}}}");
        return s;
    }
    let inc = if incomplete { "<incomplete-update/>" } else { "" };
    // One buffer, one copy of the contents (a whole metric cache is tens of MB).
    let mut s = String::with_capacity(contents.len() + 512);
    let _ = write!(
        s,
        "<notification xmlns=\"{NS_NOTIFICATION}\"><eventTime>{}</eventTime>\
         <push-update xmlns=\"{NS_YP}\"><id>{id}</id><datastore-contents>",
        now()
    );
    s.push_str(contents);
    let _ = write!(s, "</datastore-contents>{inc}</push-update></notification>");
    s
}

/// push-change-update carrying a YANG Patch.
pub fn push_change_update(id: u32, patch_id: u64, edits: &[Edit], incomplete: bool) -> String {
    push_change_update_in(Encoding::Xml, id, patch_id, edits, incomplete)
}

/// push-change-update in `enc` (the edits' values are in that encoding).
pub fn push_change_update_in(enc: Encoding, id: u32, patch_id: u64, edits: &[Edit], incomplete: bool) -> String {
    if enc != Encoding::Xml {
        let size = edits.iter().map(|e| e.value.as_ref().map_or(0, |v| v.len()) + 96).sum::<usize>();
        let mut s = json_head("ietf-yang-push:push-change-update", size);
        let _ =
            write!(s, "{{\"id\":{id},\"datastore-changes\":{{\"yang-patch\":{{\"patch-id\":\"{patch_id}\",\"edit\":[");
        for (i, e) in edits.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                "{{\"edit-id\":\"edit{}\",\"operation\":\"{}\",\"target\":{}",
                i + 1,
                e.op.yang(),
                json_str(&e.target)
            );
            if let Some(v) = &e.value {
                let _ = write!(s, ",\"value\":{v}");
            }
            s.push('}');
        }
        s.push_str("]}}");
        if incomplete {
            s.push_str(",\"incomplete-update\":[null]");
        }
        s.push_str("}}}");
        return s;
    }
    let mut s =
        String::with_capacity(256 + edits.iter().map(|e| e.value.as_ref().map_or(0, |v| v.len()) + 96).sum::<usize>());
    let _ = write!(
        s,
        "<push-change-update xmlns=\"{NS_YP}\"><id>{id}</id><datastore-changes><yang-patch><patch-id>{patch_id}</patch-id>"
    );
    for (i, e) in edits.iter().enumerate() {
        let _ = write!(
            s,
            "<edit><edit-id>edit{}</edit-id><operation>{}</operation><target>{}</target>",
            i + 1,
            e.op.yang(),
            escape_text(&e.target)
        );
        if let Some(v) = &e.value {
            let _ = write!(s, "<value>{v}</value>");
        }
        s.push_str("</edit>");
    }
    s.push_str("</yang-patch></datastore-changes>");
    if incomplete {
        s.push_str("<incomplete-update/>");
    }
    s.push_str("</push-change-update>");
    notification(&s)
}

/// A state notification with just the id (replay-completed, subscription-resumed).
pub fn state(name: &str, id: u32) -> String {
    state_in(Encoding::Xml, name, id)
}

pub fn state_in(enc: Encoding, name: &str, id: u32) -> String {
    if enc != Encoding::Xml {
        let mut s = json_head(&format!("ietf-subscribed-notifications:{name}"), 16);
        let _ = write!(s, "{{\"id\":{id}}}}}}}");
        return s;
    }
    notification(&format!("<{name} xmlns=\"{NS_SN}\"><id>{id}</id></{name}>"))
}

/// subscription-suspended / subscription-terminated with a reason identity of
/// ietf-subscribed-notifications.
pub fn state_with_reason(name: &str, id: u32, reason: &str) -> String {
    state_with_reason_in(Encoding::Xml, name, id, reason)
}

pub fn state_with_reason_in(enc: Encoding, name: &str, id: u32, reason: &str) -> String {
    if enc != Encoding::Xml {
        let mut s = json_head(&format!("ietf-subscribed-notifications:{name}"), 64);
        let _ = write!(s, "{{\"id\":{id},\"reason\":\"ietf-subscribed-notifications:{reason}\"}}}}}}");
        return s;
    }
    notification(&format!(
        "<{name} xmlns=\"{NS_SN}\"><id>{id}</id><reason xmlns:sn=\"{NS_SN}\">sn:{reason}</reason></{name}>"
    ))
}

/// Converts a libyang data path (`/m:a/b[k='v']/c`) to a RESTCONF data resource
/// identifier (`/m:a/b=v/c`), percent-encoding key values (RFC 8040 section 3.5.3).
pub fn restconf_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    let mut chars = path.chars().peekable();
    let mut first_key = true;
    while let Some(c) = chars.next() {
        match c {
            '[' => {
                // [name='value'] or [.='value']: keep the value only.
                while let Some(&n) = chars.peek() {
                    if n == '\'' || n == '"' {
                        break;
                    }
                    chars.next();
                }
                let Some(q) = chars.next() else { break };
                let mut value = String::new();
                for n in chars.by_ref() {
                    if n == q {
                        break;
                    }
                    value.push(n);
                }
                // The closing bracket.
                for n in chars.by_ref() {
                    if n == ']' {
                        break;
                    }
                }
                out.push(if first_key { '=' } else { ',' });
                first_key = false;
                percent_encode(&value, &mut out);
            }
            '/' => {
                first_key = true;
                out.push('/');
            }
            c => out.push(c),
        }
    }
    out
}

pub fn percent_encode(v: &str, out: &mut String) {
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use yang2::data::Data;

    #[test]
    fn restconf_targets_follow_rfc8040_3_5_3() {
        assert_eq!(
            restconf_path("/cats-sma:cats-sma/metric-cache/entry[csci-id='188.3.67.3:67']/gas"),
            "/cats-sma:cats-sma/metric-cache/entry=188.3.67.3%3A67/gas"
        );
        assert_eq!(restconf_path("/m:l[a='x,y'][b=\"o'k\"]"), "/m:l=x%2Cy,o%27k");
        assert_eq!(restconf_path("/m:ll[.='a b']"), "/m:ll=a%20b");
        assert_eq!(restconf_path("/m:top"), "/m:top");
    }

    #[test]
    fn rfc8641_push_update_wraps_the_contents_in_one_notification() {
        let n = push_update(3, "<a xmlns=\"urn:m\"/>", true);
        let body = n.split_once("</eventTime>").map(|(_, b)| b).unwrap();
        assert!(n.starts_with(&format!("<notification xmlns=\"{NS_NOTIFICATION}\"><eventTime>")));
        assert_eq!(
            body,
            format!(
                "<push-update xmlns=\"{NS_YP}\"><id>3</id><datastore-contents><a xmlns=\"urn:m\"/>\
                 </datastore-contents><incomplete-update/></push-update></notification>"
            )
        );
    }

    #[test]
    fn rfc8640_json_over_netconf_is_a_schema_valid_notification_carrying_the_same_text() {
        let t = Utc::now();
        for json in [
            push_update_in(Encoding::Json, 4, "{\"m:x\":\"a<b & c>d\"}", false),
            state_with_reason_in(Encoding::Json, "subscription-terminated", 4, "no-such-subscription"),
            message(Encoding::Json, t, &format!("<replay-completed xmlns=\"{NS_SN}\"><id>4</id></replay-completed>"))
                .unwrap(),
        ] {
            let n = netconf_json(&json);
            let (head, rest) = n.split_once("</eventTime>").unwrap();
            let stamp = head.rsplit_once('>').unwrap().1;
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(v[JSON_ENVELOPE]["eventTime"], stamp, "{json}");
            let body = rest.strip_suffix("</notification>").unwrap();
            // The content parses as the schema's json-notification, and its one leaf gives
            // back the JSON text unchanged.
            let mut text = body.as_bytes().to_vec();
            text.push(0);
            let tree = DataTree::parse_op_string(
                crate::yang::context(),
                &text,
                DataFormat::XML,
                DataOperation::NotificationYang,
            )
            .unwrap();
            let leaf = tree.find_path("/cats-sma-netconf-server:json-notification/message").unwrap();
            assert_eq!(leaf.value_canonical().as_deref(), Some(json.as_str()));
        }
    }

    #[test]
    fn yang_patch_lists_edits_in_order() {
        let edits = [
            Edit { target: "/m:a".into(), op: EditOp::Replace, value: Some("<a xmlns=\"urn:m\"/>".into()) },
            Edit { target: "/m:b".into(), op: EditOp::Delete, value: None },
        ];
        let n = push_change_update(7, 3, &edits, false);
        assert!(n.contains("<id>7</id>"));
        assert!(n.contains("<patch-id>3</patch-id>"));
        let a = n.find("<edit-id>edit1</edit-id><operation>replace</operation><target>/m:a</target>").unwrap();
        let b = n.find("<edit-id>edit2</edit-id><operation>delete</operation><target>/m:b</target></edit>").unwrap();
        assert!(a < b);
    }
}
