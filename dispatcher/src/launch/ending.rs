//! How a launch ended, as one exit status: the CLI's own code, or 128+N when signal N ended it
//! (the shell's convention, which `dispatcher launch`, the server's records and tmux panes all
//! report).

use std::process::ExitStatus;

/// The exit status of a process that ended with `signal` (wins when both are known) or `code`;
/// 1 when neither is known.
pub fn exit_code(signal: Option<i32>, code: Option<i32>) -> u8 {
    match (signal, code) {
        (Some(s), _) => 128u8.saturating_add(s as u8),
        (None, Some(c)) => c as u8,
        (None, None) => 1,
    }
}

/// The exit status of a waited-for child.
pub fn of_status(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    exit_code(status.signal(), status.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_128_plus_its_number() {
        assert_eq!(exit_code(Some(9), None), 137);
        assert_eq!(exit_code(Some(15), Some(3)), 143);
        assert_eq!(exit_code(None, Some(3)), 3);
        assert_eq!(exit_code(None, None), 1);
        assert_eq!(exit_code(Some(200), None), 255);
    }
}
