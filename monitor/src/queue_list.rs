//! `gpuslice queue [--dir DIR] [--json]`: the live jobs, running ones
//! first, then waiting ones in the order they will start, as the monitor's
//! board says (see [`crate::queue::view`] for what is shown without a monitor).

use crate::discovery;
use crate::error::Error;
use crate::queue::store::{self, Job, JobState};
use clap::Args;
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
    if args.json {
        let text = serde_json::to_string_pretty(&serde_json::json!({ "jobs": jobs })).map_err(|e| Error::Failed(e.to_string()))?;
        println!("{text}");
    } else {
        print!("{}", table(&jobs, store::unix_ms()));
    }
    Ok(ExitCode::SUCCESS)
}

fn table(jobs: &[Job], now_unix_ms: u64) -> String {
    let mut rows =
        vec![["ID", "NAME", "STATE", "PRIORITY", "GPUS", "MEMORY", "TENANT", "SINCE", "DEVICES", "COMMAND"].map(String::from).to_vec()];
    for job in jobs {
        let since_ms = job.started_unix_ms.unwrap_or(job.submitted_unix_ms);
        rows.push(vec![
            job.id.to_string(),
            job.name.clone().unwrap_or_else(|| "-".into()),
            format!("{:?}", job.state).to_lowercase(),
            job.priority.to_string(),
            job.gpus.to_string(),
            job.memory_bytes.map_or("whole GPU".into(), crate::text::human_bytes),
            job.tenant.clone(),
            format!("{}s", now_unix_ms.saturating_sub(since_ms) / 1000),
            if job.devices.is_empty() { "-".into() } else { job.devices.join(",") },
            job.command.join(" "),
        ]);
    }
    let mut out = String::new();
    crate::text::render_rows(&mut out, &rows);
    out
}
