//! Demangled-name patterns, as written in the catalog and on `--probe`.
//!
//! A pattern is matched against the demangled name without its parameter
//! list (`rw_lock_x_lock_func`, `PolicyMutex<TTASEventMutex<GenericPolicy> >::enter`)
//! unless it contains `(`, in which case the full signature is compared.
//! `*` and `?` are wildcards. Whitespace is ignored on both sides, because
//! demanglers disagree on `> >` versus `>>`. A pattern equal to the raw
//! (mangled) symbol also matches.

use cpp_demangle::{DemangleOptions, Symbol};
use wildmatch::WildMatch;

#[derive(Debug, Clone)]
pub struct SymbolPattern {
    pub text: String,
    with_params: bool,
    matcher: WildMatch,
    /// The longest identifier in the pattern: mangled names contain every
    /// identifier verbatim, so symbols without it need no demangling.
    key: Option<memchr::memmem::Finder<'static>>,
}

impl SymbolPattern {
    pub fn new(text: &str) -> Self {
        let normalized = strip_ws(text);
        let key = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|t| t.len() >= 3 && !t.chars().all(|c| c.is_ascii_digit()))
            .max_by_key(|t| t.len())
            .map(|k| memchr::memmem::Finder::new(k).into_owned());
        Self {
            text: text.to_string(),
            with_params: text.contains('('),
            matcher: WildMatch::new(&normalized),
            key,
        }
    }

    /// Cheap pre-filter on the raw symbol.
    pub fn may_match(&self, raw: &str) -> bool {
        self.key
            .as_ref()
            .is_none_or(|k| k.find(raw.as_bytes()).is_some())
    }

    pub fn matches(&self, raw: &str, name: &DemangledName) -> bool {
        if self.text == raw {
            return true;
        }
        let candidate = if self.with_params {
            &name.full_normalized
        } else {
            &name.short_normalized
        };
        self.matcher.matches(candidate)
    }
}

/// A symbol's demangled forms.
#[derive(Debug, Clone)]
pub struct DemangledName {
    /// With parameters, as `c++filt` prints it: what reports show.
    pub full: String,
    /// Without parameters or return type, as stack frames are named.
    pub short: String,
    short_normalized: String,
    full_normalized: String,
}

impl DemangledName {
    /// Demangles an Itanium C++ name; C names come back unchanged.
    pub fn of(raw_base: &str) -> Self {
        let (full, short) = match Symbol::new(raw_base) {
            Ok(sym) => {
                let full = sym
                    .demangle_with_options(&DemangleOptions::default())
                    .unwrap_or_else(|_| raw_base.to_string());
                let short = sym
                    .demangle_with_options(&DemangleOptions::new().no_params().no_return_type())
                    .unwrap_or_else(|_| full.clone());
                (full, short)
            }
            Err(_) => (raw_base.to_string(), raw_base.to_string()),
        };
        Self {
            short_normalized: strip_ws(&short),
            full_normalized: strip_ws(&full),
            full,
            short,
        }
    }
}

fn strip_ws(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENTER: &str = "_ZN11PolicyMutexI14TTASEventMutexI13GenericPolicyEE5enterEjjPKcj";

    #[test]
    fn matches_template_method_without_params() {
        let name = DemangledName::of(ENTER);
        assert!(name
            .full
            .starts_with("PolicyMutex<TTASEventMutex<GenericPolicy>"));
        assert!(
            SymbolPattern::new("PolicyMutex<TTASEventMutex<GenericPolicy> >::enter")
                .matches(ENTER, &name)
        );
        assert!(
            SymbolPattern::new("PolicyMutex<TTASEventMutex<GenericPolicy>>::enter")
                .matches(ENTER, &name)
        );
        assert!(SymbolPattern::new("PolicyMutex<*>::enter").matches(ENTER, &name));
        assert!(!SymbolPattern::new("PolicyMutex<*>::exit").matches(ENTER, &name));
    }

    #[test]
    fn params_are_compared_only_when_written() {
        let name = DemangledName::of(ENTER);
        assert!(SymbolPattern::new(
            "PolicyMutex<*>::enter(unsigned int, unsigned int, char const*, unsigned int)"
        )
        .matches(ENTER, &name));
        assert!(!SymbolPattern::new("PolicyMutex<*>::enter(unsigned int)").matches(ENTER, &name));
    }

    #[test]
    fn c_names_and_raw_names() {
        let name = DemangledName::of("rw_lock_x_lock_func");
        assert!(SymbolPattern::new("rw_lock_x_lock_func").matches("rw_lock_x_lock_func", &name));
        assert!(!SymbolPattern::new("rw_lock_x_lock").matches("rw_lock_x_lock_func", &name));
        assert!(SymbolPattern::new(ENTER).matches(ENTER, &DemangledName::of(ENTER)));
    }

    #[test]
    fn prefilter_uses_longest_identifier() {
        let p = SymbolPattern::new("srw_mutex_impl<true>::wait_and_lock()");
        assert!(p.may_match("_ZN14srw_mutex_implILb1EE13wait_and_lockEv"));
        assert!(!p.may_match("_ZN14ssux_lock_implILb1EE7rd_waitEv"));
        assert!(SymbolPattern::new("*").may_match("anything"));
    }
}
