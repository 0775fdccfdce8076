//! Schedules from seeds. A seed picks a fault family, a workload, a source and a sink
//! the family applies to, and then the family's steps with random sizes, moments and
//! combinations; every scenario also gets a few kills and pauses of the server at
//! random places. The same seed always gives the same schedule.
//!
//! A family and a seed give a schedule ([`generate_in`]); a seed alone picks its family
//! ([`family_of`]: `seed % FAMILIES.len()`). Families are only ever added at the end of
//! [`FAMILIES`], and the seeds of `seeds.toml` name their family, so a kept seed gives
//! the same schedule whatever families come later.

use std::cell::RefCell;

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::scenario::{
    Damage, Disk, HttpMode, Options, PeerAction, PeerKind, RotateMode, Scenario, SinkKind,
    SourceKind, StateFile, Step, Workload,
};

mod aggregate;
mod http_batch;
mod kafka;
mod surfaces;

/// The fault families a seed chooses from (the `family` column of the report). New
/// families go at the end only (see the module's documentation).
pub const FAMILIES: &[&str] = &[
    "kills",
    "crash-loop",
    "busy-kill",
    "rotation",
    "glob-churn",
    "state-damage",
    "full-disk",
    "two-writers",
    "http-faults",
    "recreate-source",
    "journal-faults",
    "archive-faults",
    "udp-gap",
    // the surfaces of issue 35: a broker, reloads, consumers of two kinds, HTTP batches,
    // another spelling of the config's path, progress under a crash loop
    "kafka",
    "reload",
    "mixed-consumers",
    "http-batch",
    "path-spelling",
    "crash-loop-progress",
    // issue 40: the `aggregate` processor kind under kills, a crash loop, state damage
    "aggregate",
];

/// How many families there were before issue 35's (the seeds kept before it name one
/// of these, `seed % 13`).
pub const FIRST_FAMILIES: usize = 13;

/// The family a seed's schedule belongs to.
pub fn family_of(seed: u64) -> &'static str {
    FAMILIES[(seed % FAMILIES.len() as u64) as usize]
}

/// The schedule of `seed`, in its family ([`family_of`]).
pub fn generate(seed: u64) -> Scenario {
    generate_family(family_of(seed), seed)
}

/// The schedule of `seed` in `family`.
///
/// # Errors
/// `family` is not one of [`FAMILIES`] (the message lists them).
pub fn generate_in(family: &str, seed: u64) -> Result<Scenario, String> {
    let known = FAMILIES
        .iter()
        .find(|known| **known == family)
        .ok_or_else(|| {
            format!(
                "no chaos family `{family}`: the families are {}",
                FAMILIES.join(", ")
            )
        })?;
    Ok(generate_family(known, seed))
}

fn generate_family(family: &'static str, seed: u64) -> Scenario {
    let mut builder = Builder {
        random: RefCell::new(ChaCha8Rng::seed_from_u64(seed)),
        steps: Vec::new(),
    };
    let (workload, source, sink, writers, options) = builder.shape(family);
    let mut scenario = Scenario {
        seed,
        family: family.to_owned(),
        workload,
        source,
        sink,
        writers,
        options,
        steps: Vec::new(),
    };
    builder.steps_of(family, &mut scenario);
    scenario.steps = builder.steps;
    scenario
}

pub(crate) struct Builder {
    random: RefCell<ChaCha8Rng>,
    pub(crate) steps: Vec<Step>,
}

impl Builder {
    pub(crate) fn chance(&self, percent: u32) -> bool {
        self.random.borrow_mut().random_range(0..100) < percent
    }

    pub(crate) fn pick<T: Copy>(&self, items: &[T]) -> T {
        *items
            .choose(&mut *self.random.borrow_mut())
            .expect("a non-empty list")
    }

    pub(crate) fn between(&self, low: u32, high: u32) -> u32 {
        self.random.borrow_mut().random_range(low..=high)
    }

    pub(crate) fn stream(&self, streams: u32) -> u32 {
        self.random.borrow_mut().random_range(0..streams.max(1))
    }

    pub(crate) fn append(&mut self, streams: u32, low: u32, high: u32) {
        let lines = self.between(low, high);
        let stream = self.stream(streams);
        self.steps.push(Step::Append {
            lines,
            stream,
            bytes: None,
        });
    }

