//! The one error vocabulary of the management plane: RFC 6241 Appendix A rpc-errors.
//! The datastore layer raises them, NETCONF serialises them as `<rpc-error>`, RESTCONF maps
//! them to RFC 8040 section 7 status codes; nobody invents a second set.

use std::fmt;

/// RFC 6241 Appendix A error-tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorTag {
    InUse,
    InvalidValue,
    TooBig,
    MissingAttribute,
    BadAttribute,
    UnknownAttribute,
    MissingElement,
    BadElement,
    UnknownElement,
    UnknownNamespace,
    AccessDenied,
    LockDenied,
    ResourceDenied,
    RollbackFailed,
    DataExists,
    DataMissing,
    OperationNotSupported,
    OperationFailed,
    PartialOperation,
    MalformedMessage,
}

impl ErrorTag {
    pub const ALL: [ErrorTag; 20] = [
        ErrorTag::InUse,
        ErrorTag::InvalidValue,
        ErrorTag::TooBig,
        ErrorTag::MissingAttribute,
        ErrorTag::BadAttribute,
        ErrorTag::UnknownAttribute,
        ErrorTag::MissingElement,
        ErrorTag::BadElement,
        ErrorTag::UnknownElement,
        ErrorTag::UnknownNamespace,
        ErrorTag::AccessDenied,
        ErrorTag::LockDenied,
        ErrorTag::ResourceDenied,
        ErrorTag::RollbackFailed,
        ErrorTag::DataExists,
        ErrorTag::DataMissing,
        ErrorTag::OperationNotSupported,
        ErrorTag::OperationFailed,
        ErrorTag::PartialOperation,
        ErrorTag::MalformedMessage,
    ];

    /// The error-tag string as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorTag::InUse => "in-use",
            ErrorTag::InvalidValue => "invalid-value",
            ErrorTag::TooBig => "too-big",
            ErrorTag::MissingAttribute => "missing-attribute",
            ErrorTag::BadAttribute => "bad-attribute",
            ErrorTag::UnknownAttribute => "unknown-attribute",
            ErrorTag::MissingElement => "missing-element",
            ErrorTag::BadElement => "bad-element",
            ErrorTag::UnknownElement => "unknown-element",
            ErrorTag::UnknownNamespace => "unknown-namespace",
            ErrorTag::AccessDenied => "access-denied",
            ErrorTag::LockDenied => "lock-denied",
            ErrorTag::ResourceDenied => "resource-denied",
            ErrorTag::RollbackFailed => "rollback-failed",
            ErrorTag::DataExists => "data-exists",
            ErrorTag::DataMissing => "data-missing",
            ErrorTag::OperationNotSupported => "operation-not-supported",
            ErrorTag::OperationFailed => "operation-failed",
            ErrorTag::PartialOperation => "partial-operation",
            ErrorTag::MalformedMessage => "malformed-message",
        }
    }

    /// HTTP status for RESTCONF (RFC 8040 section 7, table of error-tag mappings).
    pub fn http_status(self) -> u16 {
        match self {
            ErrorTag::InUse | ErrorTag::LockDenied | ErrorTag::DataExists => 409,
            ErrorTag::InvalidValue
            | ErrorTag::MissingAttribute
            | ErrorTag::BadAttribute
            | ErrorTag::UnknownAttribute
            | ErrorTag::BadElement
            | ErrorTag::UnknownElement
            | ErrorTag::UnknownNamespace
            | ErrorTag::MalformedMessage
            | ErrorTag::MissingElement => 400,
            ErrorTag::TooBig => 413,
            ErrorTag::AccessDenied => 403,
            ErrorTag::ResourceDenied => 409,
            ErrorTag::RollbackFailed | ErrorTag::OperationFailed | ErrorTag::PartialOperation => 500,
            ErrorTag::DataMissing => 409,
            ErrorTag::OperationNotSupported => 501,
        }
    }
}

/// RFC 6241 section 4.3 error-type: the conceptual layer where the error occurred.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorType {
    Transport,
    Rpc,
    Protocol,
    Application,
}

impl ErrorType {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::Transport => "transport",
            ErrorType::Rpc => "rpc",
            ErrorType::Protocol => "protocol",
            ErrorType::Application => "application",
        }
    }
}

/// One `<rpc-error>`: tag, type, path, message and the Appendix A error-info elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    pub tag: ErrorTag,
    pub error_type: ErrorType,
    pub app_tag: Option<String>,
    /// Instance identifier of the offending node (JSON-style module prefixes).
    pub path: Option<String>,
    pub message: String,
    pub bad_attribute: Option<String>,
    pub bad_element: Option<String>,
    pub bad_namespace: Option<String>,
    /// session-id of the lock holder (lock-denied, in-use).
    pub session_id: Option<u32>,
}

