//! `mongoose archive serve|publish|list|describe|replay`: the archive's operator tools
//! ([`mongoose_archive`]).
//!
//! * `serve DIR [--udp ADDR] [--ipc DIR]`: runs an archiver recording every UDP
//!   publication sent to ADDR and every IPC ring created in the IPC folder, until
//!   SIGTERM or SIGINT.
//! * `publish (--udp ADDR | --ipc DIR) --stream S [--session N]`: offers each line of
//!   standard input as one message (waiting while back-pressured), then closes the
//!   publication (waiting until the archiver has everything, for UDP).
//! * `list DIR`, `describe DIR ID`: the recording catalog.
//! * `replay DIR (--recording ID | --stream S) [--from POSITION] [--follow]`: prints
//!   `position<TAB>text` per message (a gap as `GAP from..to`).

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use mongoose_archive::{
    Archiver, ArchiverConfig, IpcPublication, Offer, Publication, RecordingDescriptor,
    RecordingReader, RecordingSelector, ReplayEvent, UdpPublication,
};

use mongoose_server::ServerError;

fn archive_error(context: &str, error: mongoose_archive::ArchiveError) -> ServerError {
    ServerError::Io {
        context: context.to_owned(),
        error: std::io::Error::other(error.to_string()),
    }
}

fn write_error(error: std::io::Error) -> ServerError {
    ServerError::Io {
        context: "cannot write standard output".to_owned(),
        error,
    }
}

/// Runs an archiver on `dir` until `stop`.
///
/// # Errors
/// The archive cannot be opened or written (a full disk stops it with the cause).
pub fn serve(
    dir: &Path,
    udp: Option<SocketAddr>,
    ipc: Option<&Path>,
    stop: &AtomicBool,
) -> Result<(), ServerError> {
    let mut config = ArchiverConfig::new(dir);
    config.udp_bind = udp;
    config.ipc_dir = ipc.map(Path::to_path_buf);
    let mut archiver =
        Archiver::open(config).map_err(|error| archive_error("cannot open the archive", error))?;
    if let Some(address) = archiver.udp_addr() {
        tracing::info!(%address, archive = %dir.display(), "archiver listening for UDP publications");
    }
    archiver
        .run_until(stop)
        .map_err(|error| archive_error("the archiver stopped", error))
}

/// Offers each line of `input` as one message on a new publication; returns the count
/// and the stream position after the last.
///
/// # Errors
/// The publication cannot be made or a message cannot be sent.
pub fn publish(
    udp: Option<SocketAddr>,
    ipc: Option<&Path>,
    stream: u32,
    session: u32,
    input: impl BufRead,
) -> Result<(u64, u64), ServerError> {
    let mut publication: Box<dyn Publication> = match (udp, ipc) {
        (Some(address), None) => Box::new(
            UdpPublication::connect(address, stream, session)
                .map_err(|error| archive_error("cannot open the UDP publication", error))?,
        ),
        (None, Some(dir)) => Box::new(
            IpcPublication::create(dir, stream, session)
                .map_err(|error| archive_error("cannot create the IPC publication", error))?,
        ),
        _ => {
            return Err(ServerError::invalid(
                "archive publish",
                "give one of --udp ADDR or --ipc DIR",
            ))
        }
    };
    let mut count = 0u64;
    for line in input.split(b'\n') {
        let line = line.map_err(|error| ServerError::Io {
            context: "cannot read standard input".to_owned(),
            error,
        })?;
        loop {
            match publication
                .offer(&line)
                .map_err(|error| archive_error("cannot publish", error))?
            {
                Offer::Accepted { .. } => break,
                Offer::BackPressured => std::thread::sleep(Duration::from_micros(200)),
            }
        }
        count += 1;
    }
    // until the archiver has everything (a UDP publication answers retransmit
    // requests meanwhile, within its linger time)
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if publication
            .close()
            .map_err(|error| archive_error("cannot close the publication", error))?
        {
            return Ok((count, publication.position()));
        }
        if std::time::Instant::now() >= deadline {
            return Err(ServerError::Io {
                context: format!(
                    "the archiver did not confirm it recorded the publication up to position {}: is `mongoose archive serve` running?",
                    publication.position()
                ),
                error: std::io::Error::from(std::io::ErrorKind::TimedOut),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn describe_line(recording: &RecordingDescriptor) -> String {
    format!(
        "{}\tstream {}\tsession {}\t{}..{}\t{}\tgaps {} ({} bytes lost)\t{}",
        recording.id,
        recording.stream,
        recording.session,
        recording.start_position,
        recording
            .stop_position
            .map_or_else(|| "recording".to_owned(), |stop| stop.to_string()),
        recording
            .stop_reason
            .as_ref()
            .map_or_else(|| "-".to_owned(), |reason| format!("{reason:?}")),
        recording.gaps.len(),
        recording.lost_bytes(),
        recording.source,
    )
}

/// Prints the catalog: one line per recording.
///
/// # Errors
/// The catalog cannot be read, or output cannot be written.
pub fn list(dir: &Path, out: &mut impl Write) -> Result<usize, ServerError> {
    let recordings = mongoose_archive::list(dir)
        .map_err(|error| archive_error("cannot read the catalog", error))?;
    for recording in &recordings {
        writeln!(out, "{}", describe_line(recording)).map_err(write_error)?;
    }
    Ok(recordings.len())
}

/// Prints one recording's catalog entry, its gaps and the torn tails cut.
///
/// # Errors
/// No such recording, or output cannot be written.
pub fn describe(dir: &Path, id: u64, out: &mut impl Write) -> Result<(), ServerError> {
    let recording = mongoose_archive::describe(dir, id)
        .map_err(|error| archive_error("cannot describe the recording", error))?;
    writeln!(out, "{}", describe_line(&recording)).map_err(write_error)?;
    for (from, to) in &recording.gaps {
        writeln!(out, "gap\t{from}..{to}").map_err(write_error)?;
    }
    for (position, bytes) in &recording.torn_tails_cut {
        writeln!(out, "torn tail cut\tat {position}\t{bytes} bytes").map_err(write_error)?;
    }
    Ok(())
}

/// Prints `position<TAB>text` per message of a recording from `from`; with `follow`,
/// waits for more until `stop` says so.
///
/// # Errors
/// The recording cannot be opened or read, or output cannot be written.
pub fn replay(
    dir: &Path,
    selector: RecordingSelector,
    from: Option<u64>,
    follow: bool,
    out: &mut impl Write,
    stop: &dyn Fn() -> bool,
) -> Result<u64, ServerError> {
    let mut reader = RecordingReader::open(dir, selector, from)
        .map_err(|error| archive_error("cannot open the recording", error))?;
    let mut printed = 0u64;
    let mut failed = None;
    loop {
        let polled = reader
            .poll(4096, |event| {
                let line = match event {
                    ReplayEvent::Message { position, payload } => {
                        format!("{position}\t{}", String::from_utf8_lossy(payload))
                    }
                    ReplayEvent::Gap { from, to } => format!("GAP\t{from}..{to}"),
                };
                if let Err(error) = writeln!(out, "{line}") {
                    failed.get_or_insert(error);
                }
            })
            .map_err(|error| archive_error("cannot read the recording", error))?;
        if let Some(error) = failed.take() {
            return Err(write_error(error));
        }
        printed += polled as u64;
        if polled == 0 {
            out.flush().map_err(write_error)?;
            if reader.is_ended() || !follow || stop() {
                return Ok(printed);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
