//! Bounded decoding of files a reader did not write: a profile (`.pb.gz`) or a live file found
//! in a reporting directory may have been planted, and the `ying` command reads them on an
//! analyst's machine. Two ways such a file asks for memory out of proportion to its size:
//!
//! - **Inflation.** gzip inflates up to about 1,000 times: a 4 MB `.pb.gz` of zeros is 4 GiB.
//!   `inflate` counts first, into no memory, and stops at the limit.
//! - **Elements.** Protobuf's repeated fields cost a few bytes each on the wire and a whole
//!   struct each in memory: an empty `Sample` is 2 bytes in the file and 72 in a `Vec`, so 40
//!   MB of them decode to 1.4 GB. `decoded_bound` walks the message's wire format before
//!   decoding (no allocation) and bounds what decoding it may take.
//!
//! - **Manifests.** JSON parsed into values takes up to 16 times its size: [`read_manifest`]
//!   refuses a manifest that could take more than the limit before reading it.
//!
//! The limit is [`max_decoded_bytes`]: 1 GiB, or `YING_MAX_DECODED_BYTES` (bytes, `KiB` to
//! `TiB` suffixes) for an analyst who trusts a larger file. A profile within it reads as
//! before; one beyond it is one error line naming the file, the bound and the setting.

use std::io::{self, Read};

/// The default of [`max_decoded_bytes`].
pub const DEFAULT_MAX_DECODED_BYTES: u64 = 1 << 30;

/// Memory counted for each field occurrence of a length-delimited type (a message, string or
/// packed list in a `Vec`): the largest struct a decoder here makes for one (pprof's
/// `Location`, the live file's `Row`, with their `Vec` headers) rounded up.
const PER_ELEMENT: u64 = 256;

/// The most bytes a reader decodes a file to: `YING_MAX_DECODED_BYTES` when set and valid, else
/// [`DEFAULT_MAX_DECODED_BYTES`].
pub fn max_decoded_bytes() -> u64 {
    std::env::var("YING_MAX_DECODED_BYTES")
        .ok()
        .and_then(|v| crate::config::parse_bytes(v.trim()).ok())
        .filter(|&b| b > 0)
        .unwrap_or(DEFAULT_MAX_DECODED_BYTES)
}

/// A profile file's bytes, refused (before reading) when the file alone is larger than the
/// limit. Errors name the path.
pub fn read_file(path: &std::path::Path) -> io::Result<Vec<u8>> {
    let limit = max_decoded_bytes();
    let len = std::fs::metadata(path)?.len();
    if len > limit {
        let e = too_large("the file is larger than", limit);
        return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())));
    }
    std::fs::read(path)
}

/// A manifest's bytes (`<set>.json`), refused when parsing it could take more than the limit:
/// JSON parsed into values takes up to 16 times its size (`[0,0,...]`: two bytes an element,
/// 32 in memory). Errors name the path.
pub fn read_manifest(path: &std::path::Path) -> io::Result<Vec<u8>> {
    let limit = max_decoded_bytes();
    let len = std::fs::metadata(path)?.len();
    if len.saturating_mul(16) > limit {
        let e = over_bound("the manifest", len.saturating_mul(16), limit);
        return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())));
    }
    std::fs::read(path)
}

/// The error of a file beyond the limit: `what` it is and what it would take, a phrase that
/// ends before the limit (`"the profile may take up to 2.4 GiB to decode, more than"`).
pub(crate) fn too_large(what: &str, limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{what} the limit of {} (YING_MAX_DECODED_BYTES raises it): not read",
            crate::report::human_bytes(limit),
        ),
    )
}

/// [`too_large`] for a bound computed before decoding.
pub(crate) fn over_bound(what: &str, bound: u64, limit: u64) -> io::Error {
    let bound = crate::report::human_bytes(bound);
    too_large(&format!("{what} may take up to {bound} to decode, more than"), limit)
}