impl RpcError {
    pub fn new(tag: ErrorTag, error_type: ErrorType, message: impl Into<String>) -> Self {
        RpcError {
            tag,
            error_type,
            app_tag: None,
            path: None,
            message: message.into(),
            bad_attribute: None,
            bad_element: None,
            bad_namespace: None,
            session_id: None,
        }
    }
    pub fn application(tag: ErrorTag, message: impl Into<String>) -> Self {
        Self::new(tag, ErrorType::Application, message)
    }
    pub fn protocol(tag: ErrorTag, message: impl Into<String>) -> Self {
        Self::new(tag, ErrorType::Protocol, message)
    }
    pub fn with_path(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }
    pub fn with_app_tag(mut self, tag: impl Into<String>) -> Self {
        self.app_tag = Some(tag.into());
        self
    }
    pub fn with_bad_element(mut self, e: impl Into<String>) -> Self {
        self.bad_element = Some(e.into());
        self
    }
    pub fn with_bad_attribute(mut self, a: impl Into<String>) -> Self {
        self.bad_attribute = Some(a.into());
        self
    }
    pub fn with_session_id(mut self, id: u32) -> Self {
        self.session_id = Some(id);
        self
    }

    /// Maps a libyang error to the tag RFC 7950 section 15 and RFC 6241 Appendix A ask for.
    pub fn from_libyang(e: &yang2::Error) -> Self {
        let msg = e.msg.clone().unwrap_or_else(|| format!("libyang error {}", e.errcode));
        // The first double-quoted word of libyang's message names the offending element
        // or namespace.
        let quoted = msg.split('"').nth(1).map(str::to_owned);
        let restriction = restriction_messages().contains(msg.as_str());
        let (tag, bad_element, bad_namespace) = match e.apptag.as_deref() {
            // RFC 7950 8.3.1: a value breaking a pattern, length or range is invalid-value,
            // with the restriction's own error-message (and app-tag), which replace libyang's.
            _ if restriction => (ErrorTag::InvalidValue, None, None),
            // RFC 7950 15.1-15.4: unique, max/min-elements, must → operation-failed.
            Some("data-not-unique" | "too-many-elements" | "too-few-elements" | "must-violation") => {
                (ErrorTag::OperationFailed, None, None)
            }
            // RFC 7950 15.5 and 15.6: require-instance and mandatory choice → data-missing.
            Some("instance-required" | "missing-choice") => (ErrorTag::DataMissing, None, None),
            Some(_) => (ErrorTag::OperationFailed, None, None),
            None if msg.starts_with("No module with namespace") => (ErrorTag::UnknownNamespace, None, quoted),
            None if msg.starts_with("Mandatory node") => (ErrorTag::DataMissing, quoted, None),
            None if msg.contains("state node") => (ErrorTag::InvalidValue, quoted, None),
            None if msg.contains("not found as a child") || msg.starts_with("Node \"") && msg.contains("not found") => {
                (ErrorTag::UnknownElement, quoted, None)
            }
            None if msg.starts_with("Invalid")
                || msg.contains("does not satisfy")
                || msg.starts_with("Value \"")
                || msg.starts_with("Unsatisfied") =>
            {
                (ErrorTag::InvalidValue, None, None)
            }
            None if msg.starts_with("Duplicate instance") => (ErrorTag::DataExists, quoted, None),
            None if msg.starts_with("List instance is missing its key") => (ErrorTag::MissingElement, None, None),
            None => (ErrorTag::OperationFailed, None, None),
        };
        let mut err = RpcError::application(tag, msg);
        err.app_tag = e.apptag.clone();
        err.path = e.path.clone();
        err.bad_element = bad_element;
        err.bad_namespace = bad_namespace;
        err
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.tag.as_str(), self.error_type.as_str(), self.message)?;
        if let Some(p) = &self.path {
            write!(f, " at {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RpcError {}

pub type Result<T> = std::result::Result<T, RpcError>;

/// The error-messages the loaded modules give their type restrictions (pattern, length,
/// range, in every member of a union too). libyang reports a value breaking such a
/// restriction with that message in place of its own and no app-tag (unless the module
/// gives one), so the message alone tells it apart from the other validation errors.
fn restriction_messages() -> &'static std::collections::HashSet<String> {
    static SET: std::sync::OnceLock<std::collections::HashSet<String>> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        let mut out = std::collections::HashSet::new();
        for m in crate::yang::context().modules(false) {
            // An imported-only module has no compiled schema (and no data nodes).
            // SAFETY: a module of the process-wide context.
            if unsafe { (*m.as_raw()).compiled.is_null() } {
                continue;
            }
            // SAFETY: a module of the process-wide context; the callback gets that module's
            // compiled nodes (rpc input and output, notifications and actions included) and
            // `out` for data, both alive for the walk.
            unsafe {
                yang2::ffi::lysc_module_dfs_full(
                    m.as_raw(),
                    Some(collect_restrictions),
                    &mut out as *mut std::collections::HashSet<String> as *mut std::ffi::c_void,
                );
            }
        }
        out
    })
}

