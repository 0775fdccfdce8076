//! The checks of the feed's other consumers (`options.also`): a forward into a sink of
//! its own kind (every line it owes present as its sink promises, repeats under the
//! key of their first delivery), a ledger without its guard (every line it owes
//! applied at least once).

use mongoose_ledger::LedgerState;

use crate::outputs::outputs_of;
use crate::scenario::Also;
use crate::truth::FailureKind;
use crate::world::World;

/// Checks every other consumer; the number of their missing outputs whose loss the run
/// must report.
pub fn check_consumers(world: &mut World) -> usize {
    let mut missing_reported = 0;
    let consumers = world.scenario.options.also.clone();
    for (index, also) in consumers.into_iter().enumerate() {
        let life = world.consumers.get(index + 1).cloned().unwrap_or_default();
        let name = format!("consumer also{index} ({also:?})");
        match also {
            Also::Forward { .. } => match outputs_of(world, index + 1) {
                Ok((records, promise)) => {
                    let (failures, counts) = world.truth.check_forwarded(
                        &records,
                        promise,
                        |line| life.owes(line),
                        life.replaced as usize,
                    );
                    missing_reported += counts.missing_maybe;
                    for failure in failures {
                        world.fail(failure.kind, format!("{name}: {}", failure.detail));
                    }
                }
                Err(error) => world.fail(FailureKind::Harness, error),
            },
            Also::LedgerUnguarded => {
                let folder = world.path(&format!("state-also{index}"));
                match LedgerState::load(&folder) {
                    Ok(state) => {
                        let failures =
                            world
                                .truth
                                .check_ledger_at_least_once(&state, &name, |line| life.owes(line));
                        for failure in failures {
                            world.fail(failure.kind, failure.detail);
                        }
                    }
                    // a ledger that never ran holds nothing: every line it owes is lost
                    Err(error) if life.present => world.fail(
                        FailureKind::Lost,
                        format!("{name}: its state cannot be read after the final run: {error}"),
                    ),
                    Err(_) => {}
                }
            }
        }
    }
    missing_reported
}
