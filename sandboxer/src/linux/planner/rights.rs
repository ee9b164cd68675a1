//! Landlock rights and policy operations as small bitsets, for the planner's sums.

use crate::linux::fs_right::FsRight;
use crate::policy::Op;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Rights(u32);

impl Rights {
    pub(super) const NONE: Rights = Rights(0);

    /// `FsRight::ALL` lists the rights in declaration order (checked by a test), so the
    /// discriminant is the index.
    pub(super) fn index(r: FsRight) -> usize {
        r as usize
    }
    pub(super) fn bit(r: FsRight) -> u32 {
        1 << Rights::index(r)
    }
    pub(super) fn of(rights: &[FsRight]) -> Rights {
        Rights(rights.iter().fold(0, |acc, r| acc | Rights::bit(*r)))
    }
    pub(super) fn has(self, r: FsRight) -> bool {
        self.0 & Rights::bit(r) != 0
    }
    pub(super) fn with(self, r: FsRight) -> Rights {
        Rights(self.0 | Rights::bit(r))
    }
    pub(super) fn union(self, o: Rights) -> Rights {
        Rights(self.0 | o.0)
    }
    pub(super) fn inter(self, o: Rights) -> Rights {
        Rights(self.0 & o.0)
    }
    pub(super) fn minus(self, o: Rights) -> Rights {
        Rights(self.0 & !o.0)
    }
    pub(super) fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub(super) fn files() -> Rights {
        Rights::of(
            &FsRight::ALL
                .into_iter()
                .filter(|r| r.applies_to_files())
                .collect::<Vec<_>>(),
        )
    }
    pub(super) fn to_vec(self) -> Vec<FsRight> {
        FsRight::ALL.into_iter().filter(|r| self.has(*r)).collect()
    }
}

// ---- operations as a small set ---------------------------------------------------------------

/// A set of operations, one bit per [`Op`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Ops(u8);

impl Ops {
    pub(super) const NONE: Ops = Ops(0);
    pub(super) const ALL: Ops = Ops(u8::MAX);

    /// The position of `op` in [`Op::ALL`].
    pub(super) fn index(op: Op) -> usize {
        match op {
            Op::Read => 0,
            Op::List => 1,
            Op::Write => 2,
            Op::Create => 3,
            Op::Delete => 4,
            Op::Rename => 5,
            Op::Exec => 6,
            Op::ConnectUnix => 7,
        }
    }
    pub(super) fn bit(op: Op) -> u8 {
        1 << Ops::index(op)
    }
    pub(super) fn has(self, op: Op) -> bool {
        self.0 & Ops::bit(op) != 0
    }
    pub(super) fn with(self, op: Op) -> Ops {
        Ops(self.0 | Ops::bit(op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn rights_index_is_the_position_in_all() {
        for (i, r) in FsRight::ALL.into_iter().enumerate() {
            assert_eq!(Rights::index(r), i, "{r}");
        }
        assert_eq!(Rights::of(&FsRight::ALL).to_vec(), FsRight::ALL.to_vec());
    }

    #[test]
    pub(super) fn ops_have_a_bit_each() {
        let all = Op::ALL.into_iter().fold(Ops::NONE, Ops::with);
        assert_eq!(all, Ops::ALL);
        for (i, op) in Op::ALL.into_iter().enumerate() {
            assert_eq!(Ops::index(op), i, "{op}");
            assert!(Ops::NONE.with(op).has(op));
            assert_eq!(Ops::NONE.with(op).0.count_ones(), 1, "{op}");
        }
    }
}