/// `lysc_module_dfs_full` callback of [`restriction_messages`].
unsafe extern "C" fn collect_restrictions(
    node: *mut yang2::ffi::lysc_node,
    data: *mut std::ffi::c_void,
    _continue: *mut yang2::ffi::ly_bool,
) -> yang2::ffi::LY_ERR::Type {
    use yang2::ffi::{lysc_node_leaf, lysc_node_leaflist, LYS_LEAF, LYS_LEAFLIST};
    let out = &mut *(data as *mut std::collections::HashSet<String>);
    // The nodetype says which struct the node is; the type pointers lead to compiled types
    // of the same context.
    match u32::from((*node).nodetype) {
        LYS_LEAF => restrictions_of((*(node as *const lysc_node_leaf)).type_, out),
        LYS_LEAFLIST => restrictions_of((*(node as *const lysc_node_leaflist)).type_, out),
        _ => {}
    }
    yang2::ffi::LY_ERR::LY_SUCCESS
}

/// # Safety
/// `t` is null or a compiled type of the process-wide context.
unsafe fn restrictions_of(t: *const yang2::ffi::lysc_type, out: &mut std::collections::HashSet<String>) {
    use yang2::ffi::{
        lysc_range, lysc_type_bin, lysc_type_dec, lysc_type_leafref, lysc_type_num, lysc_type_str, lysc_type_union,
        LY_DATA_TYPE as T,
    };
    let text = |p: *const std::os::raw::c_char, out: &mut std::collections::HashSet<String>| {
        if !p.is_null() {
            out.insert(std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned());
        }
    };
    let range = |r: *const lysc_range, out: &mut std::collections::HashSet<String>| {
        if !r.is_null() {
            text((*r).emsg, out);
        }
    };
    if t.is_null() {
        return;
    }
    match (*t).basetype {
        T::LY_TYPE_STRING => {
            let s = t as *const lysc_type_str;
            range((*s).length, out);
            let p = (*s).patterns;
            for i in 0..crate::yang::array_len(p) {
                text((**p.add(i)).emsg, out);
            }
        }
        T::LY_TYPE_BINARY => range((*(t as *const lysc_type_bin)).length, out),
        T::LY_TYPE_DEC64 => range((*(t as *const lysc_type_dec)).range, out),
        T::LY_TYPE_INT8
        | T::LY_TYPE_INT16
        | T::LY_TYPE_INT32
        | T::LY_TYPE_INT64
        | T::LY_TYPE_UINT8
        | T::LY_TYPE_UINT16
        | T::LY_TYPE_UINT32
        | T::LY_TYPE_UINT64 => range((*(t as *const lysc_type_num)).range, out),
        T::LY_TYPE_UNION => {
            let m = (*(t as *const lysc_type_union)).types;
            for i in 0..crate::yang::array_len(m) {
                restrictions_of(*m.add(i), out);
            }
        }
        T::LY_TYPE_LEAFREF => restrictions_of((*(t as *const lysc_type_leafref)).realtype, out),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7950 8.3.1: a value against a restriction carrying its own error-message is
    /// invalid-value, not operation-failed; a must's message (with its app-tag) is not.
    #[test]
    fn rfc7950_8_3_1_a_restriction_with_its_own_message_is_invalid_value() {
        let msg = "no control, format or line separator characters";
        assert!(restriction_messages().contains(msg), "the csci-id pattern's message");
        let e = |msg: &str, apptag: Option<&str>| yang2::Error {
            errcode: yang2::ffi::LY_ERR::LY_EVALID,
            msg: Some(msg.into()),
            path: None,
            apptag: apptag.map(Into::into),
        };
        assert_eq!(RpcError::from_libyang(&e(msg, None)).tag, ErrorTag::InvalidValue);
        let must = "An SCI with a credential-ref cannot be 'authentication none'.";
        assert!(!restriction_messages().contains(must));
        assert_eq!(RpcError::from_libyang(&e(must, Some("must-violation"))).tag, ErrorTag::OperationFailed);
    }
}
