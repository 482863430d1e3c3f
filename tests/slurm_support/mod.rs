//! A private Slurm cluster on one test's simulated GPUs, for `tests/slurm.rs`
//! and `benches/slurm_startup.rs`: Debian's munged, slurmctld and one
//! slurmd, started in the foreground by the test with their own
//! configuration (`SLURM_CONF`), ports, key, state and spool directories,
//! and stopped with it.
//!
//! ```text
//!  <test dir>/
//!    munge/        munge.key, munge.socket     (munged --socket; slurm.conf AuthInfo=socket=)
//!    spool/        slurmd's spool, with slurmstepd's sockets (both by a short link to the
//!                  test dir, /tmp/gs-<pid>-<n>: a socket's address holds 108 bytes)
//!    etc/          slurm.conf, gres.conf       (SLURM_CONF for every daemon and client)
//!    dev/          nvidia0 → /dev/null, …      (gres.conf File=: slurmd wants a device file)
//!    gpuslice-slurm/  deploy/slurm's scripts, installed, and their gpuslice-slurm.conf
//!    ledger/       the monitor's ledger directory (--dir), where admitted tenants live
//!    simgpu.state  the simulated GPUs, open to every user
//! ```
//!
//! Every GPU carries shards and has a `Type=` (`gpu:simgpu`), as
//! deploy/slurm/README.md requires: without one, Slurm 22.05 does not tie
//! a GPU's shards to it and gives a `--gres=gpu:1` job a GPU whose shards
//! are in use.
//!
//! Jobs run as `nobody` (every Debian system has it; slurmctld wants a
//! user it can name), through `srun` started as that user.
//!
//! What slurmd accepts as a GPU's `File=`: a character or block device
//! (it stats the path and refuses anything else, and then binds no GPU,
//! setting no CUDA_VISIBLE_DEVICES). A symbolic link to `/dev/null` in a
//! private directory is one, and its name's number (`nvidia1`) is the
//! GPU's index in CUDA_VISIBLE_DEVICES and SLURM_JOB_GPUS; no device node
//! needs to be made.

#![allow(dead_code)]

use crate::monitor_support::{gpuslice_command, Monitor, MonitorOptions};
use gpuslice_tests::{poll, repo_root, shim_lib, simgpu_lib, wrap_as_user, Output, Running, Sim};
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The user jobs run as.
pub const JOB_UID: u32 = 65534;
/// Shards on each GPU (gres.conf and gpuslice-slurm.conf).
pub const SHARDS_PER_GPU: u32 = 8;

/// How a test's cluster is made.
pub struct ClusterOptions {
    /// GPUs, each with SHARDS_PER_GPU shards.
    pub gpus: u32,
    /// Each GPU has a `Type=` in gres.conf, as deploy/slurm/README.md
    /// requires; `false`: none, which Slurm 22.05 accepts but then does
    /// not keep whole-GPU jobs off a GPU whose shards are in use.
    pub typed: bool,
    /// Memory of each simulated GPU.
    pub memory: &'static str,
    /// deploy/slurm installed (Prolog, TaskProlog, Epilog) with a monitor;
    /// `false`: plain Slurm, as a node without gpuslice.
    pub integration: bool,
    /// The monitor's configuration file.
    pub monitor_config: String,
    /// What the Prolog runs as `squeue` (gpuslice-slurm.conf's `squeue=`),
    /// a shell script installed as `<dir>/gpuslice-slurm/squeue`, in place
    /// of Slurm's `/usr/bin/squeue` (which it may call).
    pub squeue_script: Option<String>,
    /// gpuslice-slurm.conf's `monitor_wait_s`: how long the Prolog and
    /// Epilog wait for a monitor that does not answer.
    pub monitor_wait_s: u32,
    /// Installed as a site does that has Prologs and Epilogs of its own:
    /// `Prolog=<dir>/prolog.d/*` and `Epilog=<dir>/epilog.d/*`, with
    /// deploy/slurm's scripts linked in as `50-gpuslice` between the
    /// site's `10-site` and `90-site` (see [`SITE_SCRIPT`]).
    pub site_scripts: bool,
    /// The cgroup layout production uses: `proctrack/cgroup`,
    /// `task/cgroup` with `ConstrainDevices=yes` (cgroup v1, as this
    /// machine has), `PrologFlags=Alloc,Contain`. The GPUs' files are
    /// then device nodes (`c 195 <index>`, as NVIDIA's), which the cgroup
    /// allows or denies by number; `false`: `proctrack/linuxproc`,
    /// `task/none`, and links to /dev/null.
    pub cgroups: bool,
    /// Two nodes, each a host of its own: its slurmd in a network
    /// namespace of its own (`nsenter --net=`, on a bridge with
    /// slurmctld's address), and its own simulated GPUs, monitor, ledger
    /// directory and state_dir (see [`SecondNode`]). The test's own
    /// commands (srun, sinfo…) run on the first node's simulated GPUs.
    pub two_nodes: bool,
    /// Accounting: a MariaDB of the cluster's own (Debian's mariadb-server,
    /// its data in `<dir>/mysql`, on 127.0.0.1 and a free port) behind a
    /// slurmdbd of its own, `AccountingStorageType=accounting_storage/slurmdbd`
    /// with `AccountingStorageTRES=gres/gpu,gres/shard`, and the accounts
    /// [`ACCOUNTS`] with the users [`JOB_UID`] and [`OTHER_UID`] in both.
    pub accounting: bool,
    /// `AccountingStorageEnforce=associations,limits` (with `accounting`):
    /// an account's `GrpTRES` bounds its jobs.
    pub enforce: bool,
    /// More arguments for the node's monitor (`--history-interval 1s`).
    pub monitor_args: Vec<String>,
}

