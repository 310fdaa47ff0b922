//! Classic BPF as seccomp runs it: the instruction type, the few opcodes the filter uses, and an
//! interpreter so the compiled program can be tested as data.

use std::fmt;

/// One classic BPF instruction, laid out exactly like the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SockFilter {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

// The kernel reads the program as an array of 8-byte `sock_filter`s.
const _: () = assert!(std::mem::size_of::<SockFilter>() == 8);

impl fmt::Debug for SockFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{ code: {:#06x}, jt: {}, jf: {}, k: {:#x} }}",
            self.code, self.jt, self.jf, self.k
        )
    }
}

// Opcodes (linux/filter.h, linux/bpf_common.h). Only these are ever emitted.
/// `A = *(u32 *)(seccomp_data + k)`
pub(crate) const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
/// `pc += (A == k) ? jt : jf`
pub(crate) const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
/// `pc += (A & k) ? jt : jf`
pub(crate) const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
/// `pc += (A >= k) ? jt : jf`, unsigned
pub(crate) const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
/// `pc += k`, for jumps longer than the 8-bit offsets of the conditional jumps
pub(crate) const JA: u16 = 0x05; // BPF_JMP | BPF_JA
/// `return k`
pub(crate) const RET_K: u16 = 0x06; // BPF_RET | BPF_K

// Return values (linux/seccomp.h). The action is the high 16 bits, the data the low 16.
pub(crate) const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub(crate) const RET_ERRNO: u32 = 0x0005_0000;
pub(crate) const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ACTION_FULL: u32 = 0xffff_0000;
const RET_DATA: u32 = 0x0000_ffff;

// Offsets into `struct seccomp_data { int nr; u32 arch; u64 instruction_pointer; u64 args[6]; }`.
pub(crate) const OFFSET_NR: u32 = 0;
pub(crate) const OFFSET_ARCH: u32 = 4;
/// Offset of the low 32 bits of `args[index]`. Both supported architectures are little-endian.
pub(crate) const fn offset_arg_low(index: u32) -> u32 {
    16 + 8 * index
}

pub(crate) const fn load(offset: u32) -> SockFilter {
    SockFilter {
        code: LD_W_ABS,
        jt: 0,
        jf: 0,
        k: offset,
    }
}

pub(crate) const fn jump_eq(k: u32, jt: u8, jf: u8) -> SockFilter {
    SockFilter {
        code: JEQ_K,
        jt,
        jf,
        k,
    }
}

pub(crate) const fn jump_set(k: u32, jt: u8, jf: u8) -> SockFilter {
    SockFilter {
        code: JSET_K,
        jt,
        jf,
        k,
    }
}

pub(crate) const fn jump_ge(k: u32, jt: u8, jf: u8) -> SockFilter {
    SockFilter {
        code: JGE_K,
        jt,
        jf,
        k,
    }
}

pub(crate) const fn jump_always(k: u32) -> SockFilter {
    SockFilter {
        code: JA,
        jt: 0,
        jf: 0,
        k,
    }
}

pub(crate) const fn ret(k: u32) -> SockFilter {
    SockFilter {
        code: RET_K,
        jt: 0,
        jf: 0,
        k,
    }
}

/// What the filter decided for one system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The call runs.
    Allow,
    /// The call fails with this errno without reaching the kernel's implementation.
    Errno(u16),
    /// The whole process is killed (SIGSYS).
    KillProcess,
    /// The program returned a value the filter never emits, or is malformed (a jump out of
    /// bounds, an unknown opcode, no return). Tests treat this as a bug in the generator.
    Invalid(u32),
}

impl Action {
    fn from_return(value: u32) -> Action {
        match value & RET_ACTION_FULL {
            RET_ALLOW => Action::Allow,
            RET_KILL_PROCESS => Action::KillProcess,
            RET_ERRNO => Action::Errno((value & RET_DATA) as u16),
            _ => Action::Invalid(value),
        }
    }
}

/// Runs `program` over one `seccomp_data` the way the kernel would.
pub(crate) fn evaluate(program: &[SockFilter], arch: u32, nr: u32, args: [u64; 6]) -> Action {
    let word = |offset: u32| -> Option<u32> {
        match offset {
            OFFSET_NR => Some(nr),
            OFFSET_ARCH => Some(arch),
            // The instruction pointer is never loaded by our filter; it reads as zero here.
            8 | 12 => Some(0),
            16..=63 if offset.is_multiple_of(4) => {
                let arg = args[((offset - 16) / 8) as usize];
                Some(if offset.is_multiple_of(8) {
                    arg as u32
                } else {
                    (arg >> 32) as u32
                })
            }
            _ => None,
        }
    };
    let mut accumulator = 0u32;
    let mut pc = 0usize;
    while let Some(insn) = program.get(pc) {
        pc += 1;
        match insn.code {
            LD_W_ABS => match word(insn.k) {
                Some(value) => accumulator = value,
                None => return Action::Invalid(insn.k),
            },
            JEQ_K | JSET_K | JGE_K => {
                let taken = match insn.code {
                    JEQ_K => accumulator == insn.k,
                    JSET_K => accumulator & insn.k != 0,
                    _ => accumulator >= insn.k,
                };
                pc += usize::from(if taken { insn.jt } else { insn.jf });
            }
            JA => pc = pc.saturating_add(insn.k as usize),
            RET_K => return Action::from_return(insn.k),
            code => return Action::Invalid(u32::from(code)),
        }
    }
    // Running off the end is rejected by the kernel's verifier.
    Action::Invalid(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(program: &[SockFilter], cases: &[(u32, u32, [u64; 6], Action)]) {
        for &(arch, nr, args, expected) in cases {
            assert_eq!(
                evaluate(program, arch, nr, args),
                expected,
                "arch {arch:#x} nr {nr} args {args:x?}"
            );
        }
    }

    #[test]
    fn interpreter_follows_jumps_and_reads_argument_halves() {
        let program = [
            load(offset_arg_low(1) + 4),
            jump_eq(0xdead, 0, 1),
            ret(RET_ERRNO | 1),
            load(offset_arg_low(1)),
            jump_set(0x10, 0, 1),
            ret(RET_KILL_PROCESS),
            jump_ge(0x8, 0, 1),
            jump_always(1),
            ret(RET_ERRNO | 2),
            ret(RET_ALLOW),
        ];
        check(
            &program,
            &[
                (0, 0, [0, 0xdead_0000_0000, 0, 0, 0, 0], Action::Errno(1)),
                (0, 0, [0, 0x10, 0, 0, 0, 0], Action::KillProcess),
                (0, 0, [0, 0x09, 0, 0, 0, 0], Action::Allow),
                (0, 0, [0, 0x01, 0, 0, 0, 0], Action::Errno(2)),
            ],
        );
    }

    #[test]
    fn interpreter_reports_malformed_programs() {
        check(&[load(7)], &[(0, 0, [0; 6], Action::Invalid(7))]);
        check(
            &[jump_eq(0, 5, 5)],
            &[(0, 0, [0; 6], Action::Invalid(u32::MAX))],
        );
        check(
            &[ret(0x1234_0000)],
            &[(0, 0, [0; 6], Action::Invalid(0x1234_0000))],
        );
    }
}
