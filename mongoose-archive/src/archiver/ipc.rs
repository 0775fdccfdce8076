//! The archiver's IPC side: finding the rings publishers create and recording them.

use crate::catalog::{CatalogEvent, StopReason};
use crate::error::{ArchiveError, Result};
use crate::ipc::{Ring, RING_EXTENSION};
use std::fs::{self};
use std::path::Path;
use std::time::Instant;

use super::{Archiver, IpcState, Transport};

impl Archiver {
    pub(super) fn read_rings(&mut self) -> Result<usize> {
        let Some(ipc_dir) = self.config.ipc_dir.clone() else {
            return Ok(0);
        };
        if self
            .last_ipc_scan
            .is_none_or(|at| at.elapsed() >= self.config.ipc_scan_interval)
        {
            self.last_ipc_scan = Some(Instant::now());
            self.scan_rings(&ipc_dir)?;
        }
        let mut work = 0;
        let mut finished = Vec::new();
        for (key, active) in self.active.iter_mut() {
            let Transport::Ipc(ipc) = &mut active.transport else {
                continue;
            };
            let mut position = active.writer.end();
            let writer = &mut active.writer;
            let frames =
                ipc.ring
                    .read_frames(&mut position, 4096, &mut ipc.scratch, |at, payload| {
                        writer.append_message(at, payload)
                    })?;
            if frames > 0 {
                self.counters.messages += frames as u64;
                active.dirty = true;
                active.last_heard = Instant::now();
                work += frames;
            } else if ipc.ring.is_closed() && position == ipc.ring.write_position() {
                finished.push(*key);
            }
        }
        for key in finished {
            self.stop_recording(key, StopReason::PublicationEnded)?;
        }
        Ok(work)
    }

    fn scan_rings(&mut self, ipc_dir: &Path) -> Result<()> {
        let entries =
            fs::read_dir(ipc_dir).map_err(ArchiveError::io("list the IPC directory", ipc_dir))?;
        for entry in entries {
            let entry = entry.map_err(ArchiveError::io("list the IPC directory", ipc_dir))?;
            let path = entry.path();
            if path.extension().and_then(|ext| ext.to_str()) != Some(RING_EXTENSION)
                || self.rings_seen.contains(&path)
            {
                continue;
            }
            let ring = match Ring::open(&path) {
                Ok(ring) => ring,
                Err(error) => {
                    tracing::warn!(ring = %path.display(), %error, "cannot open an IPC ring; skipping it");
                    self.rings_seen.insert(path);
                    continue;
                }
            };
            self.rings_seen.insert(path.clone());
            let key = (ring.stream(), ring.session());
            let start = ring.reader_position();
            let source = format!("ipc {}", path.display());
            self.ensure_recording(key, start, source)?;
            let active = self.active.get_mut(&key).expect("ensured above");
            let from = active.writer.end();
            // The previous reader position is a frame start, and the writer never
            // overwrote anything after it; bytes before it may be overwritten.
            let released = ring.reader_position();
            // the writer may reuse nothing before `from` from now on
            ring.set_reader_position(from.min(released));
            let oldest_intact = ring.write_position().saturating_sub(ring.capacity());
            if from < oldest_intact && from < released {
                // the recording lost a tail the ring had already released (a power
                // loss took unsynced segment bytes): the ring resumes at the released
                // position, a frame start; what lies between is recorded as lost
                tracing::warn!(
                    recording = active.id,
                    from,
                    to = released,
                    "the IPC ring no longer holds the cut tail; recording it as lost"
                );
                active.writer.append_gap(from, released)?;
                self.catalog.append(CatalogEvent::Gap {
                    id: active.id,
                    from,
                    to: released,
                })?;
                self.counters.gaps_recorded += 1;
                ring.set_reader_position(released);
            }
            tracing::info!(recording = active.id, ring = %path.display(), from = active.writer.end(), "recording an IPC ring");
            active.transport = Transport::Ipc(IpcState {
                ring,
                scratch: Vec::new(),
            });
            active.last_heard = Instant::now();
        }
        Ok(())
    }
}
