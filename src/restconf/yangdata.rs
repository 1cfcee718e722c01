//! The libyang calls RESTCONF needs beyond the yang2 crate: parsing a body as the children
//! of an existing node (a RESTCONF body is the target resource, not a whole datastore),
//! operation / insert metadata on edit nodes, and RESTCONF-encoded RPC input and output.

use crate::yang::PrintText as _;
use std::ffi::CString;

use yang2::data::{Data, DataFormat, DataTree};
use yang2::ffi;

use crate::error::{ErrorTag, RpcError};

fn last_error() -> RpcError {
    RpcError::from_libyang(&yang2::Error::new(crate::yang::context()))
}

/// Owns a libyang input handler over a NUL-terminated copy of the text.
struct Input {
    raw: *mut ffi::ly_in,
    _text: Vec<u8>,
}

impl Input {
    fn new(text: &[u8]) -> Result<Input, RpcError> {
        let mut v = Vec::with_capacity(text.len() + 1);
        v.extend_from_slice(text);
        v.push(0);
        let mut raw = std::ptr::null_mut();
        // SAFETY: `v` is NUL-terminated and kept alive in the returned Input for as long as
        // the handler exists (ly_in_new_memory does not copy).
        let ret = unsafe { ffi::ly_in_new_memory(v.as_ptr() as *const std::os::raw::c_char, &mut raw) };
        if ret != ffi::LY_ERR::LY_SUCCESS {
            return Err(last_error());
        }
        Ok(Input { raw, _text: v })
    }
}

impl Drop for Input {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by ly_in_new_memory and is freed once; destroy=0 leaves
        // the buffer (ours) alone.
        unsafe { ffi::ly_in_free(self.raw, 0) };
    }
}

/// Parses `text` as children of the node at `parent_path` in `tree` (an edit fragment:
/// values type-checked, nothing else validated). Returns the instance paths of the nodes
/// the body added.
pub fn parse_under(
    tree: &mut DataTree<'static>,
    parent_path: &str,
    text: &[u8],
    format: DataFormat,
) -> Result<Vec<String>, RpcError> {
    let parent = tree.find_path(parent_path).map_err(|e| RpcError::from_libyang(&e))?;
    let before: Vec<*mut ffi::lyd_node> = parent.children().map(|c| c.as_raw()).collect();
    let parent_raw = parent.as_raw();
    let input = Input::new(text)?;
    let opts = ffi::LYD_PARSE_ONLY | ffi::LYD_PARSE_STRICT | ffi::LYD_PARSE_NO_STATE;
    // SAFETY: the context is the live 'static one; `parent_raw` is a node of `tree`, which
    // we hold mutably, so nothing else frees or moves it; parsed nodes are linked under it
    // and owned by `tree` from then on. `tree` out-parameter is NULL, allowed with a parent.
    let ret = unsafe {
        ffi::lyd_parse_data(
            crate::yang::raw_ctx(crate::yang::context()),
            parent_raw,
            input.raw,
            format as u32,
            opts,
            0,
            std::ptr::null_mut(),
        )
    };
    if ret != ffi::LY_ERR::LY_SUCCESS {
        return Err(last_error());
    }
    let parent = tree.find_path(parent_path).map_err(|e| RpcError::from_libyang(&e))?;
    Ok(parent.children().filter(|c| !before.contains(&c.as_raw())).map(|c| c.path()).collect())
}

/// Adds metadata (`ietf-netconf:operation`, `yang:insert`, `yang:key`, `yang:value`) to the
/// node at `path`.
pub fn add_meta(tree: &DataTree<'static>, path: &str, name: &str, value: &str) -> Result<(), RpcError> {
    let node = tree.find_path(path).map_err(|e| RpcError::from_libyang(&e))?;
    let name = CString::new(name).map_err(|_| RpcError::protocol(ErrorTag::InvalidValue, "NUL in a name"))?;
    let value = CString::new(value).map_err(|_| RpcError::protocol(ErrorTag::InvalidValue, "NUL in a value"))?;
    // SAFETY: `node` is a live node of `tree` (borrowed for this call); the strings outlive
    // the call; libyang resolves the module from the prefix of `name`.
    let ret = unsafe {
        ffi::lyd_new_meta(
            std::ptr::null(),
            node.as_raw(),
            std::ptr::null(),
            name.as_ptr(),
            value.as_ptr(),
            0,
            std::ptr::null_mut(),
        )
    };
    if ret != ffi::LY_ERR::LY_SUCCESS {
        return Err(last_error());
    }
    Ok(())
}

