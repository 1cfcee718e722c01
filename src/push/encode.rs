//! Wire format of YANG-Push on NETCONF (RFC 8640): the notification envelope, push-update
//! and push-change-update (RFC 8641 section 3.7, a YANG Patch of RFC 8072 with RESTCONF
//! targets), and the subscription state notifications (RFC 8639 section 2.7). Pure text,
//! no I/O.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::params::EditOp;
use super::{NS_SN, NS_YP};
use crate::mgmt::events::NS_NOTIFICATION;
use crate::text::xml as escape_text;

/// One YANG Patch edit.
#[derive(Clone, Debug, PartialEq)]
pub struct Edit {
    /// RESTCONF data resource identifier (RFC 8040 section 3.5.3).
    pub target: String,
    pub op: EditOp,
    /// The target node itself, as XML (for create/replace).
    pub value: Option<String>,
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
    notification(&format!("<{name} xmlns=\"{NS_SN}\"><id>{id}</id></{name}>"))
}

/// subscription-suspended / subscription-terminated with a reason identity of
/// ietf-subscribed-notifications.
pub fn state_with_reason(name: &str, id: u32, reason: &str) -> String {
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
