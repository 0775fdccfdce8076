//! The input and the checks of an output: the generated lines, the first difference
//! between an output and its input, a growing file's lines.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use super::{io_error, VersusError, VersusOptions, MIB};

/// Line `index` of the input: a 12-digit counter, a space, and letters rotated by the
/// counter up to `line_bytes - 1` bytes, then a newline. Deterministic, printable, no
/// two lines alike.
pub(crate) fn input_line(index: u64, line_bytes: u64, line: &mut Vec<u8>) {
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
    line.clear();
    // the counter wraps at 10^12 lines, far past any input this harness writes
    let _ = write!(line, "{:012} ", index % 1_000_000_000_000);
    let start = (index % LETTERS.len() as u64) as usize;
    let body = usize::try_from(line_bytes - 1).unwrap_or(usize::MAX);
    let mut letter = start;
    while line.len() < body {
        line.push(LETTERS[letter]);
        letter = (letter + 1) % LETTERS.len();
    }
    line.push(b'\n');
}

/// Writes the input file (`options.lines()` lines) at `path`, unless a file of exactly
/// the right size is already there (a kept input of the same options).
pub(crate) fn write_input(options: &VersusOptions, path: &Path) -> Result<bool, VersusError> {
    if fs::metadata(path).is_ok_and(|metadata| metadata.len() == options.input_bytes()) {
        return Ok(false);
    }
    let file = File::create(path).map_err(io_error("cannot create the input", path))?;
    let mut writer = BufWriter::with_capacity(MIB as usize, file);
    let mut line = Vec::with_capacity(options.line_bytes as usize);
    for index in 0..options.lines() {
        input_line(index, options.line_bytes, &mut line);
        writer
            .write_all(&line)
            .map_err(io_error("cannot write the input", path))?;
    }
    writer
        .into_inner()
        .map_err(|error| error.into_error())
        .and_then(|file| file.sync_all())
        .map_err(io_error("cannot write the input", path))?;
    Ok(true)
}

/// Where an output first differs from the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Difference {
    /// The 1-based line number of the first line that differs (or is missing or extra).
    pub(crate) line: u64,
    /// The input's size in bytes.
    pub(crate) expected_bytes: u64,
    /// The output's size in bytes.
    pub(crate) actual_bytes: u64,
}

impl fmt::Display for Difference {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "the output differs from the input from line {} on (input {} bytes, output {} bytes)",
            self.line, self.expected_bytes, self.actual_bytes
        )
    }
}

fn count_newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|byte| **byte == b'\n').count() as u64
}

/// Reads as much of `buffer` as the reader has (less only at its end).
fn read_full(reader: &mut impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// Compares `actual` with `expected` byte for byte: `None` when they are equal, else the
/// first line that differs.
pub(crate) fn first_difference(
    expected: &Path,
    actual: &Path,
) -> Result<Option<Difference>, VersusError> {
    let mut expected_file = File::open(expected).map_err(io_error("cannot open", expected))?;
    let mut actual_file = File::open(actual).map_err(io_error("cannot open", actual))?;
    let expected_bytes = expected_file
        .metadata()
        .map_err(io_error("cannot stat", expected))?
        .len();
    let actual_bytes = actual_file
        .metadata()
        .map_err(io_error("cannot stat", actual))?
        .len();
    let mut expected_block = vec![0_u8; MIB as usize];
    let mut actual_block = vec![0_u8; MIB as usize];
    let mut lines_before = 0_u64;
    loop {
        let expected_read = read_full(&mut expected_file, &mut expected_block)
            .map_err(io_error("cannot read", expected))?;
        let actual_read = read_full(&mut actual_file, &mut actual_block)
            .map_err(io_error("cannot read", actual))?;
        let common = expected_read.min(actual_read);
        let mismatch = expected_block[..common]
            .iter()
            .zip(&actual_block[..common])
            .position(|(left, right)| left != right)
            .or((expected_read != actual_read).then_some(common));
        if let Some(at) = mismatch {
            return Ok(Some(Difference {
                line: lines_before + count_newlines(&expected_block[..at]) + 1,
                expected_bytes,
                actual_bytes,
            }));
        }
        if expected_read == 0 {
            return Ok(None);
        }
        lines_before += count_newlines(&expected_block[..expected_read]);
    }
}

/// Counts the lines of a file that grows, reading only what was appended since the last
/// call.
#[derive(Debug, Default)]
pub(super) struct GrowingFileLines {
    file: Option<File>,
    pub(super) bytes: u64,
    pub(super) lines: u64,
    buffer: Vec<u8>,
}

impl GrowingFileLines {
    /// Reads what was appended to `path` (nothing if it does not exist yet) and returns
    /// whether anything was.
    pub(super) fn advance(&mut self, path: &Path) -> Result<bool, VersusError> {
        if self.file.is_none() {
            match File::open(path) {
                Ok(file) => self.file = Some(file),
                Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(error) => return Err(io_error("cannot open", path)(error)),
            }
            self.buffer = vec![0; MIB as usize];
        }
        let Some(file) = self.file.as_mut() else {
            return Ok(false);
        };
        let before = self.bytes;
        loop {
            let read = match file.read(&mut self.buffer) {
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(io_error("cannot read", path)(error)),
            };
            if read == 0 {
                break;
            }
            self.bytes += read as u64;
            self.lines += count_newlines(&self.buffer[..read]);
        }
        Ok(self.bytes > before)
    }
}
