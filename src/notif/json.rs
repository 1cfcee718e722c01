//! JSON notification messages (RFC 7951 encoding of the notifications of RFC 8639 section
//! 2.7 and RFC 8641 section 3.7, wrapped as RFC 8040 section 6.4 wraps an event), written
//! from typed values, beside the XML of `push::encode`. Pure, no I/O.
//!
//! A notification is `{"<envelope>": {"eventTime": "...", "<module>:<name>": {...}}}`;
//! [`Content`] is the inner member, [`message`] adds the envelope.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::Envelope;
use crate::push::params::EditOp;

const SN: &str = "ietf-subscribed-notifications";
const YP: &str = "ietf-yang-push";

/// The content of one notification: its qualified name and its body.
#[derive(Clone, Debug, PartialEq)]
pub struct Content {
    /// `module:notification`, e.g. `ietf-yang-push:push-update`.
    pub name: String,
    pub body: Value,
}

/// The complete JSON message.
pub fn message(envelope: Envelope, event_time: DateTime<Utc>, content: &Content) -> Value {
    let mut inner = Map::with_capacity(2);
    inner.insert("eventTime".into(), Value::String(crate::push::encode::time(event_time)));
    inner.insert(content.name.clone(), content.body.clone());
    let mut outer = Map::with_capacity(1);
    outer.insert(envelope.member().into(), Value::Object(inner));
    Value::Object(outer)
}

/// RFC 7951 section 6.9: an empty leaf is `[null]`.
fn empty() -> Value {
    json!([null])
}

/// push-update (RFC 8641): `contents` holds the selected data as RFC 7951 members
/// (`{"cats-sma:cats-sma": {...}}`), already filtered and NACM-pruned.
pub fn push_update(id: u32, contents: Value, incomplete: bool) -> Content {
    let mut body = Map::with_capacity(3);
    body.insert("id".into(), id.into());
    body.insert("datastore-contents".into(), contents);
    if incomplete {
        body.insert("incomplete-update".into(), empty());
    }
    Content { name: format!("{YP}:push-update"), body: Value::Object(body) }
}

/// One YANG Patch edit (RFC 8072) of a push-change-update.
#[derive(Clone, Debug, PartialEq)]
pub struct Edit {
    /// RESTCONF data resource identifier (RFC 8040 section 3.5.3).
    pub target: String,
    pub op: EditOp,
    /// The target node itself, as RFC 7951 members (for create and replace).
    pub value: Option<Value>,
}

/// push-change-update carrying a YANG Patch (RFC 8641 section 3.7, RFC 8072 section 2.2's
/// JSON form).
pub fn push_change_update(id: u32, patch_id: u64, edits: &[Edit], incomplete: bool) -> Content {
    let edit: Vec<Value> = edits
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut m = Map::with_capacity(4);
            m.insert("edit-id".into(), format!("edit{}", i + 1).into());
            m.insert("operation".into(), e.op.yang().into());
            m.insert("target".into(), e.target.clone().into());
            if let Some(v) = &e.value {
                m.insert("value".into(), v.clone());
            }
            Value::Object(m)
        })
        .collect();
    let mut body = Map::with_capacity(3);
    body.insert("id".into(), id.into());
    body.insert(
        "datastore-changes".into(),
        json!({ "yang-patch": { "patch-id": patch_id.to_string(), "edit": edit } }),
    );
    if incomplete {
        body.insert("incomplete-update".into(), empty());
    }
    Content { name: format!("{YP}:push-change-update"), body: Value::Object(body) }
}

/// A subscription state notification with just the id (replay-completed,
/// subscription-resumed, subscription-completed).
pub fn state(name: &str, id: u32) -> Content {
    Content { name: format!("{SN}:{name}"), body: json!({ "id": id }) }
}

/// subscription-suspended or subscription-terminated with a reason identity of
/// ietf-subscribed-notifications (e.g. `no-such-subscription`).
pub fn state_with_reason(name: &str, id: u32, reason: &str) -> Content {
    Content { name: format!("{SN}:{name}"), body: json!({ "id": id, "reason": format!("{SN}:{reason}") }) }
}

/// subscription-started or subscription-modified (RFC 8639 section 2.7.1): the id and
/// the subscription's policy, as RFC 7951 members of the notification (`stream` or
/// `ietf-yang-push:datastore`, the filter, `encoding`, the trigger, ...).
pub fn subscription_policy(name: &str, id: u32, policy: Map<String, Value>) -> Content {
    let mut body = Map::with_capacity(policy.len() + 1);
    body.insert("id".into(), id.into());
    body.extend(policy);
    Content { name: format!("{SN}:{name}"), body: Value::Object(body) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T10:00:00.5Z").unwrap().with_timezone(&Utc)
    }

    #[test]
    fn rfc8040_6_4_envelope_carries_event_time_and_one_notification() {
        let c = push_update(7, json!({"cats-sma:cats-sma": {"agent": {"csma-id": "c1"}}}), true);
        let m = message(Envelope::Restconf, at(), &c);
        assert_eq!(
            m,
            json!({"ietf-restconf:notification": {
                "eventTime": "2026-12-01T10:00:00.500000Z",
                "ietf-yang-push:push-update": {
                    "id": 7,
                    "datastore-contents": {"cats-sma:cats-sma": {"agent": {"csma-id": "c1"}}},
                    "incomplete-update": [null]
                }
            }})
        );
        let h = message(Envelope::HttpsNotif, at(), &c);
        assert!(h.get("ietf-https-notif:notification").is_some());
    }

    #[test]
    fn rfc8072_yang_patch_in_json_lists_edits_in_order() {
        let edits = [
            Edit { target: "/m:a".into(), op: EditOp::Replace, value: Some(json!({"m:a": {"x": 1}})) },
            Edit { target: "/m:b".into(), op: EditOp::Delete, value: None },
        ];
        let c = push_change_update(3, 9, &edits, false);
        assert_eq!(c.name, "ietf-yang-push:push-change-update");
        let patch = &c.body["datastore-changes"]["yang-patch"];
        assert_eq!(patch["patch-id"], "9");
        assert_eq!(
            patch["edit"][0],
            json!({"edit-id": "edit1", "operation": "replace", "target": "/m:a", "value": {"m:a": {"x": 1}}})
        );
        assert_eq!(patch["edit"][1], json!({"edit-id": "edit2", "operation": "delete", "target": "/m:b"}));
        assert!(c.body.get("incomplete-update").is_none());
    }

    #[test]
    fn rfc8639_2_7_state_notifications_name_their_reason_identity() {
        let t = state_with_reason("subscription-terminated", 4, "no-such-subscription");
        assert_eq!(t.name, "ietf-subscribed-notifications:subscription-terminated");
        assert_eq!(t.body, json!({"id": 4, "reason": "ietf-subscribed-notifications:no-such-subscription"}));
        assert_eq!(state("subscription-resumed", 4).body, json!({"id": 4}));
        let mut p = Map::new();
        p.insert("stream".into(), "NETCONF".into());
        let s = subscription_policy("subscription-started", 4, p);
        assert_eq!(s.body, json!({"id": 4, "stream": "NETCONF"}));
    }
}