/// The accounts of a cluster with accounting; the first is each user's default.
pub const ACCOUNTS: [&str; 2] = ["physics", "chemistry"];
/// A second job user (Debian's `daemon`), for what is per user.
pub const OTHER_UID: u32 = 1;

/// The second node of a [`ClusterOptions::two_nodes`] cluster: its own
/// simulated GPUs and monitor. One installed copy of deploy/slurm serves
/// both nodes: gpuslice-slurm.conf (a shell fragment) gives this node its
/// ledger directory, state_dir and GPUs by `SLURMD_NODENAME`, and a
/// TaskProlog in front of deploy/slurm's points its tasks at its simulated
/// GPUs (on real hosts, each has its own driver).
pub struct SecondNode {
    pub name: String,
    pub sim: Sim,
    pub monitor: Option<Monitor>,
    /// The network namespace its slurmd runs in.
    pub netns: String,
}

/// The bridge, addresses and namespaces of a two-node cluster: the host
/// (slurmctld, srun) is 10.77.0.1 on bridge `gs<tag>br`, the nodes 10.77.0.2
/// and .3 in namespaces `gs<tag>a` and `gs<tag>b`.
struct Network {
    tag: String,
}

impl Network {
    fn up(tag: &str) -> Network {
        let network = Network { tag: tag.to_string() };
        network.down();
        let br = format!("gs{tag}br");
        let mut steps: Vec<Vec<String>> = vec![
            vec!["link".into(), "add".into(), br.clone(), "type".into(), "bridge".into()],
            vec!["addr".into(), "add".into(), "10.77.0.1/24".into(), "dev".into(), br.clone()],
            vec!["link".into(), "set".into(), br.clone(), "up".into()],
        ];
        for (n, address) in [("a", "10.77.0.2/24"), ("b", "10.77.0.3/24")] {
            let (ns, host_end, node_end) = (format!("gs{tag}{n}"), format!("gs{tag}{n}h"), format!("gs{tag}{n}n"));
            let words = |text: String| text.split(' ').map(String::from).collect::<Vec<_>>();
            steps.extend([
                words(format!("netns add {ns}")),
                words(format!("link add {host_end} type veth peer name {node_end}")),
                words(format!("link set {node_end} netns {ns}")),
                words(format!("link set {host_end} master {br}")),
                words(format!("link set {host_end} up")),
                words(format!("-n {ns} addr add {address} dev {node_end}")),
                words(format!("-n {ns} link set {node_end} up")),
                words(format!("-n {ns} link set lo up")),
            ]);
        }
        for step in steps {
            let out = Command::new("ip").args(&step).output().expect("cannot run ip");
            assert!(out.status.success(), "ip {}: {}", step.join(" "), String::from_utf8_lossy(&out.stderr));
        }
        network
    }

    fn netns(&self, n: &str) -> String {
        format!("gs{}{n}", self.tag)
    }

    fn down(&self) {
        for n in ["a", "b"] {
            let _ = Command::new("ip").args(["netns", "del", &self.netns(n)]).output();
        }
        let _ = Command::new("ip").args(["link", "del", &format!("gs{}br", self.tag)]).output();
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.down();
    }
}

/// A site's own Prolog or Epilog: appends `<its path in the cluster's
/// directory> <job> <the Prolog's note on the job> <unix time>` to `<dir>/log/site-order`, so a test sees
/// which ran, in which order, and whether gpuslice's had admitted the job
/// by then. `{dir}` is the cluster's directory.
pub const SITE_SCRIPT: &str = r#"#!/bin/sh
note=$(cat {dir}/gpuslice-state/job-$SLURM_JOB_ID 2>/dev/null)
echo "${0#{dir}/} $SLURM_JOB_ID ${note:-none} $(date +%s.%N)" >>{dir}/log/site-order
"#;

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            gpus: 2,
            typed: true,
            memory: "8GiB",
            integration: true,
            monitor_config: String::new(),
            squeue_script: None,
            monitor_wait_s: 10,
            site_scripts: false,
            cgroups: false,
            two_nodes: false,
            accounting: false,
            enforce: false,
            monitor_args: Vec::new(),
        }
    }
}

