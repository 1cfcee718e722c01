//! A libyang type plugin for our identifier strings (CSCI-ID, CS-ID, site-id) that answers
//! their pattern for plain ASCII values without running the regular expression.
//!
//! Their pattern, `[^\p{Cc}\p{Cf}\p{Zl}\p{Zp}]+`, refuses control, format and line or
//! paragraph separator characters. libyang runs it through PCRE2's interpreter for every
//! value it stores (it never JIT-compiles its patterns), allocating match data each time:
//! 11 % of a 100 000-SCI create, where every CSCI-ID and CS-ID is checked. A value of one or more
//! printable ASCII characters (0x20..=0x7E) matches that pattern by definition (those code
//! points are letters, digits, punctuation, symbols or the space), so for such a value the
//! pattern is known to hold; every other value — empty, non-ASCII, an ASCII control
//! character — and every other pattern of the type (a derived type may add its own) goes to
//! libyang's own check, which stays the one that reports errors. Storing, comparing,
//! sorting, printing and freeing are libyang's string functions.
//!
//! libyang's public plugin API (`plugins_types.h`) is not in yang2's bindings, so its
//! structures and functions are declared here, for the libyang built by libyang2-sys
//! (plugin API version 2).

use std::ffi::{c_char, c_int, c_void, CStr};

use yang2::ffi;

/// The pattern this plugin answers for ASCII values (as libyang keeps it compiled).
const IDENTIFIER_PATTERN: &CStr = c"[^\\p{Cc}\\p{Cf}\\p{Zl}\\p{Zp}]+";

/// The plugin's name, as libyang reports it for these types.
const PLUGIN_ID: &CStr = c"cats-sma - identifier string, version 1";

/// `LYPLG_TYPE_API_VERSION` of libyang 2.2.
const TYPE_API_VERSION: u32 = 2;
/// `LYPLG_TYPE_STORE_ONLY`: store without validating (validation comes later).
const STORE_ONLY: u32 = 0x08;

/// `struct lyplg_type` (plugins_types.h). The callbacks are function pointers of the
/// signatures there (`lyplg_type_store_clb` and so on), held untyped: this file only fills
/// them in, with [`store`], [`validate`] and libyang's own functions.
#[repr(C)]
struct TypePlugin {
    id: *const c_char,
    store: *const c_void,
    validate: *const c_void,
    compare: *const c_void,
    sort: *const c_void,
    print: *const c_void,
    duplicate: *const c_void,
    free: *const c_void,
    lyb_data_len: i32,
}

/// `struct lyplg_type_record` (plugins_types.h).
#[repr(C)]
struct TypeRecord {
    module: *const c_char,
    revision: *const c_char,
    name: *const c_char,
    plugin: TypePlugin,
}

unsafe extern "C" {
    fn lyplg_add_type_plugin(ctx: *mut ffi::ly_ctx, version: u32, recs: *const TypeRecord) -> ffi::LY_ERR::Type;
    fn lyplg_type_store_string(
        ctx: *const ffi::ly_ctx,
        type_: *const ffi::lysc_type,
        value: *const c_void,
        value_len: usize,
        options: u32,
        format: ffi::LY_VALUE_FORMAT::Type,
        prefix_data: *mut c_void,
        hints: u32,
        ctx_node: *const ffi::lysc_node,
        storage: *mut ffi::lyd_value,
        unres: *mut c_void,
        err: *mut *mut ffi::ly_err_item,
    ) -> ffi::LY_ERR::Type;
    fn lyplg_type_compare_simple(
        ctx: *const ffi::ly_ctx,
        val1: *const ffi::lyd_value,
        val2: *const ffi::lyd_value,
    ) -> ffi::LY_ERR::Type;
    fn lyplg_type_sort_simple(
        ctx: *const ffi::ly_ctx,
        val1: *const ffi::lyd_value,
        val2: *const ffi::lyd_value,
    ) -> c_int;
    fn lyplg_type_print_simple(
        ctx: *const ffi::ly_ctx,
        value: *const ffi::lyd_value,
        format: ffi::LY_VALUE_FORMAT::Type,
        prefix_data: *mut c_void,
        dynamic: *mut ffi::ly_bool,
        value_len: *mut usize,
    ) -> *const c_void;
    fn lyplg_type_dup_simple(
        ctx: *const ffi::ly_ctx,
        original: *const ffi::lyd_value,
        dup: *mut ffi::lyd_value,
    ) -> ffi::LY_ERR::Type;
    fn lyplg_type_free_simple(ctx: *const ffi::ly_ctx, value: *mut ffi::lyd_value);
    fn lyplg_type_validate_range(
        basetype: ffi::LY_DATA_TYPE::Type,
        range: *mut ffi::lysc_range,
        value: i64,
        strval: *const c_char,
        strval_len: usize,
        err: *mut *mut ffi::ly_err_item,
    ) -> ffi::LY_ERR::Type;
    fn lyplg_type_validate_patterns(
        patterns: *mut *mut ffi::lysc_pattern,
        str_: *const c_char,
        str_len: usize,
        err: *mut *mut ffi::ly_err_item,
    ) -> ffi::LY_ERR::Type;
}

