//! The families of the newest surfaces: `reload` (SIGHUP storms that replace, remove
//! and add back consumers while their sinks hold outputs, `data_dir` changes, half
//! written and empty config files, reloads with kills), `mixed-consumers` (a feed read by
//! consumers of two kinds, its pointer lost, damaged or another input's),
//! `path-spelling` (the same config through `..`, a symbolic link, a relative path from
//! another folder) and `crash-loop-progress` (kills every 0.2-0.5 s over a large input:
//! every ten kills must leave more applied).

use crate::scenario::{
    Also, Damage, Options, PeerAction, PeerKind, ReloadChange, Scenario, SinkKind, SourceKind,
    Spelling, StateFile, Step, Workload,
};

use super::Builder;

impl Builder {
    /// The source and sink (and the other consumers) of a scenario of these families.
    pub(crate) fn surface_shape(
        &mut self,
        family: &str,
        workload: Workload,
        options: &mut Options,
    ) -> (SourceKind, SinkKind) {
        match family {
            "mixed-consumers" => {
                let source = self.pick(&[
                    SourceKind::File,
                    SourceKind::File,
                    SourceKind::Glob,
                    SourceKind::Glob,
                    SourceKind::Journal,
                    SourceKind::ArchiveIpc,
                ]);
                // a forward into HTTP alone: the consumer that keeps no position is the
                // only one
                if workload == Workload::Forward && self.chance(20) {
                    return (source, SinkKind::Http);
                }
                let mut others = vec![
                    Also::Forward {
                        sink: SinkKind::Http,
                    },
                    Also::Forward {
                        sink: SinkKind::Http,
                    },
                    Also::Forward {
                        sink: SinkKind::Tcp,
                    },
                    Also::Forward {
                        sink: SinkKind::Stdout,
                    },
                    Also::Forward {
                        sink: SinkKind::File,
                    },
                ];
                // a ledger reads `account,amount` lines: the ledger workload's
                if workload == Workload::Ledger {
                    others.push(Also::LedgerUnguarded);
                }
                options.also.push(self.pick(&others));
                if self.chance(30) {
                    let second = self.pick(&others);
                    if !options.also.contains(&second) {
                        options.also.push(second);
                    }
                }
                (source, SinkKind::File)
            }
            "reload" => {
                options.also.push(Also::Forward {
                    sink: SinkKind::Http,
                });
                // mostly one group for the others: a replaced or removed consumer leaves
                // the group's queue to the rest
                options.shared_group = self.chance(70);
                // its stops come with the HTTP target down: a short bound keeps them quick
                options.shutdown_timeout_millis = Some(3_000);
                if options.shared_group || self.chance(30) {
                    options
                        .also
                        .push(if workload == Workload::Ledger && self.chance(50) {
                            Also::LedgerUnguarded
                        } else {
                            Also::Forward {
                                sink: SinkKind::File,
                            }
                        });
                }
                (
                    self.pick(&[SourceKind::File, SourceKind::Glob]),
                    SinkKind::File,
                )
            }
            "path-spelling" => {
                let sink = self.pick(&[SinkKind::File, SinkKind::Http]);
                if sink == SinkKind::File && self.chance(50) {
                    options.also.push(Also::Forward {
                        sink: SinkKind::Http,
                    });
                }
                (self.pick(&[SourceKind::File, SourceKind::Glob]), sink)
            }
            // crash-loop-progress
            _ => {
                options.negative_percent = self.between(1, 10);
                options.hot_percent = 0;
                (
                    self.pick(&[SourceKind::File, SourceKind::File, SourceKind::Glob]),
                    SinkKind::File,
                )
            }
        }
    }

    /// The steps of a scenario of these families.
    pub(crate) fn surface_steps(&mut self, family: &str, scenario: &mut Scenario) {
        match family {
            "mixed-consumers" => self.mixed_consumer_steps(scenario),
            "reload" => self.reload_steps(scenario),
            "path-spelling" => self.path_spelling_steps(scenario),
            _ => self.crash_loop_progress_steps(scenario),
        }
    }

    /// Whether a consumer of `scenario` sends to the HTTP target (which the schedule
    /// may take down so that its sink holds outputs).
    fn has_http(scenario: &Scenario) -> bool {
        scenario.sink == SinkKind::Http
            || scenario.options.also.contains(&Also::Forward {
                sink: SinkKind::Http,
            })
    }

    fn mixed_consumer_steps(&mut self, scenario: &mut Scenario) {
        let streams = scenario.options.streams;
        let http = Self::has_http(scenario);
        self.steps.push(Step::Start);
        if self.chance(60) {
            self.steps.push(Step::Settle);
        }
        // the HTTP target down: its sink holds outputs when the server stops
        let down = http && self.chance(60);
        if down {
            self.steps.push(Step::Peer {
                peer: PeerKind::HttpTarget,
                action: PeerAction::Kill,
            });
        }
        self.append(streams, 200, 5_000);
        self.steps.push(Step::Wait {
            ms: u64::from(self.between(100, 1_500)),
        });
        // a SIGTERM with the target down waits for the held outputs until the shutdown
        // timeout: mostly kills
        self.steps.push(if self.chance(75) {
            Step::Kill
        } else {
            Step::Term
        });
        let what = match scenario.source {
            SourceKind::Journal => StateFile::TailerStore,
            SourceKind::ArchiveIpc | SourceKind::ArchiveUdp => StateFile::ArchivePointer,
            SourceKind::Glob if self.chance(30) => StateFile::Lanes,
            _ => StateFile::Pointer,
        };
        match self.between(0, 3) {
            0 => self.steps.push(Step::Delete { what }),
            1 => self.steps.push(Step::Damage {
                what,
                how: Damage::FlipByte {
                    at: self.between(0, 1000),
                },
            }),
            2 => self.steps.push(Step::Damage {
                what,
                how: Damage::CutTail {
                    keep: self.between(100, 990),
                },
            }),
            _ => self.steps.push(Step::Damage {
                what,
                how: Damage::Foreign,
            }),
        }
        if down {
            self.steps.push(Step::Peer {
                peer: PeerKind::HttpTarget,
                action: PeerAction::Restart,
            });
        }
        self.steps.push(Step::Start);
        self.append(streams, 100, 2_000);
        self.steps.push(Step::Settle);
    }

