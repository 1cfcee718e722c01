//! Printing data trees without leaking: yang2 0.18.1's `Data::print_string` /
//! `print_bytes` never free the buffer `lyd_print_mem` allocates, so every reply the agent
//! printed stayed in memory (found by LeakSanitizer in the fuzz runs). `print_text` is the
//! same call with the buffer copied and freed; it also never panics on text that is not
//! UTF-8 (yang2 unwraps it).

use std::ffi::{c_char, c_void, CStr};

use yang2::data::{Data, DataFormat, DataPrinterFlags};

extern "C" {
    /// The C library's free: libyang allocates the printed text with malloc.
    fn free(ptr: *mut c_void);
}

/// `print_text` for every kind of data (trees and node references).
pub trait PrintText<'a>: Data<'a> {
    /// Prints like `Data::print_string`; `None` when there is nothing to print.
    fn print_text(&self, format: DataFormat, options: DataPrinterFlags) -> Result<Option<String>, yang2::Error> {
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: `self.raw()` is a node of a tree borrowed for the duration of the call (or
        // null for an empty tree, which lyd_print_mem accepts); `out` is a valid place for
        // the result pointer.
        let ret = unsafe { yang2::ffi::lyd_print_mem(&mut out, self.raw(), format as u32, options.bits()) };
        if ret != yang2::ffi::LY_ERR::LY_SUCCESS {
            return Err(yang2::Error::new(self.context()));
        }
        if out.is_null() {
            return Ok(None);
        }
        // SAFETY: on success `out` is a NUL-terminated string allocated by libyang with
        // malloc and owned by the caller: it is read once, then freed once.
        let text = unsafe { CStr::from_ptr(out) }.to_string_lossy().into_owned();
        unsafe { free(out.cast()) };
        Ok(Some(text))
    }
}

impl<'a, T: Data<'a> + ?Sized> PrintText<'a> for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_what_yang2_prints() {
        let ctx = crate::yang::context();
        let mut t = yang2::data::DataTree::new(ctx);
        t.new_path("/cats-sma:cats-sma/agent/csma-id", Some("c1"), false).unwrap();
        let flags = || DataPrinterFlags::WITH_SIBLINGS;
        assert_eq!(t.print_text(DataFormat::XML, flags()).unwrap(), t.print_string(DataFormat::XML, flags()).unwrap());
        let empty = yang2::data::DataTree::new(ctx);
        assert_eq!(
            empty.print_text(DataFormat::XML, flags()).unwrap(),
            empty.print_string(DataFormat::XML, flags()).unwrap()
        );
    }
}
