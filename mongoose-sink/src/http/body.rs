//! The body of one request: one output's payload as it is, or a batch's payloads as
//! ndjson (each payload, then `\n`), gzipped when asked; and the batch's keys header.
//! The buffers are the sink's own and reused, so a request allocates nothing per line.

use std::fmt::Write as _;
use std::io::Write as _;

use flate2::write::GzEncoder;
use flate2::Compression;
use mongoose_core::sink::Output;

/// How a request's body is compressed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpCompression {
    /// Sent as it is (the default).
    #[default]
    None,
    /// gzip (`Content-Encoding: gzip`), at level 1: most of the size gone for a
    /// fraction of the time of the higher levels.
    Gzip,
}

/// The reused buffers of the requests' bodies and key headers.
#[derive(Debug, Default)]
pub(super) struct Bodies {
    plain: Vec<u8>,
    gzipped: Vec<u8>,
    keys: String,
}

impl Bodies {
    /// Whether `output` can be one line of an ndjson body (a payload holding a line
    /// break would read as two lines, each without its key).
    pub(super) fn fits_a_line(output: &Output) -> bool {
        !output.payload.contains(&b'\n')
    }

    /// The body of `outputs`: the one payload as it is (`ndjson` false), or each
    /// payload and a line break; compressed by `compression`.
    pub(super) fn body(
        &mut self,
        outputs: &[Output],
        ndjson: bool,
        compression: HttpCompression,
    ) -> &[u8] {
        self.plain.clear();
        for output in outputs {
            self.plain.extend_from_slice(&output.payload);
            if ndjson {
                self.plain.push(b'\n');
            }
        }
        match compression {
            HttpCompression::None => &self.plain,
            HttpCompression::Gzip => {
                self.gzipped.clear();
                let mut encoder =
                    GzEncoder::new(std::mem::take(&mut self.gzipped), Compression::fast());
                // writing into a Vec cannot fail
                let _ = encoder.write_all(&self.plain);
                self.gzipped = encoder.finish().unwrap_or_default();
                &self.gzipped
            }
        }
    }

    /// The `Idempotency-Keys` header of `outputs`: their keys in the order of the
    /// body's lines, separated by commas (a key holds no comma: names are
    /// `[A-Za-z0-9._-]`, the rest numbers).
    pub(super) fn keys(&mut self, outputs: &[Output]) -> &str {
        self.keys.clear();
        for (index, output) in outputs.iter().enumerate() {
            if index > 0 {
                self.keys.push(',');
            }
            let _ = write!(self.keys, "{}", output.key);
        }
        &self.keys
    }
}

/// How many of `outputs` (from the first) go into one request: at least one, at most
/// `max_lines`, their ndjson body (payloads and line breaks) at most `max_bytes`
/// unless the first alone is larger; it ends before an output that cannot be a line.
pub(super) fn take_batch(outputs: &[Output], max_lines: usize, max_bytes: usize) -> usize {
    let mut bytes = 0;
    let mut count = 0;
    for output in outputs.iter().take(max_lines.max(1)) {
        let size = output.payload.len() + 1;
        if count > 0 && (bytes + size > max_bytes || !Bodies::fits_a_line(output)) {
            break;
        }
        bytes += size;
        count += 1;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongoose_core::sink::OutputKey;
    use mongoose_core::Epoch;

    fn output(position: u64, payload: &str) -> Output {
        Output::new(
            OutputKey::new("lines", Epoch(1), 0, position, 0, 1),
            payload.as_bytes().to_vec(),
        )
    }

    #[test]
    fn a_batch_keeps_within_its_lines_and_bytes() {
        let outputs: Vec<Output> = (0..10).map(|i| output(i, "12345")).collect();
        assert_eq!(take_batch(&outputs, 4, 1_000), 4);
        assert_eq!(take_batch(&outputs, 100, 18), 3, "6 bytes a line");
        assert_eq!(take_batch(&outputs, 100, 2), 1, "the first goes alone");
        assert_eq!(take_batch(&outputs[..2], 100, 1_000), 2);
        let mixed = [output(1, "a"), output(2, "b\nc")];
        assert_eq!(take_batch(&mixed, 100, 1_000), 1);
    }

    #[test]
    fn a_body_is_ndjson_with_its_keys_in_order() {
        let outputs = [output(1, "{\"a\":1}"), output(2, "{\"a\":2}")];
        let mut bodies = Bodies::default();
        assert_eq!(
            bodies.body(&outputs, true, HttpCompression::None),
            b"{\"a\":1}\n{\"a\":2}\n"
        );
        assert_eq!(bodies.keys(&outputs), "lines/1/0/1/0/1,lines/1/0/2/0/1");
        assert_eq!(
            bodies.body(&outputs[..1], false, HttpCompression::None),
            b"{\"a\":1}"
        );
        let gzipped = bodies.body(&outputs, true, HttpCompression::Gzip).to_vec();
        let mut plain = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gzipped[..]), &mut plain)
            .expect("gzip");
        assert_eq!(plain, "{\"a\":1}\n{\"a\":2}\n");
    }
}
