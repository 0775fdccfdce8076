//! What a [`Recorder`] writes for each event of its group: the
//! [`GroupRecorder`] hooks (a build, an item's dispatch and completion, a timer, a
//! stop, a loss, a service change, a control request, an admin command, a poll, the
//! close).

use std::any::Any;
use std::io::Write;

use mongoose_control::{AdminOutcome, GroupRecorder};
use mongoose_core::{CompletionKey, ProcessorId};

use super::{RecordedAdminReply, Recorder, Stream, ADMIN_REPLIES_FILE};
use crate::entry::{ControlOutcome, Entry, Provenance};
use crate::error::ReplayError;
use crate::replay::AdminReply;
use crate::tap;

impl GroupRecorder for Recorder {
    fn processor_built(&mut self, processor: ProcessorId, name: &str, type_name: &'static str) {
        tap::install_record();
        if !self.covers(name) {
            return;
        }
        let key = self.keys.built(name);
        let provenance = self.config.provenance.then(|| Provenance {
            processor_type: type_name.to_owned(),
            handler_type: String::new(),
            ordinal: key.ordinal(),
        });
        match self.store.begin(key.key(), provenance.as_ref()) {
            Ok(handle) => {
                self.streams.insert(
                    processor,
                    Stream {
                        handle,
                        key: key.key().to_owned(),
                    },
                );
            }
            Err(error) => self.fail(&error),
        }
    }

    fn item_begins(&mut self) {
        self.flush_pending(None);
        self.failed.clear();
        self.held = false;
    }

    fn dispatched(
        &mut self,
        processor: ProcessorId,
        feed: &str,
        item: &dyn Any,
        result: Result<(), &str>,
    ) {
        if !self.streams.contains_key(&processor) {
            self.discard();
            return;
        }
        let clock = self.drain(processor);
        match result {
            Ok(()) => {
                self.held = false;
                if self.failed.contains(&processor) {
                    return; // a retry after a marked failure: not reproduced (D4)
                }
                match self.copy_input(feed, item, clock) {
                    Ok(entry) => self.pending.push((processor, entry)),
                    Err(reason) => self.mark_failed(processor, reason),
                }
            }
            Err(reason) => {
                self.held = true;
                self.mark_failed(processor, format!("the dispatch failed: {reason}"));
            }
        }
    }

    fn completed(
        &mut self,
        owner: Option<ProcessorId>,
        key: CompletionKey,
        result: Result<(), &str>,
    ) {
        let Some(owner) = owner.filter(|owner| self.streams.contains_key(owner)) else {
            self.held = result.is_err();
            self.discard();
            return;
        };
        let readings = self.drain(owner);
        if let Some((_, Entry::Indexed { clock, .. } | Entry::Inline { clock, .. })) = self
            .pending
            .iter_mut()
            .rev()
            .find(|(processor, entry)| *processor == owner && entry.is_input())
        {
            clock.extend(readings);
        }
        match result {
            Ok(()) => self.held = false,
            Err(reason) => {
                self.held = true;
                self.mark_failed(
                    owner,
                    format!(
                        "a delivery-complete callback (key {}) failed: {reason}",
                        key.0
                    ),
                );
            }
        }
    }

    fn timer_fired(&mut self, processor: ProcessorId, timer: u64, result: Result<(), &str>) {
        if !self.streams.contains_key(&processor) {
            self.discard();
            return;
        }
        self.flush_pending(Some(processor));
        let clock = self.drain(processor);
        let entry = match result {
            Ok(()) => Entry::TimerFired {
                schedule: timer,
                clock,
            },
            Err(reason) => Entry::Failed {
                reason: format!("timer {timer} failed: {reason}"),
            },
        };
        self.write(processor, &entry);
        self.drain_outputs();
    }

    fn stopped(&mut self, processor: ProcessorId, by_request: bool, result: Result<(), &str>) {
        if !self.streams.contains_key(&processor) {
            self.discard();
            return;
        }
        self.flush_pending(Some(processor));
        let clock = self.drain(processor);
        if by_request {
            let entry = match result {
                Ok(()) => Entry::Stopped { clock },
                Err(reason) => Entry::Failed {
                    reason: format!("its stop failed: {reason}"),
                },
            };
            self.write(processor, &entry);
        }
        self.drain_outputs();
        let stream = self.streams.remove(&processor);
        // a stop by request is replayed: the requests its stop() made follow its entry
        self.last_stopped = stream
            .filter(|_| by_request && result.is_ok())
            .map(|stream| (processor, stream));
    }

