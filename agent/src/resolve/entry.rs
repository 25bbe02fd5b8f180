//! The first instruction of a probed function decides what a hit costs:
//! the kernel emulates `push` (and NOPs) in place, anything else is
//! single-stepped out of line, roughly 20x dearer on these machines.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryInsn {
    /// `push %reg` (`55`, `41 5x`, …): emulated, the cheap case.
    Push,
    /// A NOP form (`90`, `0f 1f …`, `66 90`): emulated.
    Nop,
    /// `endbr64` (`f3 0f 1e fa`): a hint-NOP the kernel may step over.
    Endbr64,
    /// Anything else (`mov`, `lea`, `sub`, …): single-stepped.
    Other,
}

impl EntryInsn {
    pub fn decode(code: &[u8]) -> Self {
        match code {
            [0x50..=0x57, ..] | [0x41, 0x50..=0x57, ..] => EntryInsn::Push,
            [0x90, ..] | [0x66, 0x90, ..] | [0x0f, 0x1f, ..] | [0x66, 0x0f, 0x1f, ..] => {
                EntryInsn::Nop
            }
            [0xf3, 0x0f, 0x1e, 0xfa, ..] => EntryInsn::Endbr64,
            _ => EntryInsn::Other,
        }
    }

    /// Whether a uprobe here is handled without single-stepping.
    pub fn emulated(self) -> bool {
        matches!(self, EntryInsn::Push | EntryInsn::Nop)
    }
}

impl std::fmt::Display for EntryInsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EntryInsn::Push => "push, emulated",
            EntryInsn::Nop => "nop, emulated",
            EntryInsn::Endbr64 => "endbr64",
            EntryInsn::Other => "single-stepped",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_common_prologues() {
        assert_eq!(
            EntryInsn::decode(&[0x55, 0x48, 0x89, 0xe5]),
            EntryInsn::Push
        );
        assert_eq!(EntryInsn::decode(&[0x41, 0x57]), EntryInsn::Push);
        assert_eq!(
            EntryInsn::decode(&[0x0f, 0x1f, 0x44, 0x00, 0x00]),
            EntryInsn::Nop
        );
        assert_eq!(
            EntryInsn::decode(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55]),
            EntryInsn::Endbr64
        );
        assert_eq!(EntryInsn::decode(&[0x48, 0x8d, 0x05]), EntryInsn::Other);
        assert_eq!(EntryInsn::decode(&[]), EntryInsn::Other);
    }
}
