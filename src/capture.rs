//! Bounded capture of one output stream: every byte counted and hashed,
//! only a head and a tail kept, and a deterministic text projection that is
//! safe in JSON and on a terminal. Memory is O(keep) however much the child
//! writes.

use std::collections::VecDeque;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::model::StreamRecord;

pub struct StreamCapture {
    keep: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    bytes: u64,
    hasher: Sha256,
}

impl StreamCapture {
    pub fn new(keep: u64) -> Self {
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        StreamCapture {
            keep,
            head: Vec::new(),
            tail: VecDeque::new(),
            bytes: 0,
            hasher: Sha256::new(),
        }
    }

    pub fn push(&mut self, mut data: &[u8]) {
        self.hasher.update(data);
        self.bytes += data.len() as u64;
        let room = self.keep.saturating_sub(self.head.len());
        if room > 0 {
            let take = room.min(data.len());
            self.head.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        if data.is_empty() || self.keep == 0 {
            return;
        }
        if data.len() >= self.keep {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.keep..]);
        } else {
            let overflow = (self.tail.len() + data.len()).saturating_sub(self.keep);
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
        let mut c = StreamCapture::new(4);
        c.push(b"abcdefghij");
        c.push(b"kl");
        let r = c.finish(true);
        assert_eq!(r.bytes, 12);
        assert_eq!(r.omitted_bytes, 4);
        assert!(r.text.starts_with("abcd"));
        assert!(r.text.ends_with("ijkl"));
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