    fn reload_steps(&mut self, scenario: &mut Scenario) {
        let streams = scenario.options.streams;
        self.steps.push(Step::Start);
        self.append(streams, 200, 3_000);
        self.steps.push(Step::Settle);
        let http = PeerKind::HttpTarget;
        for _ in 0..self.between(2, 4) {
            match self.between(0, 5) {
                // a sink holding outputs (its target down) replaced by another of the
                // same target
                0 => {
                    self.steps.push(Step::Peer {
                        peer: http,
                        action: PeerAction::Kill,
                    });
                    self.append(streams, 20, 800);
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(300, 1_200)),
                    });
                    self.steps.push(Step::Reload {
                        change: ReloadChange::ReplaceSink { consumer: 1 },
                    });
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(100, 800)),
                    });
                    if self.chance(30) {
                        self.steps.push(Step::Kill);
                        self.steps.push(Step::Start);
                    }
                    self.steps.push(Step::Peer {
                        peer: http,
                        action: PeerAction::Restart,
                    });
                    self.steps.push(Step::Settle);
                }
                // removed while it holds outputs, added back, then a restart: what it
                // held was never committed, so the re-read delivers it
                1 => {
                    self.steps.push(Step::Peer {
                        peer: http,
                        action: PeerAction::Kill,
                    });
                    self.append(streams, 20, 800);
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(300, 1_200)),
                    });
                    self.steps.push(Step::Reload {
                        change: ReloadChange::Remove { consumer: 1 },
                    });
                    if self.chance(50) {
                        self.append(streams, 10, 500);
                    }
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(100, 800)),
                    });
                    self.steps.push(Step::Reload {
                        change: ReloadChange::AddBack { consumer: 1 },
                    });
                    self.steps.push(Step::Peer {
                        peer: http,
                        action: PeerAction::Restart,
                    });
                    self.steps.push(if self.chance(50) {
                        Step::Kill
                    } else {
                        Step::Term
                    });
                    self.steps.push(Step::Start);
                    self.steps.push(Step::Settle);
                }
                2 => {
                    self.steps.push(Step::Reload {
                        change: ReloadChange::DataDir,
                    });
                    self.append(streams, 10, 1_000);
                    self.steps.push(Step::Reload {
                        change: ReloadChange::Restore,
                    });
                }
                3 => {
                    self.steps.push(Step::Reload {
                        change: self.pick(&[ReloadChange::HalfWritten, ReloadChange::Empty]),
                    });
                    self.append(streams, 10, 1_000);
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(50, 500)),
                    });
                    self.steps.push(Step::Reload {
                        change: ReloadChange::Restore,
                    });
                }
                // a storm: several reloads at once, then a kill
                4 => {
                    self.append(streams, 100, 2_000);
                    for _ in 0..self.between(2, 6) {
                        self.steps.push(Step::Reload {
                            change: self.pick(&[
                                ReloadChange::ReplaceSink { consumer: 1 },
                                ReloadChange::Restore,
                            ]),
                        });
                    }
                    self.steps.push(Step::Kill);
                    self.steps.push(Step::Start);
                }
                _ => {
                    self.steps.push(Step::Reload {
                        change: ReloadChange::ReplaceSink { consumer: 1 },
                    });
                    self.append(streams, 100, 2_000);
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(20, 400)),
                    });
                    self.steps.push(Step::Kill);
                    self.steps.push(Step::Start);
                }
            }
        }
        self.append(streams, 10, 500);
    }

    fn path_spelling_steps(&mut self, scenario: &mut Scenario) {
        let streams = scenario.options.streams;
        self.steps.push(Step::Start);
        self.append(streams, 200, 3_000);
        self.steps.push(Step::Settle);
        let others = [Spelling::DotDot, Spelling::Symlink, Spelling::Elsewhere];
        for _ in 0..self.between(1, 3) {
            self.steps.push(if self.chance(50) {
                Step::Kill
            } else {
                Step::Term
            });
            let how = if self.chance(25) {
                Spelling::Plain
            } else {
                self.pick(&others)
            };
            self.steps.push(Step::Respell { how });
            self.append(streams, 100, 2_000);
            self.steps.push(Step::Start);
            self.steps.push(Step::Settle);
        }
    }

    fn crash_loop_progress_steps(&mut self, scenario: &mut Scenario) {
        let streams = scenario.options.streams;
        let lines = if scenario.workload == Workload::Ledger {
            self.between(400_000, 1_000_000)
        } else {
            self.between(200_000, 600_000)
        };
        for stream in 0..streams {
            self.steps.push(Step::Append {
                lines: lines / streams,
                stream,
                bytes: None,
            });
        }
        self.steps.push(Step::CrashLoop {
            kills: self.between(60, 100),
            min_ms: 200,
            max_ms: 500,
            burst_min: 0,
            burst_max: 2_000,
            progress_every: Some(10),
        });
        scenario.options.finish_seconds = 180;
    }
}
