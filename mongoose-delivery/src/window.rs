//! The acknowledgement window: sequence to position, in publish order, between the last
//! acknowledged item and the last published one (book: guarantees/commit-after-processing.md).

use std::collections::VecDeque;

use mongoose_core::{Epoch, Position};

/// The most positioned items that may await acknowledgement; `try_publish` pauses at
/// the cap. With PAUSE queues the window is bounded by queue capacity long before it;
/// the cap bounds memory when a DROP queue's reader is wedged.
pub const MAX_PENDING_ACKNOWLEDGEMENTS: usize = 65_536;

/// One run of items: the last item's sequence and position. An item that entered no
/// queue (dropped everywhere, filtered) has the same condition as the item before it,
/// so it is merged into the run before it (of the same epoch and lane): the window is
/// bounded by what the queues hold, not by how many items were dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindowEntry<P> {
    pub(crate) sequence: u64,
    pub(crate) epoch: Epoch,
    pub(crate) position: P,
}

#[derive(Debug)]
pub(crate) struct Window<P> {
    entries: VecDeque<WindowEntry<P>>,
    /// The highest sequence handed to the committer.
    acknowledged: u64,
    /// True when the newest entry may absorb an item that entered no queue.
    tail_mergeable: bool,
}

impl<P: Position> Window<P> {
    pub(crate) fn new() -> Self {
        Window {
            entries: VecDeque::new(),
            acknowledged: 0,
            tail_mergeable: false,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_full(&self) -> bool {
        self.entries.len() >= MAX_PENDING_ACKNOWLEDGEMENTS
    }

    /// Items that can be added before the window is full.
    pub(crate) fn room(&self) -> usize {
        MAX_PENDING_ACKNOWLEDGEMENTS.saturating_sub(self.entries.len())
    }

    pub(crate) fn acknowledged(&self) -> u64 {
        self.acknowledged
    }

    /// Adds a positioned item. `entered_a_queue` is false for an item no queue holds (a
    /// drop, a filtered input): it merges into the run before it when that run has the
    /// same epoch and the same lane (a run ends at one lane's position: the committer
    /// of a many-file source commits each lane on its own).
    pub(crate) fn push(&mut self, sequence: u64, epoch: Epoch, position: P, entered_a_queue: bool) {
        if !entered_a_queue && self.tail_mergeable {
            if let Some(last) = self.entries.back_mut() {
                if last.epoch == epoch && last.position.value().lane == position.value().lane {
                    last.sequence = sequence;
                    last.position = position;
                    return;
                }
            }
        }
        self.entries.push_back(WindowEntry {
            sequence,
            epoch,
            position,
        });
        self.tail_mergeable = true;
    }

    /// Removes every entry up to and including `done_through`, in order; returns how
    /// many. Into `out` goes the last entry of each run of consecutive entries of one
    /// epoch and lane: what a committer is told ("everything up to and including this
    /// sequence was processed") about that run's last entry covers the entries before
    /// it, as it does for the items merged into a run at push. A committer is then
    /// called once per run of a poll, not once per item. `each` sees every removed
    /// entry (the debug builds' check that positions go forward).
    pub(crate) fn acknowledge_through(
        &mut self,
        done_through: u64,
        out: &mut Vec<WindowEntry<P>>,
        mut each: impl FnMut(&WindowEntry<P>),
    ) -> usize {
        // the entries are in sequence order: the acknowledged ones are a prefix
        let through = self
            .entries
            .partition_point(|entry| entry.sequence <= done_through);
        if through > 0 {
            // read in place, then removed at once (a prefix: the ring's head moves)
            let (front, back) = self.entries.as_slices();
            let in_front = through.min(front.len());
            for entry in front[..in_front].iter().chain(&back[..through - in_front]) {
                each(entry);
                match out.last_mut() {
                    Some(last) if same_run(last, entry) => *last = *entry,
                    _ => out.push(*entry),
                }
            }
            self.entries.drain(..through);
            if let Some(last) = out.last() {
                self.acknowledged = last.sequence;
            }
        }
        if self.entries.is_empty() {
            // nothing left to merge into: the next item starts a run of its own
            self.tail_mergeable = false;
        }
        through
    }
}

/// True when `next` continues `run`: the same epoch and the same lane.
#[inline]
fn same_run<P: Position>(run: &WindowEntry<P>, next: &WindowEntry<P>) -> bool {
    run.epoch == next.epoch && run.position.value().lane == next.position.value().lane
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_that_entered_no_queue_merge_into_the_run_before_them() {
        let mut window = Window::<u64>::new();
        window.push(1, Epoch(1), 10, true);
        window.push(2, Epoch(1), 20, false);
        window.push(3, Epoch(1), 30, false);
        assert_eq!(window.len(), 1);
        let mut out = Vec::new();
        window.acknowledge_through(3, &mut out, |_| {});
        assert_eq!(
            out,
            vec![WindowEntry {
                sequence: 3,
                epoch: Epoch(1),
                position: 30
            }]
        );
        assert_eq!(window.acknowledged(), 3);
    }

    #[test]
    fn a_committer_is_told_the_last_entry_of_each_run_of_one_epoch_and_lane() {
        let mut window = Window::<(u32, u64)>::new();
        window.push(1, Epoch(1), (1, 10), true);
        window.push(2, Epoch(1), (1, 20), true);
        window.push(3, Epoch(1), (2, 5), true);
        window.push(4, Epoch(1), (1, 30), true);
        window.push(5, Epoch(2), (1, 7), true);
        window.push(6, Epoch(2), (1, 8), true);
        let mut out = Vec::new();
        assert_eq!(window.acknowledge_through(6, &mut out, |_| {}), 6);
        let told: Vec<_> = out
            .iter()
            .map(|entry| (entry.sequence, entry.position))
            .collect();
        assert_eq!(
            told,
            vec![(2, (1, 20)), (3, (2, 5)), (4, (1, 30)), (6, (1, 8))]
        );
        assert_eq!(window.acknowledged(), 6);
    }

    #[test]
    fn a_new_epoch_never_merges_into_the_old_one() {
        let mut window = Window::<u64>::new();
        window.push(1, Epoch(1), 10, true);
        window.push(2, Epoch(2), 5, false);
        assert_eq!(window.len(), 2);
    }

    #[test]
    fn an_item_of_another_lane_never_merges_into_the_run_before_it() {
        // a filtered line of file B (lane 2) after a line of file A (lane 1), same
        // epoch: merged, A's committer would never see A's position, and B's would get
        // a run that ends with A's item unprocessed
        let mut window = Window::<(u32, u64)>::new();
        window.push(1, Epoch(1), (1, 10), true);
        window.push(2, Epoch(1), (2, 5), false);
        assert_eq!(window.len(), 2, "a run holds the positions of one lane");
        let mut out = Vec::new();
        window.acknowledge_through(1, &mut out, |_| {});
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].position, (1, 10));
    }

    #[test]
    fn acknowledgement_stops_at_the_first_entry_not_done() {
        let mut window = Window::<u64>::new();
        for sequence in 1..=5 {
            window.push(sequence, Epoch(1), sequence * 10, true);
        }
        let mut out = Vec::new();
        assert_eq!(window.acknowledge_through(3, &mut out, |_| {}), 3);
        assert_eq!(out.len(), 1, "one run: its last entry");
        assert_eq!(out[0].sequence, 3);
        assert_eq!(window.len(), 2);
        assert_eq!(window.acknowledged(), 3);
    }
}