    fn dropped(
        &mut self,
        processor: ProcessorId,
        feed: &str,
        first_sequence: u64,
        last_sequence: u64,
        count: u64,
    ) {
        if !self.streams.contains_key(&processor) {
            return;
        }
        // the loss comes after everything the queue gave before it
        self.flush_pending(None);
        // exact when the dropped sequences are contiguous; otherwise the first ones
        // are numbered on from the first and the last keeps its own
        for index in 0..count {
            let sequence = if index + 1 == count {
                last_sequence
            } else {
                first_sequence + index
            };
            let entry = Entry::Dropped {
                feed: feed.to_owned(),
                sequence,
            };
            self.write(processor, &entry);
        }
    }

    fn service_changed(
        &mut self,
        processor: ProcessorId,
        service: &str,
        version: u64,
        delivered: bool,
    ) {
        if !self.streams.contains_key(&processor) {
            return;
        }
        // a service change is an input of its own, between items
        self.flush_pending(None);
        let clock = self.drain(processor);
        let entry = Entry::ServiceChanged {
            service: service.to_owned(),
            version,
            delivered,
            clock,
        };
        self.write(processor, &entry);
    }

    fn item_finished(&mut self) {
        // written before the item counts as dispatched, so its feed never commits an
        // item whose entry was not written (with a write buffer: handed to the buffer,
        // which the poll's end flushes); a finished item is no longer held for a retry
        self.held = false;
        self.flush_pending(None);
    }

    fn polled(&mut self) {
        if !self.held {
            self.flush_pending(None);
        }
        if self.config.write_buffer > 0 {
            if let Err(error) = self.store.flush() {
                self.fail(&error);
            }
        }
    }

    fn closing(&mut self) {
        self.close_all(None);
        tap::uninstall();
    }

    fn control_call(
        &mut self,
        processor: ProcessorId,
        call: &str,
        args: &[String],
        outcome: Result<(), &str>,
    ) {
        let entry = Entry::ControlCall {
            call: call.to_owned(),
            args: args.to_vec(),
            outcome: match outcome {
                Ok(()) => ControlOutcome::Ok,
                Err(text) => ControlOutcome::Failed(text.to_owned()),
            },
        };
        if let Some((stopped, stream)) = &self.last_stopped {
            if *stopped == processor {
                // made in the stop() whose Stopped entry was just written
                match self.store.append(stream.handle, &entry) {
                    Ok(()) => self.shared.lock().entries += 1,
                    Err(error) => self.fail(&error),
                }
                return;
            }
        }
        if !self.streams.contains_key(&processor) || self.failed.contains(&processor) {
            return; // not recorded, or its input failed: not reproduced
        }
        // after the entry of the call that made it: the current item's input is still
        // pending (written when the item is over), every other entry is written already
        if self.pending.iter().any(|(owner, _)| *owner == processor) {
            self.pending.push((processor, entry));
        } else {
            self.write(processor, &entry);
        }
    }

    fn admin_invoked(
        &mut self,
        processor: ProcessorId,
        command: &str,
        args: &[String],
        outcome: AdminOutcome<'_>,
    ) {
        if !self.streams.contains_key(&processor) {
            self.discard();
            return;
        }
        // a command is an input of its own, between items
        self.flush_pending(None);
        let clock = self.drain(processor);
        let result = match outcome {
            AdminOutcome::Output(output) => Ok(output.to_owned()),
            // an error is the command's answer: the processor keeps running, and a
            // replay calls the command again and collects the same answer
            AdminOutcome::Error(error) => Err(error.to_owned()),
            AdminOutcome::Panicked(reason) => {
                // a failure of the processor, like a failed timer: marked, not reproduced
                let entry = Entry::Failed {
                    reason: format!(
                        "admin command {} failed: {reason}",
                        command_line(command, args)
                    ),
                };
                self.write(processor, &entry);
                self.drain_outputs();
                return;
            }
        };
        let entry = Entry::AdminInvoked {
            command: command.to_owned(),
            args: args.to_vec(),
            clock,
        };
        self.write(processor, &entry);
        self.drain_outputs();
        self.write_admin_reply(
            processor,
            AdminReply {
                command: command.to_owned(),
                args: args.to_vec(),
                result,
            },
        );
    }
}

impl Recorder {
    fn write_admin_reply(&mut self, processor: ProcessorId, reply: AdminReply) {
        let Some(stream) = self.streams.get(&processor) else {
            return;
        };
        let line = RecordedAdminReply {
            stream: stream.key.clone(),
            reply,
        };
        let written = serde_json::to_writer(&mut self.admin_replies, &line)
            .map_err(std::io::Error::from)
            .and_then(|()| self.admin_replies.write_all(b"\n"));
        if let Err(source) = written {
            self.fail(&ReplayError::Io {
                path: self.dir.join(ADMIN_REPLIES_FILE),
                source,
            });
        }
    }
}

/// `command arg1 arg2`, as an operator typed it.
fn command_line(command: &str, args: &[String]) -> String {
    std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}