/// The typedefs of `cats-sma-types` that carry [`IDENTIFIER_PATTERN`].
const TYPEDEFS: [&CStr; 3] = [c"csci-id", c"cs-id", c"site-id"];

struct Records([TypeRecord; TYPEDEFS.len() + 1]);

// SAFETY: the records are immutable after construction and point only at 'static C strings
// and functions; libyang reads them from any thread.
unsafe impl Sync for Records {}
// SAFETY: as above; nothing in them is owned or thread-bound.
unsafe impl Send for Records {}

fn plugin() -> TypePlugin {
    TypePlugin {
        id: PLUGIN_ID.as_ptr(),
        store: store as *const c_void,
        validate: validate as *const c_void,
        compare: lyplg_type_compare_simple as *const c_void,
        sort: lyplg_type_sort_simple as *const c_void,
        print: lyplg_type_print_simple as *const c_void,
        duplicate: lyplg_type_dup_simple as *const c_void,
        free: lyplg_type_free_simple as *const c_void,
        lyb_data_len: -1,
    }
}

fn records() -> &'static Records {
    static RECORDS: std::sync::OnceLock<Records> = std::sync::OnceLock::new();
    RECORDS.get_or_init(|| {
        let rec = |name: &'static CStr| TypeRecord {
            module: c"cats-sma-types".as_ptr(),
            revision: std::ptr::null(),
            name: name.as_ptr(),
            plugin: plugin(),
        };
        // The list ends with a zeroed record.
        let end = TypeRecord {
            module: std::ptr::null(),
            revision: std::ptr::null(),
            name: std::ptr::null(),
            plugin: TypePlugin {
                id: std::ptr::null(),
                store: std::ptr::null(),
                validate: std::ptr::null(),
                compare: std::ptr::null(),
                sort: std::ptr::null(),
                print: std::ptr::null(),
                duplicate: std::ptr::null(),
                free: std::ptr::null(),
                lyb_data_len: 0,
            },
        };
        Records([rec(TYPEDEFS[0]), rec(TYPEDEFS[1]), rec(TYPEDEFS[2]), end])
    })
}

/// Registers the plugin in `ctx`, before any module is loaded (libyang picks a type's
/// plugin when it compiles the type).
///
/// # Safety
/// `ctx` must be a live context in which no module of ours is compiled yet.
pub(super) unsafe fn register(ctx: *mut ffi::ly_ctx) -> Result<(), String> {
    let ret = lyplg_add_type_plugin(ctx, TYPE_API_VERSION, records().0.as_ptr());
    if ret == ffi::LY_ERR::LY_SUCCESS {
        Ok(())
    } else {
        Err(format!("registering the identifier string type plugin: libyang error {ret}"))
    }
}

/// A libyang sized array (`LY_ARRAY`, tree.h) of one pattern.
#[repr(C)]
struct OnePattern {
    count: u64,
    item: *mut ffi::lysc_pattern,
}

/// Whether `value` is known to match [`IDENTIFIER_PATTERN`] without running it: one or
/// more printable ASCII characters.
fn ascii_identifier(value: &[u8]) -> bool {
    !value.is_empty() && value.iter().all(|b| (0x20..=0x7e).contains(b))
}