/// A running cluster. Dropping it cancels its jobs and stops its daemons.
pub struct Cluster {
    pub sim: Sim,
    pub monitor: Option<Monitor>,
    /// munged, slurmctld, slurmd, in the order started.
    daemons: Vec<Running>,
    conf: PathBuf,
    node: String,
    /// A short path to `<dir>`, for the sockets of munged and slurmstepd.
    short_link: PathBuf,
    /// The second node of a two-node cluster.
    pub second: Option<SecondNode>,
    /// Dropped after the daemons.
    network: Option<Network>,
}

/// `mknod PATH c MAJOR MINOR`, mode 0666.
fn make_device_node(path: &Path, major: u32, minor: u32) {
    let out = Command::new("mknod").arg("-m").arg("0666").arg(path).args(["c", &major.to_string(), &minor.to_string()]).output();
    let out = out.expect("cannot run mknod");
    assert!(out.status.success(), "mknod {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
}

/// A port nothing listens on now, for a daemon to bind later, from below
/// the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`).
/// A port the kernel hands out for `127.0.0.1:0` is one it also hands to
/// the next outgoing connection as its local port: while the other tests
/// ran beside this one, slurmd found its port so taken ("Unable to bind
/// listen port: Address already in use") and the node never came up.
/// Ports below that range are only ever taken by a bind that names them.
/// Each call moves on from a start drawn from the process id and the
/// clock, so clusters of one run and of test binaries that run at once
/// pick apart.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOWEST: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|&low| low > LOWEST + 1_000 && low <= 65_535)
        .unwrap_or(32_768);
    let span = ephemeral_low - LOWEST;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let _ = NEXT.compare_exchange(0, (std::process::id().wrapping_mul(7_919) ^ nanos) % span + 1, Ordering::AcqRel, Ordering::Acquire);
    for _ in 0..span {
        let port = LOWEST + NEXT.fetch_add(1, Ordering::AcqRel) % span;
        if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
    panic!("no port free between {LOWEST} and {ephemeral_low}");
}

fn short_hostname() -> String {
    let out = Command::new("hostname").arg("-s").output().expect("cannot run hostname");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn require_slurm() {
    for program in ["munged", "slurmctld", "slurmd", "srun"] {
        let found =
            std::env::var_os("PATH").map(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file())).unwrap_or(false)
                || Path::new("/usr/sbin").join(program).is_file();
        assert!(found, "{program} is missing: `bash scripts/setup.sh` installs Debian's munge, slurmctld, slurmd and slurm-client");
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

impl Cluster {
    pub fn start(options: ClusterOptions) -> Cluster {
        require_slurm();
        let sim = Sim::new().devices(options.gpus).memory(options.memory).context_memory("64MiB");
        sim.share_the_gpu();
        let dir = sim.dir().to_path_buf();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["munge", "etc", "dev", "state", "spool", "log", "gpuslice-slurm"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let node = if options.two_nodes { format!("gs{}a", std::process::id() % 100_000) } else { short_hostname() };
        let network = options.two_nodes.then(|| Network::up(&(std::process::id() % 100_000).to_string()));
        let mut second = network.as_ref().map(|network| {
            let sim = Sim::new().devices(options.gpus).memory(options.memory).context_memory("64MiB");
            sim.share_the_gpu();
            std::fs::set_permissions(sim.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
            SecondNode { name: network.netns("b"), sim, monitor: None, netns: network.netns("b") }
        });
        // A Unix socket's address holds 108 bytes, which a test directory
        // named after a long test name (and a counter) can pass: munged's
        // socket and slurmstepd's (`<spool>/<node>_<job>.<step>`, the batch
        // step's number is 4294967291) are made through a short link.
        static NEXT_LINK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let short_link = std::env::temp_dir().join(format!(
            "gs-{}-{}",
            std::process::id(),
            NEXT_LINK.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&short_link);
        std::os::unix::fs::symlink(&dir, &short_link).unwrap();
        let socket = short_link.join("munge/munge.socket");
        let conf = dir.join("etc/slurm.conf");
        let (ctld_port, slurmd_port, dbd_port) = (free_port(), free_port(), free_port());
        let d = dir.display();
        let gpus = options.gpus;
        let gpu_type = if options.typed { "simgpu:" } else { "" };
        let node_spec = format!("CPUs=8 RealMemory=1000 Gres=gpu:{gpu_type}{gpus},shard:{} State=UNKNOWN", gpus * SHARDS_PER_GPU);
        let mut slurm_conf = format!(
            "ClusterName=gpuslice-test\n\
             SlurmctldHost={host}({ctld_addr})\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={slurmd_port}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={socket}\n\
             CredType=cred/munge\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd-%n.log\n\
             {tracking}\
             JobAcctGatherType=jobacct_gather/none\n\
             {accounting}\
             SchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             SlurmdParameters=config_overrides\n\
             KillWait=2\n\
             GresTypes=gpu,shard\n\
             {nodes}\
             PartitionName=gpu Nodes={node_list} Default=YES MaxTime=INFINITE State=UP\n",
            socket = socket.display(),
            spool = short_link.join(if options.two_nodes { "spool/%n" } else { "spool" }).display(),
            host = short_hostname(),
            ctld_addr = if options.two_nodes { "10.77.0.1" } else { "127.0.0.1" },
            nodes = match &second {
                None => format!("NodeName={node} NodeAddr=127.0.0.1 {node_spec}\n"),
                Some(b) => format!(
                    "SlurmdTimeout=5\nNodeName={node} NodeAddr=10.77.0.2 {node_spec}\nNodeName={} NodeAddr=10.77.0.3 {node_spec}\n",
                    b.name
                ),
            },
            node_list = match &second {
                None => node.clone(),
                Some(b) => format!("{node},{}", b.name),
            },
            accounting = if options.accounting {
                format!(
                    "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n\
                     AccountingStoragePort={dbd_port}\nAccountingStorageTRES=gres/gpu,gres/shard\n{enforce}\
                     AccountingStoragePass={socket}\n",
                    enforce = if options.enforce { "AccountingStorageEnforce=associations,limits\n" } else { "" },
                    // The munge socket for slurmdbd's connections: slurm.conf's
                    // AuthInfo serves the cluster's own, and without this
                    // sacctmgr and slurmctld ask the system's munged.
                    socket = socket.display(),
                )
            } else {
                "AccountingStorageType=accounting_storage/none\n".to_string()
            },
            tracking = if options.cgroups {
                "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\nPrologFlags=Alloc,Contain\n"
            } else {
                "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            },
        );
        let mut gres_conf = String::from("AutoDetect=off\n");
        for gpu in 0..gpus {
            let file = dir.join(format!("dev/nvidia{gpu}"));
            if options.cgroups {
                make_device_node(&file, 195, gpu);
            } else {
                std::os::unix::fs::symlink("/dev/null", &file).unwrap();
            }
            let typed = if options.typed { " Type=simgpu" } else { "" };
            gres_conf.push_str(&format!("Name=gpu{typed} File={}\n", file.display()));
        }
        for gpu in 0..gpus {
            gres_conf.push_str(&format!("Name=shard Count={SHARDS_PER_GPU} File={}\n", dir.join(format!("dev/nvidia{gpu}")).display()));
        }
        let mut monitor = None;
        if options.integration {
            let installed = dir.join("gpuslice-slurm");
            for script in ["prolog.sh", "epilog.sh", "task_prolog.sh", "slices.awk"] {
                let to = installed.join(script);
                std::fs::copy(repo_root().join("deploy/slurm").join(script), &to).unwrap();
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            let squeue = match &options.squeue_script {
                Some(script) => {
                    let path = installed.join("squeue");
                    write(&path, script);
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
                    path
                }
                None => PathBuf::from("/usr/bin/squeue"),
            };
            // The node's settings; on simgpu, also where its GPUs are.
            write(
                &installed.join("gpuslice-slurm.conf"),
                &format!(
                    "gpuslice_bin={bin}\nshim_lib={shim}\nledger_dir={ledger}\nsqueue={squeue}\nshards_per_gpu={SHARDS_PER_GPU}\n\
                     scontrol=/usr/bin/scontrol\nscancel=/usr/bin/scancel\nmonitor_wait_s={wait}\nstate_dir={d}/gpuslice-state\n\
                     devices_args=\"--nvml-lib {simgpu}\"\nlog_file={d}/log/gpuslice-slurm.log\n\
                     export SIMGPU_STATE={d}/simgpu.state SIMGPU_DEVICES={gpus} SIMGPU_MEMORY={memory} SIMGPU_CONTEXT_MEMORY=64MiB\n",
                    bin = gpuslice_tests::gpuslice_bin().display(),
                    shim = shim_lib().display(),
                    ledger = sim.ledger_dir().display(),
                    simgpu = simgpu_lib().display(),
                    memory = options.memory,
                    squeue = squeue.display(),
                    wait = options.monitor_wait_s,
                ),
            );
            if let Some(b) = &second {
                let conf = installed.join("gpuslice-slurm.conf");
                let mut text = std::fs::read_to_string(&conf).unwrap();
                text.push_str(&format!(
                    "case ${{SLURMD_NODENAME:-}} in\n{name})\n    ledger_dir={ledger}\n    state_dir={bd}/gpuslice-state\n    export SIMGPU_STATE={bd}/simgpu.state\n    ;;\nesac\n",
                    name = b.name,
                    ledger = b.sim.ledger_dir().display(),
                    bd = b.sim.dir().display(),
                ));
                write(&conf, &text);
                let wrapper = installed.join("task_prolog_simgpu.sh");
                write(
                    &wrapper,
                    &format!(
                        "#!/bin/sh\ncase $SLURMD_NODENAME in {name}) echo \"export SIMGPU_STATE={bd}/simgpu.state\" ;; esac\nexec {installed}/task_prolog.sh\n",
                        name = b.name,
                        bd = b.sim.dir().display(),
                        installed = installed.display(),
                    ),
                );
                std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            let i = installed.display();
            if options.site_scripts {
                for (kind, ours) in [("prolog", "prolog.sh"), ("epilog", "epilog.sh")] {
                    let scripts = dir.join(format!("{kind}.d"));
                    std::fs::create_dir_all(&scripts).unwrap();
                    std::os::unix::fs::symlink(installed.join(ours), scripts.join("50-gpuslice")).unwrap();
                    for site in ["10-site", "90-site"] {
                        let path = scripts.join(site);
                        write(&path, &SITE_SCRIPT.replace("{dir}", &d.to_string()));
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
                    }
                    let key = if kind == "prolog" { "Prolog" } else { "Epilog" };
                    slurm_conf.push_str(&format!("{key}={}/*\n", scripts.display()));
                }
                slurm_conf.push_str(&format!("TaskProlog={i}/task_prolog.sh\n"));
            } else if second.is_some() {
                slurm_conf.push_str(&format!("Prolog={i}/prolog.sh\nEpilog={i}/epilog.sh\nTaskProlog={i}/task_prolog_simgpu.sh\n"));
            } else {
                slurm_conf.push_str(&format!("Prolog={i}/prolog.sh\nEpilog={i}/epilog.sh\nTaskProlog={i}/task_prolog.sh\n"));
            }
            let config = dir.join("monitor.toml");
            write(&config, &options.monitor_config);
            let args = options.monitor_args.clone();
            monitor = Some(Monitor::start(&sim, MonitorOptions { config: Some(config.clone()), args, ..Default::default() }));
            if let Some(b) = second.as_mut() {
                b.monitor = Some(Monitor::start(&b.sim, MonitorOptions { config: Some(config), ..Default::default() }));
            }
        }
        if options.site_scripts && !options.integration {
            // The site's scripts alone, as on a node without gpuslice: the
            // same Prologs and Epilogs, for measurements against one with it.
            for (kind, key) in [("prolog", "Prolog"), ("epilog", "Epilog")] {
                let scripts = dir.join(format!("{kind}.d"));
                std::fs::create_dir_all(&scripts).unwrap();
                for site in ["10-site", "90-site"] {
                    let path = scripts.join(site);
                    write(&path, &SITE_SCRIPT.replace("{dir}", &d.to_string()));
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
                }
                slurm_conf.push_str(&format!("{key}={}/*\n", scripts.display()));
            }
        }
        write(&conf, &slurm_conf);
        write(&dir.join("etc/gres.conf"), &gres_conf);
        if options.cgroups {
            write(&dir.join("etc/cgroup.conf"), "CgroupPlugin=cgroup/v1\nConstrainDevices=yes\n");
        }

        let key = dir.join("munge/munge.key");
        let mut bytes = [0u8; 1024];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").expect("cannot open /dev/urandom"), &mut bytes)
            .expect("cannot read /dev/urandom");
        std::fs::write(&key, bytes).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();

        let mut cluster = Cluster { sim, monitor, daemons: Vec::new(), conf, node, short_link, second, network };
        let mut munged = cluster.root_command("munged");
        munged.args(["--foreground", "--force"]).arg(format!("--key-file={}", key.display()));
        munged.arg(format!("--socket={}", socket.display())).arg(format!("--pid-file={d}/munge/munged.pid"));
        munged.arg(format!("--log-file={d}/log/munged.log")).arg(format!("--seed-file={d}/munge/seed"));
        let munged = cluster.sim.spawn(&mut munged);
        cluster.daemons.push(munged);
        poll::until("munged's socket", || socket.exists());
        if options.accounting {
            cluster.start_accounting(dbd_port, &socket);
        }

        let slurmctld = cluster.sim.spawn(cluster.root_command("slurmctld").args(["-D", "-i"]));
        cluster.daemons.push(slurmctld);
        if let Some(network) = &cluster.network {
            for (n, name) in [("a", cluster.node.clone()), ("b", cluster.second.as_ref().unwrap().name.clone())] {
                let mut slurmd = cluster.root_command("nsenter");
                slurmd.arg(format!("--net=/run/netns/{}", network.netns(n))).args(["slurmd", "-D", "-N", &name]);
                let slurmd = cluster.sim.spawn(&mut slurmd);
                cluster.daemons.push(slurmd);
            }
        } else {
            let slurmd = cluster.sim.spawn(cluster.root_command("slurmd").args(["-D"]));
            cluster.daemons.push(slurmd);
        }
        poll::fetch_until(
            "the nodes idle in sinfo",
            || {
                let out = cluster.sim.run(cluster.root_command("sinfo").args(["-h", "-N", "-o", "%T"]));
                out.stdout.trim().to_string()
            },
            |state| state.lines().all(|s| s == "idle"),
        );
        cluster
    }

    /// MariaDB and slurmdbd of this cluster's own, and its accounts and
    /// users, before slurmctld starts (it registers with slurmdbd).
    fn start_accounting(&mut self, dbd_port: u16, munge_socket: &Path) {
        for program in ["mariadbd", "mariadb-install-db", "slurmdbd"] {
            let found = ["/usr/sbin", "/usr/bin"].iter().any(|d| Path::new(d).join(program).is_file());
            assert!(found, "{program} is missing: `bash scripts/setup.sh` installs Debian's mariadb-server and slurmdbd");
        }
        let d = self.dir().to_path_buf();
        let data = d.join("mysql/data");
        std::fs::create_dir_all(&data).unwrap();
        let mut install = Command::new("mariadb-install-db");
        install.arg("--no-defaults").arg(format!("--datadir={}", data.display()));
        install.args(["--user=root", "--auth-root-authentication-method=socket", "--skip-test-db"]);
        self.sim.run(&mut install).assert_success();
        let db_socket = self.short_link.join("mysql/sock");
        let db_port = free_port();
        let mut mariadbd = Command::new("mariadbd");
        mariadbd.arg("--no-defaults").arg(format!("--datadir={}", data.display())).arg("--user=root");
        mariadbd.arg(format!("--socket={}", db_socket.display())).arg(format!("--port={db_port}")).arg("--bind-address=127.0.0.1");
        mariadbd.arg(format!("--pid-file={}/mysql/pid", d.display())).arg(format!("--log-error={}/log/mariadb.log", d.display()));
        mariadbd.args(["--skip-log-bin", "--innodb-buffer-pool-size=32M"]);
        let mariadbd = self.sim.spawn(&mut mariadbd);
        self.daemons.push(mariadbd);
        poll::until("MariaDB's socket", || db_socket.exists());
        // slurmdbd's own database user, by TCP with a password of this run.
        let password = format!("gs{}{}", std::process::id(), dbd_port);
        let mut grant = Command::new("mariadb");
        grant.arg("--no-defaults").arg(format!("--socket={}", db_socket.display())).args(["-u", "root", "-e"]);
        grant.arg(format!(
            "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        ));
        poll::fetch_until("MariaDB to take the grant", || self.sim.run(&mut grant).status.is_some_and(|s| s.success()), |ok| *ok);
        let dbd_conf = self.conf.with_file_name("slurmdbd.conf");
        write(
            &dbd_conf,
            &format!(
                "AuthType=auth/munge\nAuthInfo=socket={munge}\nDbdHost={host}\nDbdAddr=127.0.0.1\nDbdPort={dbd_port}\n\
                 SlurmUser=root\nPidFile={d}/slurmdbd.pid\nLogFile={d}/log/slurmdbd.log\n\
                 StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={db_port}\n\
                 StorageUser=slurm\nStoragePass={password}\nStorageLoc=slurm_acct_db\n",
                munge = munge_socket.display(),
                host = short_hostname(),
                d = d.display(),
            ),
        );
        // slurmdbd refuses a configuration others can read (it holds the password).
        std::fs::set_permissions(&dbd_conf, std::fs::Permissions::from_mode(0o600)).unwrap();
        let slurmdbd = self.sim.spawn(self.root_command("slurmdbd").args(["-D"]));
        self.daemons.push(slurmdbd);
        poll::fetch_until(
            "slurmdbd to answer sacctmgr",
            || self.sim.run(self.root_command("sacctmgr").args(["-n", "show", "cluster"])).status.is_some_and(|s| s.success()),
            |ok| *ok,
        );
        let users = format!("nobody,{}", user_name(OTHER_UID));
        for args in [
            vec!["add".to_string(), "cluster".into(), "gpuslice-test".into()],
            vec!["add".into(), "account".into(), ACCOUNTS.join(",")],
            vec!["add".into(), "user".into(), users, format!("account={}", ACCOUNTS.join(",")), format!("defaultaccount={}", ACCOUNTS[0])],
        ] {
            self.sim.run(self.root_command("sacctmgr").arg("-i").args(&args)).assert_success();
        }
    }

    /// `sacctmgr -i ARGS` as root.
    pub fn sacctmgr(&self, args: &[&str]) -> Output {
        let out = self.sim.run(self.root_command("sacctmgr").arg("-i").args(args));
        out.assert_success();
        out
    }

    /// `sacct -X -a -n -P -o FIELDS` as root: one line per job, fields by `|`.
    pub fn sacct(&self, fields: &str) -> Vec<Vec<String>> {
        let out = self.sim.run(self.root_command("sacct").args(["-X", "-a", "-n", "-P", "-o", fields]));
        out.assert_success();
        out.stdout.lines().filter(|l| !l.is_empty()).map(|l| l.split('|').map(String::from).collect()).collect()
    }

    /// `gpuslice report --by BY --json` on this node's monitor's history.
    pub fn report(&self, by: &str) -> serde_json::Value {
        let mut cmd = gpuslice_command(&self.sim);
        cmd.args(["report", "--json", "--since", "1h", "--by", by, "--dir"]).arg(self.sim.ledger_dir());
        let out = self.sim.run(&mut cmd);
        out.assert_success();
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("report is not JSON ({e}):\n{out}"))
    }

    /// The node's name (slurm.conf's NodeName, the short host name).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// This cluster's directory (the test's).
    pub fn dir(&self) -> &Path {
        self.sim.dir()
    }

    /// `program` as root with this cluster's SLURM_CONF and simulated GPUs.
    pub fn root_command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = self.sim.command(program);
        cmd.env("SLURM_CONF", &self.conf);
        cmd
    }

    /// `srun SRUN_ARGS sh -c 'echo job=$SLURM_JOB_ID; exec PROGRAM ARGS'`
    /// as the job user: the job prints its id first.
    pub fn srun(&self, srun_args: &[&str], program: impl AsRef<OsStr>, args: &[&str]) -> Command {
        wrap_as_user(JOB_UID, &self.srun_as_root(srun_args, program, args))
    }

    /// [`Cluster::srun`] as root (for programs only root may run here, such
    /// as a Python under root's home).
    pub fn srun_as_root(&self, srun_args: &[&str], program: impl AsRef<OsStr>, args: &[&str]) -> Command {
        let mut cmd = self.root_command("srun");
        cmd.args(srun_args).args(["sh", "-c", "echo job=$SLURM_JOB_ID; exec \"$0\" \"$@\""]).arg(program).args(args);
        cmd.current_dir(self.dir());
        cmd
    }

    /// Stops the node's monitor (SIGTERM, as systemd does), and returns
    /// what it printed.
    pub fn stop_monitor(&mut self) -> Output {
        self.monitor.take().expect("this cluster has no monitor running").stop()
    }

    /// Starts the node's monitor again, on its configuration and ledger
    /// directory, and waits until it is ready.
    pub fn start_monitor(&mut self) {
        assert!(self.monitor.is_none(), "a monitor runs already");
        let config = self.dir().join("monitor.toml");
        self.monitor = Some(Monitor::start(&self.sim, MonitorOptions { config: Some(config), ..Default::default() }));
    }

    /// `sinfo`'s state of the node and the reason it gives (`idle none`).
    pub fn node_state(&self) -> String {
        self.sim.run(self.root_command("sinfo").args(["-h", "-N", "-o", "%T %E"])).stdout.trim().to_string()
    }

    /// `scontrol show job JOB`, as root.
    pub fn show_job(&self, job: &str) -> String {
        self.sim.run(self.root_command("scontrol").args(["show", "job", job])).stdout
    }

    /// `sbatch --parsable ARGS SCRIPT` as the job user, from the cluster's
    /// directory; its output goes to `<dir>/out/<job>.out` (or, for an
    /// array, `<dir>/out/<array job>_<task>.out`). The job's id.
    pub fn sbatch(&self, args: &[&str], script: &str) -> String {
        self.sbatch_as(JOB_UID, args, script)
    }

    /// [`Cluster::sbatch`] as user `uid`.
    pub fn sbatch_as(&self, uid: u32, args: &[&str], script: &str) -> String {
        let out_dir = self.dir().join("out");
        std::fs::create_dir_all(&out_dir).unwrap();
        std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let path =
            out_dir.join(format!("script-{}.sh", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()));
        write(&path, script);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cmd = self.root_command("sbatch");
        cmd.arg("--parsable").arg(format!("--output={}/%A_%a.out", out_dir.display())).args(args).arg(&path);
        cmd.current_dir(self.dir());
        let out = self.sim.run(&mut wrap_as_user(uid, &cmd));
        out.assert_success();
        out.stdout.trim().split(';').next().unwrap_or_default().to_string()
    }

    /// What batch job `name` (`<job>_4294967294` for a job that is not an
    /// array, `<array job>_<task>` for a task of one) wrote, once its job
    /// has left the queue.
    pub fn batch_output(&self, job: &str, name: &str) -> String {
        poll::fetch_until(&format!("batch job {job} to leave the queue"), || self.job_state(job), |state| state.is_empty());
        std::fs::read_to_string(self.dir().join(format!("out/{name}.out"))).unwrap_or_else(|e| panic!("no output of {name}: {e}"))
    }

    /// `gpuslice tenant list --json`: the monitor's allocations.
    pub fn tenants(&self) -> serde_json::Value {
        tenants_of(&self.sim)
    }

    /// `gpuslice devices --json` on the second node's GPUs.
    pub fn second_devices(&self) -> serde_json::Value {
        devices_of(&self.second.as_ref().expect("one node").sim)
    }

    /// The second node's monitor's allocations.
    pub fn second_tenants(&self) -> serde_json::Value {
        tenants_of(&self.second.as_ref().expect("one node").sim)
    }

    /// The allocation of job `job` (tenant `slurm-<job>`), if listed.
    pub fn tenant(&self, job: &str) -> Option<serde_json::Value> {
        let name = format!("slurm-{job}");
        self.tenants()["tenants"].as_array()?.iter().find(|t| t["tenant"] == name.as_str()).cloned()
    }

    /// `gpuslice devices --json` on this cluster's GPUs.
    pub fn devices(&self) -> serde_json::Value {
        devices_of(&self.sim)
    }

    /// `squeue` for one job: `STATE REASON`, or empty once it is gone.
    pub fn job_state(&self, job: &str) -> String {
        let out = self.sim.run(self.root_command("squeue").args(["-h", "-j", job, "-o", "%T %r"]));
        out.stdout.trim().to_string()
    }

    /// `scancel JOB` as root.
    pub fn scancel(&self, job: &str) {
        self.sim.run(self.root_command("scancel").arg(job)).assert_success();
    }

    /// What the Prolog and Epilog wrote.
    pub fn integration_log(&self) -> String {
        std::fs::read_to_string(self.dir().join("log/gpuslice-slurm.log")).unwrap_or_default()
    }

    /// Nothing queued or running any more.
    pub fn wait_idle(&self) {
        poll::fetch_until(
            "every job to end and the node to be idle",
            || {
                let jobs = self.sim.run(self.root_command("squeue").args(["-h", "-o", "%i %T"])).stdout;
                let node = self.sim.run(self.root_command("sinfo").args(["-h", "-N", "-o", "%T"])).stdout;
                (jobs.trim().to_string(), node.trim().to_string())
            },
            |(jobs, node)| jobs.is_empty() && node.lines().all(|s| s == "idle"),
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs first (slurmstepd outlives slurmd), then the daemons, newest first.
        let _ = self.root_command("scancel").args(["--full", "--user", &JOB_UID.to_string()]).output();
        let _ = self.root_command("scancel").args(["--full", "--user", "root"]).output();
        let _ = gpuslice_tests::eventually(std::time::Duration::from_secs(10), || {
            self.root_command("squeue").args(["-h"]).output().map(|o| o.stdout.is_empty()).unwrap_or(true)
        });
        while let Some(daemon) = self.daemons.pop() {
            drop(daemon);
        }
        let _ = std::fs::remove_file(&self.short_link);
        // slurmd (cgroup/v1) leaves its empty `slurm_<node>` in each
        // hierarchy it used; the jobs' own cgroups went with the jobs.
        if let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") {
            for hierarchy in hierarchies.flatten() {
                let _ = std::fs::remove_dir(hierarchy.path().join(format!("slurm_{}", self.node)));
            }
        }
        if std::thread::panicking() {
            eprintln!("slurm logs: {}/log; node: {}", self.dir().display(), self.node);
        }
    }
}

/// The name of user `uid`.
pub fn user_name(uid: u32) -> String {
    let out = Command::new("id").args(["-nu", &uid.to_string()]).output().expect("cannot run id");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `gpuslice tenant list --json` of the monitor on `sim`'s ledger directory.
fn tenants_of(sim: &Sim) -> serde_json::Value {
    let mut cmd = gpuslice_command(sim);
    cmd.args(["tenant", "list", "--json", "--dir"]).arg(sim.ledger_dir());
    let out = sim.run(&mut cmd);
    out.assert_success();
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("tenant list is not JSON ({e}):\n{out}"))
}

/// `gpuslice devices --json` on `sim`'s GPUs.
fn devices_of(sim: &Sim) -> serde_json::Value {
    let mut cmd = gpuslice_command(sim);
    cmd.args(["devices", "--json", "--dir"]).arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib());
    let out = sim.run(&mut cmd);
    out.assert_success();
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("devices is not JSON ({e}):\n{out}"))
}

/// The output of a finished job, with its id.
pub fn job_id(out: &Output) -> String {
    out.get("job").to_string()
}
