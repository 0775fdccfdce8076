//! The replay store reader on arbitrary bytes: it returns a recording or an error, and
//! never panics. Run with `cargo +nightly fuzz run read_store` from mongoose-replay/.
//!
//! Each input is read three ways: as a whole file; behind a valid head; and as frame
//! bodies (a length byte, then that many bytes, repeated) wrapped in valid frame heads
//! and checksums, so the fuzzer reaches the decoder and the delivery-pairing rules
//! instead of stopping at the checksum.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mongoose_replay::{Recording, FORMAT_VERSION, HEADER_LEN, MAGIC};

/// CRC-32 (IEEE), as the store computes it (kept here so the crate exposes no helper).
fn crc32(parts: &[&[u8]]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for part in parts {
        for &byte in *part {
            crc ^= byte as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 { 0xEDB8_8320 ^ (crc >> 1) } else { crc >> 1 };
            }
        }
    }
    !crc
}

fn head() -> Vec<u8> {
    let mut head = MAGIC.to_vec();
    head.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    assert_eq!(head.len(), HEADER_LEN);
    head
}

fn check(bytes: &[u8]) {
    if let Ok(recording) = Recording::from_bytes(bytes) {
        assert_eq!(recording.complete(), recording.incomplete().is_empty());
        for stream in recording.streams() {
            for entry in stream.entries() {
                let _ = (entry.kind(), entry.delivery(), entry.clock());
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);

    let mut behind_head = head();
    behind_head.extend_from_slice(data);
    check(&behind_head);

    let mut framed = head();
    let mut rest = data;
    while let Some((&length, after)) = rest.split_first() {
        let body = &after[..(length as usize).min(after.len())];
        rest = &after[body.len()..];
        if body.is_empty() {
            continue;
        }
        let length = (body.len() as u32).to_le_bytes();
        framed.extend_from_slice(&length);
        framed.extend_from_slice(&crc32(&[&length, body]).to_le_bytes());
        framed.extend_from_slice(body);
    }
    check(&framed);
});