/// The string type's validation (length, then patterns), with [`IDENTIFIER_PATTERN`]
/// answered directly for ASCII values. `storage` holds the stored canonical value.
unsafe fn check(
    type_: *const ffi::lysc_type,
    storage: *const ffi::lyd_value,
    err: *mut *mut ffi::ly_err_item,
) -> ffi::LY_ERR::Type {
    *err = std::ptr::null_mut();
    // Every typedef the plugin is registered for, and every type derived from one, is a
    // string: libyang compiled it as `struct lysc_type_str`.
    let t = type_ as *const ffi::lysc_type_str;
    let canonical = (*storage)._canonical;
    let value = CStr::from_ptr(canonical).to_bytes();
    if !(*t).length.is_null() {
        // The length counts characters (the value is valid UTF-8 once stored).
        let chars = value.iter().filter(|&&b| (b & 0xc0) != 0x80).count() as i64;
        let ret = lyplg_type_validate_range(
            ffi::LY_DATA_TYPE::LY_TYPE_STRING,
            (*t).length,
            chars,
            canonical,
            value.len(),
            err,
        );
        if ret != ffi::LY_ERR::LY_SUCCESS {
            return ret;
        }
    }
    let patterns = (*t).patterns;
    let known = ascii_identifier(value);
    for i in 0..super::array_len(patterns) {
        let p = patterns.add(i);
        if known && (**p).inverted() == 0 && CStr::from_ptr((**p).expr) == IDENTIFIER_PATTERN {
            continue;
        }
        // libyang's check of this one pattern: a sized array of one (libyang's LY_ARRAY: a
        // 64-bit count, then the items; the array is the address of the first item).
        // The item's address is taken from a pointer to the whole struct, so libyang may
        // read the count before it.
        let mut one = OnePattern { count: 1, item: *p };
        let whole: *mut OnePattern = &mut one;
        let ret = lyplg_type_validate_patterns(std::ptr::addr_of_mut!((*whole).item), canonical, value.len(), err);
        if ret != ffi::LY_ERR::LY_SUCCESS {
            return ret;
        }
    }
    ffi::LY_ERR::LY_SUCCESS
}

unsafe extern "C" fn store(
    ctx: *const ffi::ly_ctx,
    type_: *const ffi::lysc_type,
    value: *const c_void,
    value_len: usize,
    options: u32,
    format: ffi::LY_VALUE_FORMAT::Type,
    prefix_data: *mut c_void,
    hints: u32,
    ctx_node: *const ffi::lysc_node,
    storage: *mut ffi::lyd_value,
    unres: *mut c_void,
    err: *mut *mut ffi::ly_err_item,
) -> ffi::LY_ERR::Type {
    // libyang stores (UTF-8 and hint checks, the canonical value in the dictionary, a
    // dynamic value freed); the restrictions are checked here.
    let ret = lyplg_type_store_string(
        ctx,
        type_,
        value,
        value_len,
        options | STORE_ONLY,
        format,
        prefix_data,
        hints,
        ctx_node,
        storage,
        unres,
        err,
    );
    if ret != ffi::LY_ERR::LY_SUCCESS || options & STORE_ONLY != 0 {
        return ret;
    }
    let ret = check(type_, storage, err);
    if ret != ffi::LY_ERR::LY_SUCCESS {
        lyplg_type_free_simple(ctx, storage);
    }
    ret
}

