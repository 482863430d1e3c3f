//! `gpuslice queue [--dir DIR] [--json]`: the live jobs, running ones
//! first, then waiting ones in the order they will start, as the monitor's
//! board says (see [`crate::queue::view`] for what is shown without a monitor).
//! USER is the job file's owner as the kernel says; REASON is why a
//! waiting job waits, in the monitor's words from its board (which device,
//! how much memory short, or which job it is behind): never anything a
//! job's owner wrote. `--json` has both (`user`, `reason`) and each
//! waiting job's `position` in line, from 1.

use crate::discovery;
use crate::error::Error;
use crate::queue::store::{self, Job, JobState};
use clap::Args;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// `gpuslice queue [--dir DIR] [--json]`.
#[derive(Args)]
pub struct QueueListArgs {
    /// The ledger directory the queue lives in (default: GPUSLICE_DIR, else /run/gpuslice or the per-user fallback).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Lists the live jobs, in admission order for the waiting ones.
pub fn list(args: QueueListArgs) -> Result<ExitCode, Error> {
    let dir = discovery::ledger_dir(args.dir.as_deref());
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(Error::Usage(format!("the ledger directory {} is not a directory", dir.display()))),
        Err(e) => {
            let message = format!("cannot read the ledger directory {}: {e} (is --dir or GPUSLICE_DIR right?)", dir.display());
            return Err(if e.kind() == std::io::ErrorKind::NotFound { Error::Usage(message) } else { Error::Failed(message) });
        }
    }
    let view = crate::queue::view(&dir).map_err(Error::Failed)?;
    if let Some(why) = &view.partial {
        eprintln!("gpuslice queue: {why}");
    }
    let mut jobs = view.jobs;
    // Stable: the waiting jobs keep the board's order, the order they start in.
    jobs.sort_by_key(|j| j.state == JobState::Waiting);
    let mut users = HashMap::new();
    let mut user = |uid: u32| users.entry(uid).or_insert_with(|| crate::host::user_name(uid).unwrap_or_else(|| uid.to_string())).clone();
    let text = if args.json {
        let listed: Vec<serde_json::Value> = jobs
            .iter()
            .map(|job| {
                let mut value = serde_json::to_value(job).unwrap_or_default();
                if let Some(fields) = value.as_object_mut() {
                    fields.insert("user".into(), user(job.uid).into());
                    fields.insert("position".into(), position(&jobs, job).into());
                }
                value
            })
            .collect();
        let text = serde_json::to_string_pretty(&serde_json::json!({ "jobs": listed })).map_err(|e| Error::Failed(e.to_string()))?;
        text + "\n"
    } else {
        table(&jobs, store::unix_ms(), &mut user)
    };
    // A reader that went (`| head`) is not an error.
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::Failed(format!("cannot write to stdout: {e}"))),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// A waiting job's place in line, from 1 (`None` for a running job).
fn position(jobs: &[Job], job: &Job) -> Option<usize> {
    let waiting = jobs.iter().filter(|j| j.state == JobState::Waiting);
    (job.state == JobState::Waiting).then(|| waiting.take_while(|j| j.id != job.id || j.inode != job.inode).count() + 1)
}

fn table(jobs: &[Job], now_unix_ms: u64, user: &mut impl FnMut(u32) -> String) -> String {
    let mut rows = vec![["ID", "NAME", "USER", "STATE", "PRIORITY", "GPUS", "MEMORY", "TENANT", "SINCE", "DEVICES", "REASON", "COMMAND"]
        .map(String::from)
        .to_vec()];
    let or_dash = |text: &str| if text.is_empty() { "-".to_string() } else { text.to_string() };
    for job in jobs {
        let since_ms = job.started_unix_ms.unwrap_or(job.submitted_unix_ms);
        rows.push(vec![
            job.id.to_string(),
            job.name.clone().unwrap_or_else(|| "-".into()),
            user(job.uid),
            format!("{:?}", job.state).to_lowercase(),
            job.priority.to_string(),
            job.gpus.to_string(),
            job.memory_bytes.map_or("whole GPU".into(), crate::text::human_bytes),
            or_dash(&job.tenant),
            format!("{}s", now_unix_ms.saturating_sub(since_ms) / 1000),
            if job.devices.is_empty() { "-".into() } else { job.devices.join(",") },
            or_dash(job.reason.as_deref().unwrap_or_default()),
            job.command.join(" "),
        ]);
    }
    let mut out = String::new();
    crate::text::render_rows(&mut out, &rows);
    out
}
