//! Reading the set bits of an EWAH bitmap (git's `ewah/`), as the split index's `link`
//! extension stores them, without trusting a single length in it.
//!
//! The layout (`ewah_read_mmap`): the bit count (32-bit), the number of 64-bit words (32-bit),
//! the words, and the position of the last run-length word (32-bit); all big-endian. The words
//! are a run-length word — bit 0 the running bit, bits 1–32 how many words of it follow, bits
//! 33–63 how many literal words follow — then those literal words, then the next run-length
//! word. Bit `b` of the `w`-th word decoded is position `64 w + b`.
//!
//! A forged run of ones could stand for 2^38 positions; the caller passes the most set bits it
//! can use, and one more is an error — so the work is bounded by the input's length and that
//! limit, never by a count the input states.

/// The set positions of the bitmap at the start of `data`, ascending, and how many bytes it
/// took; `None` when it is malformed or has more than `limit` set bits.
pub fn set_bits(data: &[u8], limit: usize) -> Option<(Vec<u64>, usize)> {
    // The trailing run-length word position is only a writer's hint; it must be there.
    let consumed = size(data)?;
    let word_count = (consumed - 12) / 8;
    let words = data.get(8..consumed - 4)?;
    let word = |i: usize| -> Option<u64> {
        let bytes = words.get(i * 8..i * 8 + 8)?;
        Some(u64::from_be_bytes(bytes.try_into().ok()?))
    };
    let mut positions = Vec::new();
    let mut position: u64 = 0;
    let mut i = 0;
    while i < word_count {
        let rlw = word(i)?;
        i += 1;
        let running = rlw & 1 == 1;
        let run = (rlw >> 1) & 0xFFFF_FFFF;
        let literals = usize::try_from(rlw >> 33).ok()?;
        if running && run > 0 {
            // Every position in the run is set: more than `limit` unless the run is short.
            let bits = run.checked_mul(64)?;
            if bits > (limit - positions.len()) as u64 {
                return None;
            }
            positions.extend(position..position + bits);
        }
        position = position.checked_add(run.checked_mul(64)?)?;
        for _ in 0..literals {
            if i >= word_count {
                return None;
            }
            let mut literal = word(i)?;
            i += 1;
            while literal != 0 {
                let bit = u64::from(literal.trailing_zeros());
                if positions.len() == limit {
                    return None;
                }
                positions.push(position + bit);
                literal &= literal - 1;
            }
            position = position.checked_add(64)?;
        }
    }
    Some((positions, consumed))
}

/// How many bytes the bitmap at the start of `data` takes, when they are all there.
pub fn size(data: &[u8]) -> Option<usize> {
    let word_count = usize::try_from(be32(data, 4)?).ok()?;
    let size = word_count.checked_mul(8)?.checked_add(12)?;
    data.get(..size).map(<[u8]>::len)
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at + 4)?;
    Some(u32::from_be_bytes(bytes.try_into().ok()?))
}
