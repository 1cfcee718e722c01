//! Structural limits on every received management message (a NETCONF `<rpc>`, a RESTCONF
//! XML or JSON body): what one message may cost the parser, the element tree and libyang
//! before it is refused. Bootstrap table `[message_limits]`; the defaults pass every real
//! client's messages and keep a hostile one to bounded stack, memory and CPU.

use std::sync::OnceLock;

use serde::Deserialize;

/// The deepest nesting a limit may be configured to: the element tree and libyang both
/// hold a few hundred bytes of stack per level on a 2 MiB worker thread.
pub const MAX_CONFIGURABLE_DEPTH: usize = 4096;

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct MessageLimits {
    /// Deepest element (XML) or object/array (JSON) nesting; the root is level 1.
    pub max_depth: usize,
    /// Elements and attributes (namespace declarations not counted) in one message.
    pub max_elements: usize,
    /// Attributes of one element, namespace declarations not counted.
    pub max_attributes: usize,
    /// Namespace declarations (`xmlns`, `xmlns:p`) on one element.
    pub max_namespace_declarations_per_element: usize,
    /// Namespace declarations in one message that change the namespaces in scope (a
    /// re-declaration of a binding already in scope is free), and bindings in scope at once.
    pub max_namespace_declarations: usize,
    /// Bytes of one attribute value (namespace URIs included).
    pub max_attribute_size: usize,
}

impl Default for MessageLimits {
    fn default() -> Self {
        MessageLimits {
            max_depth: 256,
            max_elements: 2_000_000,
            max_attributes: 64,
            max_namespace_declarations_per_element: 64,
            max_namespace_declarations: 1024,
            max_attribute_size: 64 * 1024,
        }
    }
}

impl MessageLimits {
    pub fn check(&self) -> Result<(), String> {
        if self.max_depth < 8 || self.max_depth > MAX_CONFIGURABLE_DEPTH {
            return Err(format!("message_limits.max_depth must be within 8..={MAX_CONFIGURABLE_DEPTH}"));
        }
        if self.max_elements < 16 {
            return Err("message_limits.max_elements must be at least 16".into());
        }
        if self.max_attributes < 4 || self.max_namespace_declarations_per_element < 4 {
            return Err("message_limits.max_attributes and max_namespace_declarations_per_element: at least 4".into());
        }
        if self.max_namespace_declarations < self.max_namespace_declarations_per_element {
            return Err("message_limits.max_namespace_declarations must be at least the per-element limit".into());
        }
        if self.max_attribute_size < 1024 {
            return Err("message_limits.max_attribute_size must be at least 1024 bytes".into());
        }
        Ok(())
    }
}

static CONFIGURED: OnceLock<MessageLimits> = OnceLock::new();

/// Installs the bootstrap's limits for the process (once, at agent start).
pub fn install(limits: MessageLimits) {
    let _ = CONFIGURED.set(limits);
}

/// The limits in force: the installed ones, else the defaults.
pub fn get() -> &'static MessageLimits {
    static DEFAULT: OnceLock<MessageLimits> = OnceLock::new();
    CONFIGURED.get().unwrap_or_else(|| DEFAULT.get_or_init(MessageLimits::default))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_their_own_check_and_bad_values_are_refused() {
        MessageLimits::default().check().unwrap();
        let bad = |f: fn(&mut MessageLimits)| {
            let mut l = MessageLimits::default();
            f(&mut l);
            l.check().is_err()
        };
        assert!(bad(|l| l.max_depth = MAX_CONFIGURABLE_DEPTH + 1));
        assert!(bad(|l| l.max_depth = 2));
        assert!(bad(|l| l.max_elements = 0));
        assert!(bad(|l| l.max_namespace_declarations = 1));
        assert!(bad(|l| l.max_attribute_size = 10));
        let toml: crate::config::Bootstrap = toml::from_str("[message_limits]\nmax_depth = 64\n").unwrap();
        assert_eq!(toml.message_limits.max_depth, 64);
        assert_eq!(toml.message_limits.max_elements, MessageLimits::default().max_elements);
        assert!(toml::from_str::<crate::config::Bootstrap>("[message_limits]\nmax_dpth = 64\n").is_err());
    }
}
