//! Positional reads of an open file (`pread`: the handle's offset is never moved, so
//! the file read is always the one opened) and what the source reads that way: the
//! fingerprint of the first bytes, where LATEST starts, where a pointer without an
//! epoch resumes.

use std::fs::File;
use std::io;

use crate::pointer::{fnv1a, PointerRecord, MAX_FINGERPRINT_BYTES};

/// The fingerprint of the first min(4096, size) bytes of an open file: `(bytes, hash)`.
pub(crate) fn fingerprint_of(file: &File) -> Option<(u64, u64)> {
    let size = file.metadata().ok()?.len();
    let length = size.min(MAX_FINGERPRINT_BYTES) as usize;
    let mut bytes = vec![0u8; length];
    read_exact_at(file, &mut bytes, 0).ok()?;
    Some((length as u64, fnv1a(&bytes)))
}

/// The fingerprint of the first min(4096, size) bytes of an open file when it covers
/// more bytes than `record`'s and the bytes `record` fingerprinted are still there;
/// `None` otherwise (nothing to grow, or the file was rewritten in place: a fingerprint
/// grown over the new bytes would take the new content for the old file's).
pub(crate) fn grown_fingerprint(file: &File, record: &PointerRecord) -> Option<(u64, u64)> {
    let size = file.metadata().ok()?.len();
    let length = size.min(MAX_FINGERPRINT_BYTES);
    if length <= record.fingerprint_length {
        return None;
    }
    let mut bytes = vec![0u8; length as usize];
    read_exact_at(file, &mut bytes, 0).ok()?;
    let known = record.fingerprint_length as usize;
    if known > 0 && fnv1a(&bytes[..known]) != record.fingerprint {
        return None;
    }
    Some((length, fnv1a(&bytes)))
}

#[cfg(unix)]
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, offset)
}

#[cfg(windows)]
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, offset)
}

/// Whether `file` starts with the bytes `record` fingerprinted: false when it is shorter
/// than the fingerprint or cannot be read.
pub(crate) fn starts_as_fingerprinted(file: &File, record: &PointerRecord) -> bool {
    let mut leading = vec![0u8; record.fingerprint_length as usize];
    read_exact_at(file, &mut leading, 0).is_ok() && fnv1a(&leading) == record.fingerprint
}

pub(crate) fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match read_at(file, buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(read) => {
                buf = &mut buf[read..];
                offset += read as u64;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Where LATEST starts: after the last line terminator, so that a line being written
/// when the source starts is published whole once it ends. A file ending in a lone
/// `\r`, or whose last 64 KiB hold no terminator, starts at its size.
pub(crate) fn end_of_last_line(file: &File, size: u64) -> u64 {
    let window = size.min(64 * 1024);
    let mut tail = vec![0u8; window as usize];
    if window == 0 || read_exact_at(file, &mut tail, size - window).is_err() {
        return size;
    }
    if tail.last() == Some(&b'\r') {
        return size;
    }
    match memchr::memrchr2(b'\n', b'\r', &tail) {
        Some(at) => size - window + at as u64 + 1,
        None => size,
    }
}

/// A pointer of a layout without epochs may point inside a line (a v1.1.2 char
/// count): resume after the next terminator. A line may be re-delivered, never skipped
/// (book: guarantees/epochs-and-identity.md).
pub(crate) fn align_to_line_start(file: &File, offset: u64, size: u64) -> u64 {
    if offset == 0 || offset > size {
        return offset;
    }
    let mut around = [0u8; 2];
    let available = (size - offset).min(1) as usize + 1;
    if read_exact_at(file, &mut around[..available], offset - 1).is_err() {
        return offset;
    }
    let before = around[0];
    let after = (available == 2).then_some(around[1]);
    let at_line_start = before == b'\n' || (before == b'\r' && after != Some(b'\n'));
    if at_line_start {
        return offset;
    }
    let mut scan_from = offset;
    let mut chunk = vec![0u8; 64 * 1024];
    while scan_from < size {
        let wanted = ((size - scan_from) as usize).min(chunk.len());
        if read_exact_at(file, &mut chunk[..wanted], scan_from).is_err() {
            return offset;
        }
        let window = &chunk[..wanted];
        if let Some(at) = memchr::memchr2(b'\n', b'\r', window) {
            let after_terminator = scan_from + at as u64 + 1;
            if window[at] == b'\r' {
                let mut next = [0u8; 1];
                if after_terminator < size
                    && read_exact_at(file, &mut next, after_terminator).is_ok()
                    && next[0] == b'\n'
                {
                    return after_terminator + 1;
                }
            }
            return after_terminator;
        }
        scan_from += wanted as u64;
    }
    offset
}
