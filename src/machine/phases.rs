//! The statig machine both families run: one state per phase, each looking its transition
//! up in the family's table. It is instantiated per family with the family's class of
//! observation (`PhaseMachine<ServiceClass>`, `PhaseMachine<ClairClass>`).
//!
//! A blocking machine: statig's async machines are not `Send` and cannot run inside a
//! kube `Controller`. States carry no data and have no entry actions, so rehydrating a
//! machine in any phase and feeding it an observation is all a reconcile does.

use std::marker::PhantomData;

use serde::{Deserialize, Serialize};
use statig::blocking::*;

use super::table::{ObservationClass, next};
use crate::api::Phase;

/// The shared storage: none, beyond the family's class type.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct PhaseMachine<C> {
    #[serde(skip)]
    class: PhantomData<C>,
}

#[state_machine(
    initial = "State::pending()",
    state(derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize))
)]
impl<C: ObservationClass> PhaseMachine<C> {
    #[state]
    fn pending(event: &C) -> Outcome<State> {
        step(Phase::Pending, *event)
    }

    #[state]
    fn config_valid(event: &C) -> Outcome<State> {
        step(Phase::ConfigValid, *event)
    }

    #[state]
    fn database_ready(event: &C) -> Outcome<State> {
        step(Phase::DatabaseReady, *event)
    }

    #[state]
    fn deploying(event: &C) -> Outcome<State> {
        step(Phase::Deploying, *event)
    }

    #[state]
    fn available(event: &C) -> Outcome<State> {
        step(Phase::Available, *event)
    }

    #[state]
    fn scaling(event: &C) -> Outcome<State> {
        step(Phase::Scaling, *event)
    }

    #[state]
    fn upgrading(event: &C) -> Outcome<State> {
        step(Phase::Upgrading, *event)
    }

    #[state]
    fn degraded(event: &C) -> Outcome<State> {
        step(Phase::Degraded, *event)
    }
}

fn step<C: ObservationClass>(from: Phase, class: C) -> Outcome<State> {
    let to = next(from, class);
    if to == from {
        Outcome::Handled
    } else {
        Outcome::Transition(state_of(to))
    }
}

fn state_of(phase: Phase) -> State {
    match phase {
        Phase::Pending => State::Pending {},
        Phase::ConfigValid => State::ConfigValid {},
        Phase::DatabaseReady => State::DatabaseReady {},
        Phase::Deploying => State::Deploying {},
        Phase::Available => State::Available {},
        Phase::Scaling => State::Scaling {},
        Phase::Upgrading => State::Upgrading {},
        Phase::Degraded => State::Degraded {},
    }
}

pub(super) fn phase_of(state: &State) -> Phase {
    match state {
        State::Pending {} => Phase::Pending,
        State::ConfigValid {} => Phase::ConfigValid,
        State::DatabaseReady {} => Phase::DatabaseReady,
        State::Deploying {} => Phase::Deploying,
        State::Available {} => Phase::Available,
        State::Scaling {} => Phase::Scaling,
        State::Upgrading {} => Phase::Upgrading,
        State::Degraded {} => Phase::Degraded,
    }
}

/// Rehydrates the machine in `phase` (the one in `status.phase`, `Pending` when there is
/// none), feeds it one observation and returns the phase it ends in.
pub fn advance<C: ObservationClass>(phase: Phase, class: C) -> Phase {
    match rehydrate::<C>(phase) {
        Ok(mut machine) => {
            machine.handle(&class);
            phase_of(machine.state())
        }
        // Unreachable: the value above is built from the machine's own types. Falling
        // back to the table keeps the decision the same either way.
        Err(_) => next(phase, class),
    }
}

/// A machine in `phase`. statig restores a machine only by deserializing
/// `{shared_storage, state}`; states have no entry actions, so `init` does nothing else.
pub(super) fn rehydrate<C: ObservationClass>(
    phase: Phase,
) -> Result<InitializedStateMachine<PhaseMachine<C>>, serde_json::Error> {
    let stored = serde_json::json!({ "shared_storage": {}, "state": state_of(phase) });
    serde_json::from_value::<UninitializedStateMachine<PhaseMachine<C>>>(stored).map(|m| m.init())
}
