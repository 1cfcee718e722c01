//! `<create-subscription>` (RFC 5277 section 2.1.1): the NETCONF stream, an optional
//! subtree/XPath filter, startTime replay and stopTime.

use super::{one, Body, OpResult, SessionCtx};
use crate::error::{ErrorTag, RpcError};
use crate::mgmt::events::{parse_time, NotificationFilter, SubscriptionSpec, NETCONF_STREAM, NS_NOTIFICATION};
use crate::mgmt::filter::Filter;
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element, src: &str) -> OpResult {
    let param = |name: &str| op.child(NS_NOTIFICATION, name);
    if let Some(stream) = param("stream") {
        if stream.trimmed() != NETCONF_STREAM {
            return Err(one(RpcError::protocol(
                ErrorTag::InvalidValue,
                format!("no stream \"{}\"; this server has NETCONF", stream.trimmed()),
            )
            .with_bad_element("stream")));
        }
    }
    let start = param("startTime").map(|t| parse_time(&t.text, "startTime")).transpose().map_err(one)?;
    let stop = param("stopTime").map(|t| parse_time(&t.text, "stopTime")).transpose().map_err(one)?;
    if stop.is_some() && start.is_none() {
        // RFC 5277 2.1.1: stopTime without startTime is an error.
        return Err(one(
            RpcError::protocol(ErrorTag::MissingElement, "stopTime needs startTime").with_bad_element("startTime")
        ));
    }
    if let (Some(s), Some(e)) = (start, stop) {
        if e < s {
            return Err(one(RpcError::protocol(ErrorTag::BadElement, "stopTime is earlier than startTime")
                .with_bad_element("stopTime")));
        }
    }
    if start.is_some_and(|s| s > chrono::Utc::now()) {
        return Err(one(
            RpcError::protocol(ErrorTag::BadElement, "startTime is in the future").with_bad_element("startTime")
        ));
    }
    let filter = match param("filter") {
        None => None,
        Some(f) => Some(NotificationFilter::from_filter(&Filter::parse(f).map_err(one)?, src).map_err(one)?),
    };
    if ctx.subscribed.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return Err(one(RpcError::protocol(
            ErrorTag::InUse,
            "this session already has a subscription (RFC 5277 allows one)",
        )));
    }
    *ctx.new_subscription.lock().unwrap_or_else(|e| e.into_inner()) = Some(SubscriptionSpec { start, stop, filter });
    Ok(Body::Ok)
}