    /// A little of everything: the server killed or paused at random places.
    pub(crate) fn background(&mut self, streams: u32) {
        for _ in 0..self.between(0, 2) {
            match self.between(0, 3) {
                0 => {
                    self.steps.push(Step::Start);
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(50, 600)),
                    });
                    self.steps.push(Step::Kill);
                }
                1 => {
                    self.steps.push(Step::Start);
                    self.steps.push(Step::Pause {
                        ms: u64::from(self.between(50, 1500)),
                    });
                }
                2 => self.append(streams, 100, 3_000),
                _ => {
                    self.steps.push(Step::Start);
                    self.steps.push(Step::Settle);
                    self.steps.push(Step::Term);
                }
            }
        }
    }

    fn shape(&mut self, family: &str) -> (Workload, SourceKind, SinkKind, u8, Options) {
        let mut options = Options::default();
        let mut workload = self.pick(&[Workload::Ledger, Workload::Forward]);
        let any_source = [
            SourceKind::File,
            SourceKind::Glob,
            SourceKind::Journal,
            SourceKind::ArchiveIpc,
        ];
        let any_sink = [
            SinkKind::File,
            SinkKind::File,
            SinkKind::Http,
            SinkKind::Journal,
            SinkKind::Tcp,
        ];
        let mut source = self.pick(&any_source);
        let mut sink = self.pick(&any_sink);
        let mut writers = 1;
        match family {
            "crash-loop" | "busy-kill" => {
                source = self.pick(&[SourceKind::File, SourceKind::Glob, SourceKind::Journal]);
                sink = self.pick(&[SinkKind::File, SinkKind::File, SinkKind::Http]);
                options.negative_percent = self.between(50, 100);
                options.hot_percent = 0;
            }
            "rotation" => source = self.pick(&[SourceKind::File, SourceKind::Glob]),
            "glob-churn" => {
                source = SourceKind::Glob;
                options.streams = self.between(2, 6);
                if self.chance(70) {
                    options.max_open_files = Some(self.between(1, 2));
                }
            }
            "state-damage" => {
                sink = SinkKind::File;
                source = self.pick(&[SourceKind::File, SourceKind::Glob, SourceKind::Journal]);
            }
            "full-disk" => {
                sink = SinkKind::File;
                source = self.pick(&[SourceKind::File, SourceKind::Glob]);
                // large enough for every output once freed: the fault is the full
                // disk the schedule makes, not a disk too small for the run
                if workload == Workload::Forward || self.chance(50) {
                    options.output_tmpfs_kib = Some(32 * 1024);
                } else {
                    options.state_tmpfs_kib = Some(64 * 1024);
                }
                options.line_bytes = self.pick(&[24, 200, 1000]);
            }
            "two-writers" => {
                sink = self.pick(&[SinkKind::File, SinkKind::File, SinkKind::Http]);
                source = self.pick(&[SourceKind::File, SourceKind::Glob]);
                writers = 2;
                if workload == Workload::Forward && sink == SinkKind::File && self.chance(30) {
                    options.two_sinks_one_path = true;
                }
            }
            "http-faults" => {
                sink = SinkKind::Http;
                source = self.pick(&[SourceKind::File, SourceKind::Glob]);
                options.response_timeout_millis = Some(500);
                options.initial_backoff_millis = Some(u64::from(self.between(1, 50)));
                options.max_backoff_millis = Some(u64::from(self.between(50, 400)));
                options.max_retries = Some(self.between(2, 10));
                if self.chance(40) {
                    options.on_exhausted = Some("count_loss".to_owned());
                }
            }
            "recreate-source" => {
                source = self.pick(&[
                    SourceKind::Journal,
                    SourceKind::File,
                    SourceKind::ArchiveIpc,
                ]);
            }
            "journal-faults" => source = SourceKind::Journal,
            "archive-faults" => source = SourceKind::ArchiveIpc,
            "udp-gap" => {
                source = SourceKind::ArchiveUdp;
                options.udp_drop_every = Some(self.between(5, 40));
                options.udp_retransmit_bytes = Some(self.pick(&[2_048, 8_192, 65_536]));
            }
            "kafka" => {
                let shape = self.kafka_shape(workload, &mut options);
                (source, sink) = shape;
            }
            "http-batch" => {
                (source, sink) = self.http_batch_shape(&mut options);
            }
            "aggregate" => {
                workload = Workload::Aggregate;
                (source, sink) = self.aggregate_shape(&mut options);
            }
            "reload" | "mixed-consumers" | "path-spelling" | "crash-loop-progress" => {
                (source, sink) = self.surface_shape(family, workload, &mut options);
            }
            _ => {}
        }
        if source == SourceKind::Glob && options.streams == 1 {
            options.streams = self.between(2, 4);
        }
        (workload, source, sink, writers, options)
    }

    fn steps_of(&mut self, family: &str, scenario: &mut Scenario) {
        let streams = scenario.options.streams;
        self.append(streams, 200, 4_000);
        match family {
            "kills" => {
                for _ in 0..self.between(2, 6) {
                    self.steps.push(Step::Start);
                    self.append(streams, 100, 5_000);
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(20, 800)),
                    });
                    if self.chance(70) {
                        self.steps.push(Step::Kill);
                    } else {
                        self.steps.push(Step::Pause {
                            ms: u64::from(self.between(100, 2_000)),
                        });
                    }
                }
            }
            "crash-loop" => {
                let kills = self.between(20, 80);
                self.steps.push(Step::CrashLoop {
                    kills,
                    min_ms: 50,
                    max_ms: 700,
                    burst_min: 200,
                    burst_max: 4_000,
                    progress_every: None,
                });
            }
            "busy-kill" => {
                self.steps.push(Step::Append {
                    lines: self.between(100_000, 300_000),
                    stream: 0,
                    bytes: None,
                });
                self.steps.push(Step::Start);
                self.steps.push(Step::Wait {
                    ms: u64::from(self.between(300, 3_000)),
                });
                self.steps.push(Step::Kill);
                scenario.options.finish_seconds = 180;
            }
            "rotation" => {
                let mode = self.pick(&[
                    RotateMode::Rename,
                    RotateMode::Create,
                    RotateMode::Copytruncate,
                    RotateMode::Compress,
                ]);
                for _ in 0..self.between(1, 3) {
                    let stream = self.stream(streams);
                    let when = self.between(0, 2);
                    match when {
                        // after the server settled
                        0 => {
                            self.steps.push(Step::Start);
                            self.steps.push(Step::Settle);
                        }
                        // while it is busy
                        1 => {
                            self.steps.push(Step::Append {
                                lines: self.between(20_000, 80_000),
                                stream,
                                bytes: None,
                            });
                            self.steps.push(Step::Start);
                            self.steps.push(Step::Wait {
                                ms: u64::from(self.between(10, 300)),
                            });
                        }
                        // while it is stopped
                        _ => {
                            self.steps.push(Step::Start);
                            self.steps.push(Step::Settle);
                            self.steps.push(Step::Term);
                        }
                    }
                    self.steps.push(Step::Rotate { mode, stream });
                    self.steps.push(Step::Append {
                        lines: self.between(1, 2_000),
                        stream,
                        bytes: None,
                    });
                    if self.chance(30) {
                        self.steps.push(Step::Kill);
                    }
                }
            }
            "glob-churn" => {
                for stream in 0..streams {
                    self.steps.push(Step::Append {
                        lines: self.between(500, 20_000),
                        stream,
                        bytes: None,
                    });
                }
                self.steps.push(Step::Start);
                for _ in 0..self.between(1, 3) {
                    let stream = self.stream(streams);
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(0, 400)),
                    });
                    if self.chance(50) {
                        self.steps.push(Step::DeleteInput { stream });
                    } else {
                        self.steps.push(Step::RenameInGlob { stream });
                    }
                    if self.chance(40) {
                        self.steps.push(Step::Kill);
                        self.steps.push(Step::Start);
                    }
                    self.append(streams, 1, 3_000);
                }
            }
            "state-damage" => {
                let mut candidates = vec![StateFile::SinkState, StateFile::Pointer];
                match scenario.workload {
                    Workload::Ledger | Workload::Aggregate => candidates.extend([
                        StateFile::LedgerOutbox,
                        StateFile::LedgerSnapshot,
                        StateFile::LedgerStateDir,
                    ]),
                    Workload::Forward => candidates.push(StateFile::SinkState),
                }
                match scenario.source {
                    SourceKind::Glob => candidates.push(StateFile::Lanes),
                    SourceKind::Journal => {
                        candidates.retain(|what| *what != StateFile::Pointer);
                        candidates.push(StateFile::TailerStore);
                    }
                    _ => {}
                }
                let what = self.pick(&candidates);
                let how = self.pick(&[
                    Damage::FlipByte {
                        at: self.between(0, 1000),
                    },
                    Damage::CutTail {
                        keep: self.between(100, 990),
                    },
                    Damage::OlderCopy,
                    Damage::Foreign,
                ]);
                if scenario.workload == Workload::Ledger && self.chance(40) {
                    scenario.options.compact_every = Some(u64::from(self.between(500, 5_000)));
                }
                self.steps.push(Step::Start);
                self.steps.push(Step::Settle);
                if how == Damage::OlderCopy {
                    self.steps.push(Step::KeepCopy { what });
                }
                self.append(streams, 2_000, 30_000);
                self.steps.push(Step::Wait {
                    ms: u64::from(self.between(0, 1_500)),
                });
                self.steps.push(if self.chance(50) {
                    Step::Kill
                } else {
                    Step::Term
                });
                if self.chance(20) {
                    self.steps.push(Step::Delete { what });
                } else {
                    self.steps.push(Step::Damage { what, how });
                }
                self.steps.push(Step::Start);
                self.append(streams, 100, 2_000);
            }
            "full-disk" => {
                let under = if scenario.options.output_tmpfs_kib.is_some() {
                    Disk::Outputs
                } else {
                    Disk::State
                };
                self.steps.push(Step::Start);
                self.steps.push(Step::Settle);
                let leave = self.pick(&[0, 0, 4_096, 8_192]);
                self.steps.push(Step::FillDisk { under, leave });
                self.steps.push(Step::Append {
                    lines: self.between(100, 2_000),
                    stream: 0,
                    bytes: None,
                });
                self.steps.push(Step::Wait {
                    ms: u64::from(self.between(100, 800)),
                });
                // a short line after large ones: it fits where they did not
                self.steps.push(Step::Append {
                    lines: self.between(1, 3),
                    stream: 0,
                    bytes: Some(2),
                });
                self.steps.push(Step::Wait {
                    ms: u64::from(self.between(100, 1_500)),
                });
                if self.chance(30) {
                    self.steps.push(Step::Kill);
                    self.steps.push(Step::Start);
                }
                self.steps.push(Step::FreeDisk { under });
                self.append(streams, 100, 2_000);
                self.steps.push(Step::Settle);
            }
            "two-writers" => {
                self.steps.push(Step::Start);
                for _ in 0..self.between(1, 3) {
                    self.append(streams, 500, 5_000);
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(50, 600)),
                    });
                    if self.chance(50) {
                        self.steps.push(Step::Kill);
                        self.steps.push(Step::Start);
                    }
                }
            }
            "http-faults" => {
                self.steps.push(Step::Start);
                for _ in 0..self.between(1, 3) {
                    let mode = self.pick(&[
                        HttpMode::Fail {
                            percent: 25,
                            status: 503,
                        },
                        HttpMode::Fail {
                            percent: 25,
                            status: 500,
                        },
                        HttpMode::Timeout { percent: 10 },
                        HttpMode::Close { percent: 20 },
                    ]);
                    self.steps.push(Step::Http { mode });
                    self.append(streams, 300, 3_000);
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(500, 3_000)),
                    });
                    match self.between(0, 3) {
                        0 => {
                            // an outage longer than the retry budget
                            self.steps.push(Step::Peer {
                                peer: PeerKind::HttpTarget,
                                action: PeerAction::Kill,
                            });
                            self.append(streams, 10, 500);
                            self.steps.push(Step::Wait {
                                ms: u64::from(self.between(2_000, 6_000)),
                            });
                            self.steps.push(Step::Peer {
                                peer: PeerKind::HttpTarget,
                                action: PeerAction::Restart,
                            });
                        }
                        1 => self.steps.push(Step::Peer {
                            peer: PeerKind::HttpTarget,
                            action: PeerAction::Pause {
                                ms: u64::from(self.between(200, 3_000)),
                            },
                        }),
                        2 => self.steps.push(Step::Kill),
                        _ => {}
                    }
                    self.steps.push(Step::Http { mode: HttpMode::Ok });
                    self.steps.push(Step::Settle);
                }
            }
            "recreate-source" => {
                self.steps.push(Step::Start);
                if self.chance(70) {
                    self.steps.push(Step::Settle);
                } else {
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(20, 500)),
                    });
                }
                self.steps.push(Step::Term);
                self.steps.push(Step::RecreateSource);
                self.append(streams, 20, 3_000);
                if self.chance(50) {
                    self.steps.push(Step::Start);
                    self.steps.push(Step::Settle);
                }
            }
            "journal-faults" => {
                self.steps.push(Step::Start);
                for _ in 0..self.between(1, 3) {
                    self.append(streams, 500, 5_000);
                    match self.between(0, 4) {
                        0 => self.steps.push(Step::Peer {
                            peer: PeerKind::Appender,
                            action: PeerAction::Kill,
                        }),
                        4 => {
                            self.steps.push(Step::Damage {
                                what: StateFile::JournalExcerpt,
                                how: Damage::FlipByte {
                                    at: self.between(0, 1000),
                                },
                            });
                            self.append(streams, 10, 2_000);
                        }
                        1 => self.steps.push(Step::Peer {
                            peer: PeerKind::Appender,
                            action: PeerAction::Pause {
                                ms: u64::from(self.between(100, 1_000)),
                            },
                        }),
                        2 => {
                            self.steps.push(Step::Kill);
                            let how = self.pick(&[
                                Damage::FlipByte {
                                    at: self.between(0, 1000),
                                },
                                Damage::CutTail {
                                    keep: self.between(100, 990),
                                },
                            ]);
                            self.steps.push(if self.chance(50) {
                                Step::Delete {
                                    what: StateFile::TailerStore,
                                }
                            } else {
                                Step::Damage {
                                    what: StateFile::TailerStore,
                                    how,
                                }
                            });
                            self.steps.push(Step::Start);
                        }
                        _ => self.steps.push(Step::Kill),
                    }
                    self.steps.push(Step::Start);
                }
            }
            "archive-faults" => {
                self.steps.push(Step::Start);
                for _ in 0..self.between(1, 3) {
                    self.append(streams, 500, 5_000);
                    match self.between(0, 3) {
                        0 => {
                            self.steps.push(Step::Peer {
                                peer: PeerKind::Archiver,
                                action: PeerAction::Kill,
                            });
                            self.steps.push(Step::Wait {
                                ms: u64::from(self.between(50, 500)),
                            });
                            self.steps.push(Step::Peer {
                                peer: PeerKind::Archiver,
                                action: PeerAction::Restart,
                            });
                        }
                        1 => self.steps.push(Step::Peer {
                            peer: PeerKind::Archiver,
                            action: PeerAction::Pause {
                                ms: u64::from(self.between(100, 1_500)),
                            },
                        }),
                        2 => {
                            self.steps.push(Step::Kill);
                            self.steps.push(if self.chance(50) {
                                Step::Delete {
                                    what: StateFile::ArchivePointer,
                                }
                            } else {
                                Step::Damage {
                                    what: StateFile::ArchivePointer,
                                    how: Damage::FlipByte {
                                        at: self.between(0, 1000),
                                    },
                                }
                            });
                        }
                        _ => self.steps.push(Step::Kill),
                    }
                    self.steps.push(Step::Start);
                }
            }
            "udp-gap" => {
                self.steps.push(Step::Start);
                self.append(streams, 1_000, 5_000);
                self.steps.push(Step::Settle);
            }
            "kafka" => {
                self.kafka_steps(scenario);
                // its own kills and pauses, placed where the broker's faults leave room
                return;
            }
            "http-batch" => self.http_batch_steps(scenario),
            "aggregate" => self.aggregate_steps(scenario),
            "reload" | "mixed-consumers" | "path-spelling" | "crash-loop-progress" => {
                self.surface_steps(family, scenario);
                // these families' own kills are the point: no random ones added
                return;
            }
            _ => {}
        }
        self.background(streams);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_gives_the_same_schedule() {
        for seed in [0, 1, 17, 123_456] {
            assert_eq!(generate(seed), generate(seed));
        }
    }

    #[test]
    fn the_seeds_cover_every_family_source_and_sink() {
        let scenarios: Vec<Scenario> = (0..400).map(generate).collect();
        for family in FAMILIES {
            assert!((0..400).any(|seed| family_of(seed) == *family), "{family}");
        }
        for source in [
            SourceKind::File,
            SourceKind::Glob,
            SourceKind::Journal,
            SourceKind::ArchiveIpc,
            SourceKind::ArchiveUdp,
        ] {
            assert!(
                scenarios.iter().any(|scenario| scenario.source == source),
                "{source:?}"
            );
        }
        for sink in [
            SinkKind::File,
            SinkKind::Http,
            SinkKind::Journal,
            SinkKind::Tcp,
        ] {
            assert!(
                scenarios.iter().any(|scenario| scenario.sink == sink),
                "{sink:?}"
            );
        }
    }

    #[test]
    fn every_generated_schedule_reads_back_from_its_toml() {
        for seed in 0..60 {
            let scenario = generate(seed);
            assert_eq!(
                Scenario::from_toml(&scenario.to_toml()).as_ref(),
                Ok(&scenario),
                "{}",
                scenario.to_toml()
            );
        }
    }
}
