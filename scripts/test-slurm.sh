#!/usr/bin/env bash
# The Slurm tests too slow for the test command (tests/slurm.rs, those
# marked #[ignore]): 200 short shard jobs through one node; a job on two
# nodes, each slurmd in a network namespace of its own, one of which fails
# mid-run (Slurm takes 20 s or more to find it dead); and the time from
# sbatch to a job's first CUDA call with and without the integration
# (median of 20 each, printed); with slurmdbd and a MariaDB of the test's
# own, sacct against `gpuslice report --by job` and `--by user`, and an
# account's GrpTRES bounding its shards across two nodes; an account as a
# team (two jobs of one account and one of another, teams at 50 / 50, about
# 10 s). About 3 minutes
# (2 min 45 s on a 2-core VM shared with other builds). The rest of
# tests/slurm.rs runs in the test command (scripts/test.sh). Needs what
# scripts/setup.sh installs (Debian's munge, slurmctld, slurmd,
# slurm-client, slurmdbd, mariadb-server) and root, as those tests do.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace
# 200 jobs take a minute or more: the waits for them are longer than a
# test's default 30 s.
GS_TEST_WAIT_S=${GS_TEST_WAIT_S:-600} cargo test --test slurm -- --ignored --test-threads 1 --nocapture "$@"