unsafe extern "C" fn validate(
    _ctx: *const ffi::ly_ctx,
    type_: *const ffi::lysc_type,
    _ctx_node: *const ffi::lyd_node,
    _tree: *const ffi::lyd_node,
    storage: *mut ffi::lyd_value,
    err: *mut *mut ffi::ly_err_item,
) -> ffi::LY_ERR::Type {
    check(type_, storage, err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use yang2::context::Context;
    use yang2::data::{DataFormat, DataParserFlags, DataTree, DataValidationFlags};

    #[test]
    fn ascii_identifier_is_printable_ascii_only() {
        assert!(ascii_identifier(b"188.3.67.3:67"));
        assert!(ascii_identifier(b" ~"));
        assert!(!ascii_identifier(b""));
        assert!(!ascii_identifier(b"a\tb"));
        assert!(!ascii_identifier(b"a\x7f"));
        assert!(!ascii_identifier("caf\u{e9}".as_bytes()));
    }

    /// The values tried: every ASCII character alone and inside a value, characters of each
    /// general category the pattern refuses and of some it allows, the length bounds
    /// (csci-id 1..255, cs-id 1..128 characters) and random ASCII strings.
    fn values() -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for c in 0u8..0x80 {
            let c = c as char;
            v.push(c.to_string());
            v.push(format!("sci-{c}-1"));
        }
        let others = [
            '\u{80}',
            '\u{85}',
            '\u{9f}',
            '\u{a0}',
            '\u{ad}',
            '\u{e9}',
            '\u{600}',
            '\u{200b}',
            '\u{200e}',
            '\u{2028}',
            '\u{2029}',
            '\u{3000}',
            '\u{e000}',
            '\u{feff}',
            '\u{fff9}',
            '\u{1f600}',
            '\u{e0001}',
            '\u{10ffff}',
        ];
        for c in others {
            v.push(c.to_string());
            v.push(format!("a{c}"));
            v.push(format!("{c}b"));
        }
        v.push(String::new());
        for n in [1, 127, 128, 129, 254, 255, 256] {
            v.push("x".repeat(n));
            v.push("\u{e9}".repeat(n));
        }
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..2000 {
            let mut s = String::new();
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            for _ in 0..(state % 24) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                // Mostly printable, sometimes a control character.
                let b = if state.is_multiple_of(16) { (state >> 8) % 0x20 } else { 0x20 + (state >> 8) % 0x5f };
                s.push(b as u8 as char);
            }
            v.push(s);
        }
        v
    }

    fn doc(value: &str) -> String {
        let v = serde_json::to_string(value).expect("a string serialises");
        format!(r#"{{"cats-sma:cats-sma":{{"scis":{{"sci":[{{"csci-id":{v},"cs-id":[{v}]}}]}}}}}}"#)
    }

    /// Parses with values checked (the plugin's store).
    fn parsed(ctx: &Context, value: &str) -> Result<(), String> {
        DataTree::parse_string(
            ctx,
            doc(value),
            DataFormat::JSON,
            DataParserFlags::STRICT,
            DataValidationFlags::NO_STATE,
        )
        .map(drop)
        .map_err(|e| e.to_string())
    }

    /// Parses with values only stored, then validates (the plugin's validate).
    fn stored_then_validated(ctx: &Context, value: &str) -> bool {
        let Ok(text) = std::ffi::CString::new(doc(value)) else {
            return false;
        };
        let mut tree = std::ptr::null_mut();
        // SAFETY: a live context, a NUL-terminated document; the tree is freed below.
        unsafe {
            let ctx_raw = crate::yang::raw_ctx(ctx);
            let ret = ffi::lyd_parse_data_mem(
                ctx_raw,
                text.as_ptr(),
                ffi::LYD_FORMAT::LYD_JSON,
                ffi::LYD_PARSE_STRICT | ffi::LYD_PARSE_ONLY | ffi::LYD_PARSE_STORE_ONLY,
                0,
                &mut tree,
            );
            let ret = if ret == ffi::LY_ERR::LY_SUCCESS {
                ffi::lyd_validate_all(&mut tree, ctx_raw, ffi::LYD_VALIDATE_NO_STATE, std::ptr::null_mut())
            } else {
                ret
            };
            ffi::lyd_free_all(tree);
            ret == ffi::LY_ERR::LY_SUCCESS
        }
    }

    /// The plugin id of the compiled type of the leaf or leaf-list at `path`.
    fn plugin_id(ctx: &Context, path: &CStr) -> String {
        // SAFETY: a live context; the compiled node, its type and plugin belong to it.
        unsafe {
            let node = ffi::lys_find_path(crate::yang::raw_ctx(ctx), std::ptr::null(), path.as_ptr(), 0);
            assert!(!node.is_null(), "{path:?} is in the schema");
            let type_ = if u32::from((*node).nodetype) == ffi::LYS_LEAF {
                (*(node as *const ffi::lysc_node_leaf)).type_
            } else {
                (*(node as *const ffi::lysc_node_leaflist)).type_
            };
            let plugin = (*type_).plugin as *const TypePlugin;
            CStr::from_ptr((*plugin).id).to_string_lossy().into_owned()
        }
    }

    #[test]
    fn the_identifier_types_use_the_plugin() {
        let fast = crate::yang::context();
        let plain = crate::yang::build_context(false).expect("the modules compile");
        let ours = PLUGIN_ID.to_str().expect("ASCII");
        for path in [c"/cats-sma:cats-sma/scis/sci/csci-id", c"/cats-sma:cats-sma/scis/sci/cs-id"] {
            assert_eq!(plugin_id(fast, path), ours, "{path:?}");
            assert_ne!(plugin_id(&plain, path), ours, "{path:?}");
        }
    }

    #[test]
    fn rfc7950_9_4_5_identifier_patterns_answer_as_libyang_does() {
        let plain = crate::yang::build_context(false).expect("the modules compile");
        let fast = crate::yang::context();
        let (mut refused, mut accepted) = (0, 0);
        for v in values() {
            let want = parsed(&plain, &v);
            assert_eq!(parsed(fast, &v), want, "parsing {v:?}");
            match want {
                Ok(()) => accepted += 1,
                Err(_) => refused += 1,
            }
            let want = stored_then_validated(&plain, &v);
            assert_eq!(stored_then_validated(fast, &v), want, "store-only parse of {v:?}");
        }
        // Both outcomes were exercised.
        assert!(refused > 100 && accepted > 1000, "refused {refused}, accepted {accepted}");
    }
}
