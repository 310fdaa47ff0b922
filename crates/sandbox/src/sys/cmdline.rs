//! Replacing the command line of an init started in-process (`sys::spawn::Start::InProcess`),
//! so that `/proc/1/cmdline` inside the sandbox does not show the host's `cordon exec` argv.
//!
//! Such an init is a fork of the host process: its argument area (the strings `argv` points to,
//! at the top of the initial stack, which `/proc/PID/cmdline` reads) is a copy of the host's, and
//! a workload can read any process's command line. The copy is this process's own memory, so it
//! is overwritten in place: zeroed, then the name written at its start. The area's bounds come
//! from the kernel (`arg_start`/`arg_end` in `/proc/self/stat`), not from `argv` pointers that
//! code could have moved. The last byte stays NUL, so the kernel reads exactly that area (a
//! non-NUL last byte would make it read on into the environment, "setproctitle" style). The
//! thread name (`comm`, shown in `/proc/1/stat` and by `ps`) is set too.

use std::ffi::CStr;
use std::io;

use super::check;

/// The largest argument area overwritten; the kernel caps the argument strings far below this
/// (`ARG_MAX` is a quarter of the stack limit), so anything larger is a misreading, refused.
const MAX_AREA: u64 = 1 << 26;

/// Sets this process's name to `name` and replaces its whole argument area with `name`. Only for
/// a single-threaded process that holds no reference into its argument strings (an in-process
/// init, right after the clone).
pub(crate) fn replace(name: &CStr) -> io::Result<()> {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string (the kernel copies at most 16 bytes);
    // `name` is one, alive for the call.
    check(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) })?;
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let (start, end) = argument_area(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "cannot find the argument area in /proc/self/stat",
        )
    })?;
    let len =
        usize::try_from(end - start).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let area = start as *mut u8;
    let name = name.to_bytes();
    // Room for the terminating NUL, which the zeroing leaves at the end.
    let written = name.len().min(len.saturating_sub(1));
    // SAFETY: [start, end) is this process's argument area as the kernel records it: part of
    // the initial stack mapping, readable and writable for the life of the process, and (a
    // forked copy) shared with no other process. The process is single-threaded and holds no
    // Rust reference into it (glibc and std keep raw `argv` pointers only, read on demand), so
    // nothing observes the bytes while they change. `written < len` keeps both writes inside.
    unsafe {
        std::ptr::write_bytes(area, 0, len);
        std::ptr::copy_nonoverlapping(name.as_ptr(), area, written);
    }
    Ok(())
}

/// `(arg_start, arg_end)` from the text of `/proc/PID/stat` (fields 48 and 49); `None` unless
/// both parse and `arg_start < arg_end` within [`MAX_AREA`]. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted from the last `)`.
fn argument_area(stat: &str) -> Option<(u64, u64)> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_ascii_whitespace();
    // The first field after the name is field 3 (state), so field 48 is the 46th.
    let start: u64 = fields.nth(45)?.parse().ok()?;
    let end: u64 = fields.next()?.parse().ok()?;
    (start > 0 && start < end && end - start <= MAX_AREA).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_area_is_read_from_fields_48_and_49() {
        // Fields 3..=47 as `x`, then arg_start and arg_end, then the rest.
        let middle = vec!["x"; 45].join(" ");
        let stat = |name: &str, start: &str, end: &str| {
            format!("12 ({name}) {middle} {start} {end} 1 2 0\n")
        };
        let rows: [(String, Option<(u64, u64)>); 6] = [
            (stat("cordon", "100", "150"), Some((100, 150))),
            (stat("a) (b c", "100", "150"), Some((100, 150))),
            (stat("cordon", "150", "100"), None),
            (stat("cordon", "0", "100"), None),
            (stat("cordon", "100", "x"), None),
            ("12 (cordon) R 1".into(), None),
        ];
        for (text, expected) in rows {
            assert_eq!(argument_area(&text), expected, "{text}");
        }
    }

    #[test]
    fn this_process_argument_area_is_found() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let (start, end) = argument_area(&stat).expect("an argument area");
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap();
        assert_eq!((end - start) as usize, cmdline.len());
    }
}
