//! RFC 6243 with-defaults: the retrieval modes every front end offers (NETCONF's
//! `<with-defaults>` parameter, RESTCONF's `with-defaults` query parameter, YANG-Push).

use yang2::data::DataPrinterFlags;

/// RFC 6243 with-defaults modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WithDefaults {
    ReportAll,
    ReportAllTagged,
    Trim,
    Explicit,
}

impl WithDefaults {
    /// The libyang printer flags of the mode (shared by NETCONF and RESTCONF).
    pub fn printer_flags(self) -> DataPrinterFlags {
        match self {
            WithDefaults::ReportAll => DataPrinterFlags::WD_ALL,
            WithDefaults::ReportAllTagged => DataPrinterFlags::from_bits_retain(yang2::ffi::LYD_PRINT_WD_ALL_TAG),
            WithDefaults::Trim => DataPrinterFlags::WD_TRIM,
            WithDefaults::Explicit => DataPrinterFlags::WD_EXPLICIT,
        }
    }
}

/// libyang prints the RFC 6243 `default` attribute in the YANG module's namespace; the RFC
/// (section 6) puts it in urn:ietf:params:xml:ns:netconf:default:1.0.
pub fn fix_default_attribute_ns(xml: String) -> String {
    xml.replace(
        "xmlns:ncwd=\"urn:ietf:params:xml:ns:yang:ietf-netconf-with-defaults\"",
        "xmlns:ncwd=\"urn:ietf:params:xml:ns:netconf:default:1.0\"",
    )
}