/// Parses a RESTCONF operation message (input or output) under the RPC node `op`. Like the
/// NETCONF path, values are type-checked at parse time (libyang parses operations with
/// parse-only).
fn parse_op_under(
    op: *mut ffi::lyd_node,
    input: &Input,
    format: DataFormat,
    ty: ffi::lyd_type::Type,
) -> Result<(), RpcError> {
    let mut envelope = std::ptr::null_mut();
    // SAFETY: `op` is the RPC node of a tree the caller holds mutably; parsed nodes are
    // linked under it. libyang requires the tree out-parameter and a NULL op for the
    // RESTCONF types; an envelope it may return is a separate tree we free once.
    let ret = unsafe {
        ffi::lyd_parse_op(
            crate::yang::raw_ctx(crate::yang::context()),
            op,
            input.raw,
            format as u32,
            ty,
            &mut envelope,
            std::ptr::null_mut(),
        )
    };
    if !envelope.is_null() && envelope != op {
        // SAFETY: the envelope is not linked into the caller's tree (checked above).
        unsafe { ffi::lyd_free_all(envelope) };
    }
    if ret != ffi::LY_ERR::LY_SUCCESS {
        return Err(last_error());
    }
    Ok(())
}

/// An RPC request tree for `module:name` with its input parsed from a RESTCONF body
/// (`{"module:input": {...}}` or `<input xmlns=…>`; RFC 8040 section 3.6.1), or without
/// input when the body is empty.
pub fn parse_rpc(module: &str, name: &str, body: &[u8], format: DataFormat) -> Result<DataTree<'static>, RpcError> {
    let ctx = crate::yang::context();
    let mut tree = DataTree::new(ctx);
    tree.new_path(&format!("/{module}:{name}"), None, false).map_err(|e| RpcError::from_libyang(&e))?;
    let op = tree.reference().ok_or_else(last_error)?.as_raw();
    if !body.iter().all(|b| b.is_ascii_whitespace()) {
        let input = Input::new(body)?;
        parse_op_under(op, &input, format, ffi::lyd_type::LYD_TYPE_RPC_RESTCONF)?;
    }
    Ok(tree)
}

/// RPC output children (XML, as the NETCONF handlers produce them) as a RESTCONF output
/// body: `{"module:output": {...}}` or `<output xmlns=…>…</output>`.
pub fn rpc_output(module: &str, name: &str, children_xml: &str, json: bool) -> Result<String, RpcError> {
    let ctx = crate::yang::context();
    let ns = ctx
        .get_module_implemented(module)
        .map(|m| m.namespace().to_owned())
        .ok_or_else(|| RpcError::application(ErrorTag::OperationFailed, format!("module {module} vanished")))?;
    let xml = format!("<output xmlns=\"{ns}\">{children_xml}</output>");
    if !json {
        return Ok(xml);
    }
    let mut tree = DataTree::new(ctx);
    tree.new_path(&format!("/{module}:{name}"), None, false).map_err(|e| RpcError::from_libyang(&e))?;
    let op = tree.reference().ok_or_else(last_error)?.as_raw();
    let input = Input::new(xml.as_bytes())?;
    parse_op_under(op, &input, DataFormat::XML, ffi::lyd_type::LYD_TYPE_REPLY_RESTCONF)?;
    let printed = tree
        .print_text(DataFormat::JSON, yang2::data::DataPrinterFlags::WITH_SIBLINGS)
        .map_err(|e| RpcError::from_libyang(&e))?
        .unwrap_or_default();
    // libyang prints the operation node with its output children; RESTCONF names it
    // "module:output".
    let v: serde_json::Value = serde_json::from_str(&printed)
        .map_err(|e| RpcError::application(ErrorTag::OperationFailed, format!("output encoding: {e}")))?;
    let inner = v.get(format!("{module}:{name}")).cloned().unwrap_or(serde_json::Value::Object(Default::default()));
    Ok(serde_json::json!({ format!("{module}:output"): inner }).to_string())
}
