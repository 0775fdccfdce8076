//! Publisher -> archiver -> reader: throughput (messages/s) and the latency of the live
//! path (publish timestamp in the payload, read timestamp at the reader), over IPC and
//! UDP, with 100-byte messages. Each stage runs on its own thread of one process (the
//! IPC ring and the UDP socket are the same as between processes).
//!
//! `cargo run --release -p mongoose-archive --example archive_bench -- [messages] [rate]`
//! (defaults: 1,000,000 messages for throughput; `2 * rate` at `rate` = 100,000 msg/s for
//! latency, the first tenth of them a warm-up left out of the percentiles).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_archive::{
    Archiver, ArchiverConfig, IpcPublication, Offer, Publication, RecordingReader,
    RecordingSelector, ReplayEvent, UdpPublication,
};

const MESSAGE_LEN: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Ipc,
    Udp,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let messages: u64 = args.get(1).map_or(Ok(1_000_000), |arg| arg.parse())?;
    let rate: u64 = args.get(2).map_or(Ok(100_000), |arg| arg.parse())?;
    for transport in [Transport::Ipc, Transport::Udp] {
        let (elapsed, _) = run(transport, messages, None)?;
        println!(
            "{transport:?} throughput: {messages} messages of {MESSAGE_LEN} bytes in {:.3} s: {:.0} msg/s",
            elapsed.as_secs_f64(),
            messages as f64 / elapsed.as_secs_f64()
        );
        let latency_messages = (rate * 2).min(messages);
        let (_, all_latencies) = run(transport, latency_messages, Some(rate))?;
        // the first tenth is a warm-up: the archiver finds a new IPC ring by a
        // directory scan (every 50 ms), and caches and branch predictors are cold
        let mut latencies = all_latencies[all_latencies.len() / 10..].to_vec();
        latencies.sort_unstable();
        let percentile =
            |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        println!(
            "{transport:?} live-path latency at {rate} msg/s ({} samples): p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns",
            latencies.len(),
            percentile(0.50),
            percentile(0.99),
            percentile(0.999),
            latencies.last().copied().unwrap_or(0)
        );
    }
    Ok(())
}

/// Publishes `messages` (at `rate` per second, or as fast as accepted) and reads them
/// back live; returns the time until the reader had the last one, and each message's
/// publish-to-read latency in nanoseconds.
fn run(
    transport: Transport,
    messages: u64,
    rate: Option<u64>,
) -> Result<(Duration, Vec<u64>), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let archive = dir.path().join("archive");
    let ipc = dir.path().join("ipc");
    let mut config = ArchiverConfig::new(&archive);
    match transport {
        Transport::Ipc => config.ipc_dir = Some(ipc.clone()),
        Transport::Udp => config.udp_bind = Some("127.0.0.1:0".parse()?),
    }
    let mut archiver = Archiver::open(config)?;
    let udp = archiver.udp_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let archiver_stop = stop.clone();
    let archiver_thread = std::thread::spawn(move || archiver.run_until(&archiver_stop));
    let base = Instant::now();

    let reader_archive = archive.clone();
    let reader_thread = std::thread::spawn(move || read_all(&reader_archive, messages, base));

    let mut publication: Box<dyn Publication> = match transport {
        Transport::Ipc => Box::new(IpcPublication::create(&ipc, 1, 1)?),
        Transport::Udp => Box::new(UdpPublication::connect(udp.expect("udp"), 1, 1)?),
    };
    let start = Instant::now();
    let interval = rate.map(|rate| Duration::from_nanos(1_000_000_000 / rate));
    let mut payload = [0u8; MESSAGE_LEN];
    for index in 0..messages {
        if let Some(interval) = interval {
            let due = start + interval * index as u32;
            // yield rather than spin: on a small shared machine three spinning
            // threads (publisher, archiver, reader) starve each other
            while Instant::now() < due {
                std::thread::yield_now();
            }
        }
        payload[..8].copy_from_slice(&index.to_le_bytes());
        loop {
            let sent = base.elapsed().as_nanos() as u64;
            payload[8..16].copy_from_slice(&sent.to_le_bytes());
            match publication.offer(&payload)? {
                Offer::Accepted { .. } => break,
                Offer::BackPressured => std::thread::yield_now(),
            }
        }
    }
    let (read_done, latencies) = reader_thread.join().expect("the reader")?;
    publication.close()?;
    stop.store(true, Ordering::Release);
    archiver_thread.join().expect("the archiver")?;
    Ok((read_done.duration_since(start), latencies))
}

fn read_all(
    archive: &Path,
    messages: u64,
    base: Instant,
) -> Result<(Instant, Vec<u64>), mongoose_archive::ArchiveError> {
    let mut reader = loop {
        match RecordingReader::open(archive, RecordingSelector::LatestForStream(1), None) {
            Ok(reader) => break reader,
            Err(mongoose_archive::ArchiveError::NoRecordingForStream(_)) => {
                std::thread::sleep(Duration::from_micros(100))
            }
            Err(error) => return Err(error),
        }
    };
    let mut latencies = Vec::with_capacity(messages as usize);
    let mut next = 0u64;
    while next < messages {
        let events = reader.poll(4096, |event| {
            if let ReplayEvent::Message { payload, .. } = event {
                let now = base.elapsed().as_nanos() as u64;
                let index = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
                assert_eq!(index, next, "in order, no gap, no duplicate");
                let sent = u64::from_le_bytes(payload[8..16].try_into().expect("8 bytes"));
                latencies.push(now.saturating_sub(sent));
                next += 1;
            }
        })?;
        if events == 0 {
            std::thread::yield_now();
        }
    }
    Ok((Instant::now(), latencies))
}
