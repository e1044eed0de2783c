//! Bounded capture of one output stream: every byte counted and hashed,
//! only a head and a tail kept, and a deterministic text projection that is
//! safe in JSON and on a terminal. Memory is O(keep) however much the child
//! writes.

use std::collections::VecDeque;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};

use governed_model::StreamRecord;

pub struct StreamCapture {
    /// The lease's kept bytes per stream are split: the first half (rounded
    /// up) from the start of the stream, the rest from its end, so head and
    /// tail together never hold more than the lease says (CONTRACT §2).
    head_keep: usize,
    tail_keep: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    bytes: u64,
    hasher: Sha256,
}

impl StreamCapture {
    pub fn new(keep: u64) -> Self {
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        let tail_keep = keep / 2;
        StreamCapture {
            head_keep: keep - tail_keep,
            tail_keep,
            head: Vec::new(),
            tail: VecDeque::new(),
            bytes: 0,
            hasher: Sha256::new(),
        }
    }

    pub fn push(&mut self, mut data: &[u8]) {
        self.hasher.update(data);
        self.bytes += data.len() as u64;
        let room = self.head_keep.saturating_sub(self.head.len());
        if room > 0 {
            let take = room.min(data.len());
            self.head.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        if data.is_empty() || self.tail_keep == 0 {
            return;
        }
        if data.len() >= self.tail_keep {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_keep..]);
        } else {
            let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_keep);
            self.tail.drain(..overflow);
            self.tail.extend(data);
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn finish(self, complete: bool) -> StreamRecord {
        let tail: Vec<u8> = self.tail.into_iter().collect();
        let omitted = self.bytes - self.head.len() as u64 - tail.len() as u64;
        let mut text = project_text(&self.head);
        if omitted > 0 {
            text.push_str(&format!("\n[... {omitted} bytes omitted ...]\n"));
        }
        text.push_str(&project_text(&tail));
        StreamRecord {
            bytes: self.bytes,
            sha256: hex::encode(self.hasher.finalize()),
            head_b64: STANDARD.encode(&self.head),
            tail_b64: STANDARD.encode(&tail),
            omitted_bytes: omitted,
            text,
            complete,
        }
    }
}

/// The record of a stream nothing was written to, complete: a refusal's
/// receipt, where no program ran.
pub(crate) fn empty_record() -> StreamRecord {
    StreamCapture::new(0).finish(true)
}

/// Untrusted bytes to printable text: invalid UTF-8 and every control or
/// bidi-formatting character other than `\n` and `\t` become U+FFFD.
pub fn project_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| {
            let bidi = matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
            if (c.is_control() && c != '\n' && c != '\t') || bidi {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_tail_and_counts() {
        let mut c = StreamCapture::new(8);
        c.push(b"abcdefghij");
        c.push(b"kl");
        let r = c.finish(true);
        assert_eq!(r.bytes, 12);
        assert_eq!(r.omitted_bytes, 4);
        assert!(r.text.starts_with("abcd"));
        assert!(r.text.ends_with("ijkl"));
    }

    #[test]
    fn head_and_tail_together_hold_at_most_the_kept_bytes() {
        use base64::Engine as _;
        let decoded = |b: &str| STANDARD.decode(b).unwrap_or_default();
        for keep in [0u64, 1, 2, 3, 7, 100] {
            for len in [0usize, 1, 3, 7, 50, 1000] {
                let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
                let mut c = StreamCapture::new(keep);
                for piece in data.chunks(3) {
                    c.push(piece);
                }
                let r = c.finish(true);
                let (head, tail) = (decoded(&r.head_b64), decoded(&r.tail_b64));
                assert!(
                    (head.len() + tail.len()) as u64 <= keep,
                    "keep {keep}, len {len}"
                );
                assert_eq!(head.len() + tail.len() + r.omitted_bytes as usize, len);
                assert!(data.starts_with(&head) && data.ends_with(&tail));
                if len as u64 <= keep {
                    // Nothing lost: head then tail is the whole stream.
                    assert_eq!([head, tail].concat(), data, "keep {keep}, len {len}");
                }
            }
        }
    }

    #[test]
    fn escapes_and_invalid_utf8_are_replaced() {
        let t = project_text(b"ok\x1b[31mred\xff\x07\ttab\n\r");
        assert!(!t.contains('\u{1b}'));
        assert!(!t.contains('\r'));
        assert!(t.contains("\ttab\n"));
        assert_eq!(t.matches('\u{FFFD}').count(), 4);
    }
}
