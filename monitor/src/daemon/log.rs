//! The monitor's log: one line per event on stderr (journald and
//! `kubectl logs` take it from there).

fn line(level: &str, message: &str) {
    eprintln!("gpuslice monitor: {level}: {message}");
}

pub fn info(message: &str) {
    line("info", message);
}

pub fn warn(message: &str) {
    line("warning", message);
}

pub fn error(message: &str) {
    line("error", message);
}
