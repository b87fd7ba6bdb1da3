//! Transition tables as data: for each class of observation, the phase it leads to from each
//! phase. The statig machines look their transitions up here, the diagrams are drawn from
//! here, and the tests walk every (phase, class) pair of it.

use std::fmt::Debug;

use crate::api::Phase;

/// A class of observation. Every snapshot falls in exactly one class.
pub trait ObservationClass: Copy + Eq + Debug + 'static {
    /// Every class, in priority order (the first that matches a snapshot wins).
    const ALL: &'static [Self];
    /// Rows of the table: the class, then the target phase from each phase in
    /// [`Phase::ALL`] order.
    const TABLE: &'static [(Self, [Phase; 7])];
    /// The name on diagram edges.
    fn name(self) -> &'static str;
}

/// The phase that `class` leads to from `from`.
pub fn next<C: ObservationClass>(from: Phase, class: C) -> Phase {
    let column = Phase::ALL.iter().position(|p| *p == from).unwrap_or(0);
    C::TABLE
        .iter()
        .find(|(c, _)| *c == class)
        .map(|(_, targets)| targets[column])
        // Unreachable: a test checks that every class has its row.
        .unwrap_or(from)
}

/// Every `(from, class, to)` of the table.
pub fn transitions<C: ObservationClass>() -> Vec<(Phase, C, Phase)> {
    C::TABLE
        .iter()
        .flat_map(|(class, targets)| {
            Phase::ALL
                .iter()
                .zip(targets)
                .map(move |(from, to)| (*from, *class, *to))
        })
        .collect()
}
