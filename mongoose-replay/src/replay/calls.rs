//! Control-call matching: a replayed processor's control requests are compared, in
//! position, with the `ControlCall` entries recorded after the entry being replayed
//! ([`CallMatch`]), and answered from the recording through the [`ControlInterceptor`]
//! a replay installs ([`Interception`]); nothing is executed live.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use mongoose_control::controller;
use mongoose_control::ControlInterceptor;
use mongoose_core::ProcessorId;

use crate::entry::{ControlOutcome, Entry};

/// A recorded control request: its entry number, name, arguments and outcome.
type RecordedCall = (usize, String, Vec<String>, ControlOutcome);

fn describe(call: &str, args: &[String]) -> String {
    format!("{call}({})", args.join(", "))
}

/// Compares the control requests a replayed processor makes with the recorded ones, in
/// position.
#[derive(Default)]
pub(super) struct CallMatch {
    /// The recorded requests of the entry being replayed, in order.
    expected: VecDeque<RecordedCall>,
    /// Where the replay is ("in start()", "at entry N"), for the reasons.
    at: String,
    /// The first divergence: the processor's replay stops with it.
    stop: Option<String>,
}

impl CallMatch {
    /// Expects the `ControlCall` entries from `from` on; returns the index of the next
    /// entry that is not one.
    pub(super) fn expect(&mut self, entries: &[Entry], from: usize, at: String) -> usize {
        self.expected.clear();
        self.at = at;
        let mut index = from;
        while let Some(Entry::ControlCall {
            call,
            args,
            outcome,
        }) = entries.get(index)
        {
            self.expected
                .push_back((index + 1, call.clone(), args.clone(), outcome.clone()));
            index += 1;
        }
        index
    }

    /// After the entry's replay: why the replay stops, if it does: a divergence first,
    /// then what the entry's replay itself reported (`failed`), then a recorded request
    /// the replay did not make.
    pub(super) fn verdict(&mut self, failed: Option<String>) -> Option<String> {
        if let Some(reason) = self.stop.take() {
            return Some(reason);
        }
        if failed.is_some() {
            return failed;
        }
        let (number, call, args, _) = self.expected.pop_front()?;
        Some(format!(
            "the recorded run made control request {} (entry {number}) {}; the replay did not",
            describe(&call, &args),
            self.at
        ))
    }

    fn answer(&mut self, call: &str, args: &[String]) -> Result<(), String> {
        if let Some(reason) = &self.stop {
            return Err(format!("this processor's replay has stopped: {reason}"));
        }
        let made = describe(call, args);
        let reason = self.judge(call, args, &made);
        match reason {
            None => Ok(()),
            Some(reason) => {
                self.stop = Some(reason.clone());
                Err(reason)
            }
        }
    }

    /// `None` when the request is the next recorded one, supported and recorded ok.
    fn judge(&mut self, call: &str, args: &[String], made: &str) -> Option<String> {
        let at = &self.at;
        // never executed, matched or not: the supplier is code, the registry is shared
        if call == controller::ADD_PROCESSOR {
            self.expected.pop_front();
            return Some(format!(
                "addEventProcessor supplier cannot be verified from the recording: {made} {at} is never run against the live server"
            ));
        }
        if call == controller::REGISTER_SERVICE || call == controller::REMOVE_SERVICE {
            self.expected.pop_front();
            return Some(format!(
                "registry mutation: {made} {at} would change the live registry shared with processors that are not replayed; it is not executed (a separate replay registry would be needed)"
            ));
        }
        let Some((number, recorded_call, recorded_args, outcome)) = self.expected.pop_front()
        else {
            return Some(format!(
                "control request {made} was not made by the recorded run here ({at})"
            ));
        };
        let recorded = describe(&recorded_call, &recorded_args);
        if recorded_call != call {
            return Some(format!(
                "control request {made} was not made by the recorded run here ({at}): it made {recorded} (entry {number})"
            ));
        }
        if recorded_args != args {
            return Some(format!(
                "control request differs {at}: the replay made {made}, the recorded run {recorded} (entry {number})"
            ));
        }
        match outcome {
            ControlOutcome::Ok if call == controller::STOP_PROCESSOR => None,
            ControlOutcome::Ok => Some(format!(
                "control request {made} was not made by the recorded run here ({at}): this build cannot replay it"
            )),
            ControlOutcome::Failed(text) => Some(format!(
                "recorded control exception cannot be reconstructed: {made} (entry {number}) failed in the recorded run with: {text}"
            )),
        }
    }
}

/// Answers the replayed processor's control requests from its [`CallMatch`].
pub(super) struct Interception(pub(super) Rc<RefCell<CallMatch>>);

impl ControlInterceptor for Interception {
    fn intercept(
        &mut self,
        _processor: ProcessorId,
        call: &str,
        args: &[String],
    ) -> Result<(), String> {
        self.0.borrow_mut().answer(call, args)
    }
}
