//! The XML namespaces the management plane shares.

pub const NS_BASE: &str = "urn:ietf:params:xml:ns:netconf:base:1.0";
pub const NS_MONITORING: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-monitoring";
pub const NS_WITH_DEFAULTS: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-with-defaults";
pub const NS_NMDA: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-nmda";
pub const NS_YANG: &str = "urn:ietf:params:xml:ns:yang:1";
