//! What agent/build.rs read from the compiled BPF objects' BTF, so the C
//! headers in `bpf/` are the one source of the ABI:
//!
//! - `mirrors_NAME!(RustType)` for each struct a header defines: compile-time
//!   asserts that the Rust type has the C struct's size and each field's
//!   offset and size (a field added, moved or resized on one side only is a
//!   build error, not a garbled map read);
//! - `latency::maps::STATS`, `cpu::programs::CPU_SAMPLE`, …: the objects'
//!   map, program and global names, so Rust spells each once and a rename in
//!   C breaks the build.

/// The size of the field `f` selects (`|v: &T| &v.field`), for the
/// generated asserts.
pub(crate) const fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

include!(concat!(env!("OUT_DIR"), "/bpf_layout.rs"));