/// Inflates the gzip stream `gz` (one or several members) when it holds at most `limit` bytes;
/// an error saying so when it holds more. The stream is inflated twice: counted first into no
/// memory, then into a buffer of the size counted, so a bomb costs time (stopped at the limit),
/// never memory.
pub(crate) fn inflate(gz: &[u8], limit: u64) -> io::Result<Vec<u8>> {
    let counted = io::copy(
        &mut flate2::read::MultiGzDecoder::new(gz).take(limit.saturating_add(1)),
        &mut io::sink(),
    )?;
    if counted > limit {
        return Err(too_large("the gzip data inflates to more than", limit));
    }
    let mut out = Vec::new();
    out.try_reserve_exact(counted as usize).map_err(|_| io::ErrorKind::OutOfMemory)?;
    flate2::read::MultiGzDecoder::new(gz).take(counted).read_to_end(&mut out)?;
    Ok(out)
}

/// An upper bound on the memory decoding the protobuf message `bytes` takes: its bytes once, 8
/// bytes for each byte of it (a packed list of one-byte varints decoded to `u64`s), and
/// [`PER_ELEMENT`] for every length-delimited field at any depth (each a struct, `String` or
/// `Vec` of a decoder), the payloads that parse as messages walked too. Walks the wire format
/// only; a malformed message stops the walk (decoding then fails on its own).
pub(crate) fn decoded_bound(bytes: &[u8]) -> u64 {
    (bytes.len() as u64)
        .saturating_mul(9)
        .saturating_add(elements(bytes, 0).saturating_mul(PER_ELEMENT))
}

/// Length-delimited fields in the message `b`, its nested messages' included (to a depth of
/// 16, as deep as any message here nests).
fn elements(mut b: &[u8], depth: u32) -> u64 {
    let mut n = 0u64;
    while !b.is_empty() {
        let Some((key, rest)) = varint(b) else { return n };
        b = rest;
        match key & 7 {
            0 => match varint(b) {
                Some((_, rest)) => b = rest,
                None => return n,
            },
            1 if b.len() >= 8 => b = &b[8..],
            5 if b.len() >= 4 => b = &b[4..],
            2 => {
                let Some((len, rest)) = varint(b) else { return n };
                let Some(payload) = usize::try_from(len).ok().and_then(|l| rest.get(..l)) else {
                    return n;
                };
                n += 1;
                if depth < 16 && parses(payload) {
                    n = n.saturating_add(elements(payload, depth + 1));
                }
                b = &rest[payload.len()..];
            }
            _ => return n,
        }
    }
    n
}

/// Whether `b` is a whole message of well-formed fields (a string or packed list seldom is;
/// when one is, walking it only raises the bound).
fn parses(mut b: &[u8]) -> bool {
    while !b.is_empty() {
        let Some((key, rest)) = varint(b) else { return false };
        if key >> 3 == 0 {
            return false;
        }
        b = rest;
        b = match key & 7 {
            0 => match varint(b) {
                Some((_, rest)) => rest,
                None => return false,
            },
            1 if b.len() >= 8 => &b[8..],
            5 if b.len() >= 4 => &b[4..],
            2 => {
                let Some((len, rest)) = varint(b) else { return false };
                match usize::try_from(len).ok().and_then(|l| rest.get(l..)) {
                    Some(after) => after,
                    None => return false,
                }
            }
            _ => return false,
        };
    }
    true
}

/// One varint at the start of `b`, and what follows it.
fn varint(b: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, &b[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_gzip_bomb_stops_at_the_limit() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            gz.write_all(&zeros).unwrap();
        }
        let bomb = gz.finish().unwrap();
        assert!(bomb.len() < 100_000, "{} bytes", bomb.len());
        let e = inflate(&bomb, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("YING_MAX_DECODED_BYTES") && e.contains("limit of 1.0 MiB"), "{e}");
        assert_eq!(inflate(&bomb, 64 << 20).unwrap().len(), 64 << 20);
    }

    #[test]
    fn many_empty_messages_are_counted_before_decoding() {
        // Field 2 (pprof's `sample`), empty, a million times: 2 MB on the wire.
        let many: Vec<u8> = std::iter::repeat_n([0x12u8, 0x00], 1_000_000).flatten().collect();
        assert!(decoded_bound(&many) >= 1_000_000 * PER_ELEMENT);
        // A message nested in each: counted too.
        let nested: Vec<u8> =
            std::iter::repeat_n([0x12u8, 0x02, 0x1a, 0x00], 1000).flatten().collect();
        assert_eq!(elements(&nested, 0), 2000);
        // A malformed tail stops the walk without a panic.
        assert_eq!(
            elements(&[0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 0),
            0
        );
        assert_eq!(elements(&[0x12, 0x05, 0x00], 0), 0);
    }
}
