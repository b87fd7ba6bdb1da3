//! Transition tables as data: for each class of observation, the phase it leads to from each
//! phase. The machines decide their phase here, the diagrams are drawn from here, and the
//! tests walk every (phase, class) pair of it.

use std::fmt::Debug;

use crate::api::Phase;

/// A class of observation. Every snapshot falls in exactly one class. Its variants, in
/// declaration order, are the priority order (the first that matches a snapshot wins); its
/// name is the one on diagram edges.
pub trait ObservationClass:
    Copy + Eq + Debug + strum::VariantArray + Into<&'static str> + 'static
{
    /// The phases of this family, in the order of the table's columns (a `Clair` has
    /// `Upgrading`, a service does not).
    const PHASES: &'static [Phase];
    /// Rows of the table: the class, then the target phase from each phase in
    /// [`ObservationClass::PHASES`] order.
    const TABLE: &'static [(Self, &'static [Phase])];
}

/// The phase that `class` leads to from `from`.
pub fn next<C: ObservationClass>(from: Phase, class: C) -> Phase {
    let column = C::PHASES.iter().position(|p| *p == from).unwrap_or(0);
    C::TABLE
        .iter()
        .find(|(c, _)| *c == class)
        .and_then(|(_, targets)| targets.get(column).copied())
        // Unreachable: a test checks that every class has its row.
        .unwrap_or(from)
}

/// Every `(from, class, to)` of the table.
pub fn transitions<C: ObservationClass>() -> Vec<(Phase, C, Phase)> {
    C::TABLE
        .iter()
        .flat_map(|(class, targets)| {
            C::PHASES
                .iter()
                .zip(targets.iter())
                .map(move |(from, to)| (*from, *class, *to))
        })
        .collect()
}
