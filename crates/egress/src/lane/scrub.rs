//! `Scrub`: the real key never goes back to the sandbox. An upstream (or a gateway in front of
//! it) that echoes request headers would hand the key to the client in a response header or in
//! the body; every occurrence is masked with `*` of the same length — so `Content-Length` still
//! frames the body — in headers and in the body, streamed answers included: a key split across
//! two pieces is held back until it is whole. Only what could be the start of a key is held, so
//! a streamed answer is not delayed otherwise.
//!
//! What it cannot see: a key the upstream transforms (base64, hex, percent-encoding) before
//! sending it back. The threat model in `docs/egress.md` says so.

/// Masks one secret value in a stream of pieces.
pub(crate) struct Scrub {
    needle: Vec<u8>,
    held: Vec<u8>,
}

impl Scrub {
    /// Masks `secret` (nothing when it is empty).
    pub(crate) fn new(secret: &[u8]) -> Scrub {
        Scrub {
            needle: secret.to_vec(),
            held: Vec::new(),
        }
    }

    /// `bytes` with every occurrence of the secret masked (a value that is not streamed).
    pub(crate) fn whole(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = bytes.to_vec();
        mask(&mut out, &self.needle);
        mask_tail(&mut out, &self.needle);
        out
    }

    /// The next piece of a stream: what can be passed on now.
    pub(crate) fn piece(&mut self, piece: &[u8]) -> Vec<u8> {
        if self.needle.is_empty() {
            return piece.to_vec();
        }
        let mut buffer = std::mem::take(&mut self.held);
        buffer.extend_from_slice(piece);
        mask(&mut buffer, &self.needle);
        // Hold back the longest tail that is a proper prefix of the secret.
        let longest = (1..self.needle.len().min(buffer.len() + 1))
            .rev()
            .find(|&n| buffer.ends_with(&self.needle[..n]))
            .unwrap_or(0);
        self.held = buffer.split_off(buffer.len() - longest);
        buffer
    }

    /// What is still held at the end of the stream (never a whole secret).
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let mut rest = std::mem::take(&mut self.held);
        mask_tail(&mut rest, &self.needle);
        rest
    }
}

/// The shortest start of the secret masked where a text ends: an upstream that echoes a
/// request cut at a fixed size could otherwise hand back all of the key but its last bytes.
const MASKED_PREFIX: usize = 8;

/// Masks the end of `buffer` when it is the first [`MASKED_PREFIX`] or more bytes of `needle`.
fn mask_tail(buffer: &mut [u8], needle: &[u8]) {
    let longest = (MASKED_PREFIX..needle.len().min(buffer.len() + 1))
        .rev()
        .find(|&n| buffer.ends_with(&needle[..n]));
    if let Some(n) = longest {
        let len = buffer.len();
        buffer[len - n..].fill(b'*');
    }
}

fn mask(buffer: &mut [u8], needle: &[u8]) {
    if needle.is_empty() || buffer.len() < needle.len() {
        return;
    }
    let mut i = 0;
    while i + needle.len() <= buffer.len() {
        if &buffer[i..i + needle.len()] == needle {
            buffer[i..i + needle.len()].fill(b'*');
            i += needle.len();
        } else {
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `input` fed in pieces cut at `cuts`: the whole output.
    fn streamed(secret: &str, input: &str, cuts: &[usize]) -> String {
        let mut scrub = Scrub::new(secret.as_bytes());
        let mut out = Vec::new();
        let mut last = 0;
        for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
            out.extend(scrub.piece(&input.as_bytes()[last..cut]));
            last = cut;
        }
        out.extend(scrub.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_secret_is_masked_however_the_stream_is_cut() {
        let secret = "sk-real-0123456789";
        let input = "echo: Bearer sk-real-0123456789 and again sk-real-0123456789!";
        let expected = "echo: Bearer ****************** and again ******************!";
        for cuts in [
            vec![],
            vec![10],
            vec![13, 14, 15],
            vec![20],
            (1..input.len()).collect::<Vec<_>>(),
            vec![30, 31, 44, 50],
        ] {
            assert_eq!(streamed(secret, input, &cuts), expected, "{cuts:?}");
        }
    }

    #[test]
    fn only_a_possible_start_of_the_secret_is_held_back() {
        let mut scrub = Scrub::new(b"sk-real-key");
        assert_eq!(scrub.piece(b"data: {\"x\":1}\n\n"), b"data: {\"x\":1}\n\n");
        assert_eq!(scrub.piece(b"tail sk-re"), b"tail ");
        assert_eq!(scrub.piece(b"x"), b"sk-rex");
        assert_eq!(scrub.finish(), b"");
        assert_eq!(Scrub::new(b"").piece(b"anything"), b"anything");
        assert_eq!(Scrub::new(b"key").whole(b"a key, key"), b"a ***, ***");
    }

    #[test]
    fn a_text_ending_in_most_of_the_secret_has_that_end_masked() {
        let secret = "sk-REALKEY-0123456789abcdef";
        // The key cut one byte short at the end of a stream, or of a header value.
        assert_eq!(
            streamed(secret, "data: tail sk-REALKEY-0123456789abcde", &[12]),
            "data: tail **************************"
        );
        let scrub = Scrub::new(secret.as_bytes());
        assert_eq!(
            scrub.whole(b"echo sk-REALKEY-01"),
            b"echo *************".to_vec()
        );
        // Control: a short coincidence (fewer than eight bytes) is left as it was.
        assert_eq!(streamed(secret, "thanks, sk-RE", &[3]), "thanks, sk-RE");
        assert_eq!(scrub.whole(b"ask"), b"ask".to_vec());
    }
}
