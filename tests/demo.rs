//! `gpuslice demo`, end to end: it runs its tenants on a simulated GPU under
//! a monitor, shows the live table, ends with a summary in which every part
//! of the product showed (the notebook refused at its cap and going on, the
//! inference bursts measured alone and beside training, both queued jobs
//! run), and writes an SVG chart that parses, with one line per tenant that
//! used the device and the targets of those with a share.

use gpuslice_tests::gpuslice_bin;
use std::process::Command;

#[test]
fn the_demo_shows_caps_shares_priority_and_the_queue_and_draws_its_chart() {
    let dir = std::env::temp_dir().join(format!("gpuslice-demo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let chart = dir.join("demo.svg");
    let out = Command::new(gpuslice_bin())
        .args(["demo", "--seconds", "12", "--chart"])
        .arg(&chart)
        .env_remove("GPUSLICE_DIR")
        .output()
        .expect("gpuslice demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "gpuslice demo failed\n{stdout}\n{stderr}");
    for tenant in ["training", "inference", "notebook"] {
        assert!(stdout.contains(tenant), "no {tenant} in the demo's output\n{stdout}");
    }
    assert!(stdout.contains("QUEUE"), "{stdout}");
    let summary = stdout.split("SUMMARY").nth(1).unwrap_or_else(|| panic!("no summary\n{stdout}\n{stderr}"));
    assert!(summary.contains("notebook   cap 1 GiB: refused at") && summary.contains("goes on"), "{summary}");
    assert!(summary.contains("bursts of 20 x 200 us took") && summary.contains("the same bursts alone: "), "{summary}");
    // One figure for training: its share of device time while it ran, as
    // the monitor charged it; its 60 % held (work conservation may add).
    let used: f64 = summary
        .split("share 60 %: used ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no training figure\n{summary}"));
    assert!((50.0..=100.0).contains(&used), "training used {used} % with a 60 % share\n{summary}");

    // The live table: the notebook's refusal in DENIED, and training's
    // time beyond its target explained as spare time on the same screen.
    let header = stdout.lines().find(|l| l.starts_with("TENANT")).unwrap_or_else(|| panic!("no table\n{stdout}"));
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert!(columns.contains(&"DENIED") && columns.contains(&"SPARE"), "{header}");
    let denied = stdout
        .lines()
        .filter(|l| l.starts_with("notebook "))
        .filter_map(|l| l.split_whitespace().nth(6).and_then(|n| n.parse::<u64>().ok()))
        .max();
    assert!(denied.is_some_and(|d| d >= 1), "no refusal in the notebook's DENIED column\n{stdout}");
    assert!(stdout.contains("SPARE: training used ") && stdout.contains("A share is a floor, not a ceiling"), "{stdout}");
    assert!(stdout.contains("alone: median "), "inference's bursts were not measured alone first\n{stdout}");
    for job in ["job-1", "job-2"] {
        assert!(
            summary.contains(&format!("{job}      queued for 8 GiB: started when room freed up")),
            "{job} did not run\n{summary}\n{stderr}"
        );
    }
    let svg = std::fs::read_to_string(&chart).expect("the chart is written");
    let doc = roxmltree::Document::parse(&svg).expect("the chart is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let text: String = doc.descendants().filter(|n| n.is_text()).filter_map(|n| n.text()).collect();
    assert!(text.contains("on a simulated GPU"), "the chart's title does not say the GPU is simulated: {text}");
    for series in ["training, share 60", "inference, share 20 pri 1", "target 60 %", "target 20 %"] {
        assert!(text.contains(series), "the chart's legend has no {series:?}: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
