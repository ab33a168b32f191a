"""A chapter's notebook on a Slurm cluster: one job array per partition, through submitit.

    specbench cluster submit sweep --profile cluster/profiles.toml \\
        -g workloads '[["repeat"], ["open"]]'
    specbench cluster status  cluster-jobs/sweep-20261130T0500Z     # one look
    specbench cluster collect cluster-jobs/sweep-20261130T0500Z     # wait (bounded), then report
    specbench cluster resubmit cluster-jobs/sweep-20261130T0500Z    # rerun what did not complete

A *profile* (TOML, see ``cluster/profiles.example.toml``) names the partitions and what a task
asks of each: GPUs (and their gres type), CPUs, memory, time, set-up lines. A *task* is one
parameter group on one partition; every task of a partition goes into one job array (Slurm fixes
partition and resources per array, so a submission to two partitions is two arrays). Each task
executes ``notebooks/<name>.md`` with :func:`specbench.cli.notebooks.execute`, writing its run into
the run store ``root`` (a notebook parameter) on the shared filesystem.

Requeue and resubmission resume: the task sets ``SPECBENCH_RUN_RECORD`` so the run store writes
the folder of the run it creates into ``<folder>/tasks/<key>.run``. A requeued (Slurm) or
resubmitted (``resubmit``) task reads that file: a complete run is returned as it is, an
incomplete one is handed to the notebook's ``resume`` parameter (the sweep finishes its
remaining cells). A notebook without ``resume`` starts a new run; the old one stays, incomplete.

The submission — job ids, tasks and their parameters — is recorded in ``<folder>/submission.json``
so status, collect and resubmit work from any later shell. States come from ``sacct`` (the
accounting daemon); every wait is bounded, so a task killed from outside is reported, never
waited on.
"""
from specbench.cli.cluster.command import *  # noqa: F403 - each module's __all__
from specbench.cli.cluster.jobs import *  # noqa: F403 - each module's __all__
from specbench.cli.cluster.profiles import *  # noqa: F403 - each module's __all__
from specbench.cli.cluster.selftest import *  # noqa: F403 - each module's __all__
