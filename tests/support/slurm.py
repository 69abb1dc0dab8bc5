"""A real single-node Slurm cluster on loopback for the tests (issue 55, item 2).

`start_slurm_cluster(root)` starts, under `root` and nowhere else: munged (its own key and socket), MariaDB and
slurmdbd (accounting, so `sacct` answers), slurmctld and one slurmd, each a plain child process on free ports of
127.0.0.1, then waits until `sinfo` shows the node idle. Clients reach it through `SLURM_CONF` (`cluster.env`).
Leaving the context cancels the cluster's jobs and stops every daemon it started, in reverse order.

Debian's packages: `apt-get install slurm-wlm munge mariadb-server-core slurmdbd` (.ci/run installs them). Without
slurmctld, slurmd or munged the `slurm_cluster` fixture skips, saying so; without mariadbd or slurmdbd the
cluster starts without accounting (`cluster.has_accounting` is False, `sacct` fails) and tests that need
`sacct` skip.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from tests.support.helpers import eventually

INSTALL_HINT = (
    "apt-get install -y --no-install-recommends slurm-wlm munge mariadb-server-core slurmdbd (as .ci/run does)"
)
SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")
NODE_NAME = "bgnode"
PARTITION = "debug"
CLUSTER_NAME = "bashgym"
MAX_TIME_MIN = 10  # the partition's MaxTime: a job asking for more is refused, one asking less can time out
CRED_EXPIRE_S = 10
GPUS = 2  # counted GRES only (no device file): jobs ask for them and sacct's AllocTRES bills them
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
PR_SET_PDEATHSIG = 1
T = TypeVar("T")
# What the tests read from sacct: ElapsedRaw (seconds) times the GPUs in AllocTRES is a job's GPU time.
SACCT_FIELDS = ["JobID", "JobName", "State", "ExitCode", "Elapsed", "ElapsedRaw", "AllocTRES", "Reason", "Comment"]


class SlurmStartError(RuntimeError):
    """A daemon of the test cluster did not come up; the message holds the logs' tails."""


def find_binary(name: str) -> str | None:
    """`name` on PATH, or in an sbin directory a non-root PATH may lack."""
    found = shutil.which(name)
    if found:
        return found
    for directory in SBIN_DIRS:
        candidate = Path(directory) / name
        if candidate.exists():
            return str(candidate)
    return None


def missing_binaries(*, accounting: bool) -> list[str]:
    """The programs the cluster needs that this machine lacks."""
    needed = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "scancel"]
    if accounting:
        needed += ["mariadbd", "slurmdbd", "sacct"]
    return [name for name in needed if find_binary(name) is None]


def daemon_env(cluster: SlurmCluster, **extra: str) -> dict[str, str]:
    """A daemon's operator settings for this cluster: where local clusters' shared directories may be, and the
    cluster's slurm.conf."""
    return {
        "BASHGYM_SLURM_SHARED_ROOT": str(cluster.shared_dir),
        "BASHGYM_SLURM_CONF": cluster.env["SLURM_CONF"],
        "BASHGYM_SLURM_POLL_S": "0.5",
        "BASHGYM_GRACE_S": "20",
        **extra,
    }


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on 127.0.0.1 right now (held together so none repeats)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def tail(path: Path, lines: int = 25) -> str:
    """The last `lines` lines of a log, or a note that it is not there."""
    if not path.exists():
        return f"({path} was not written)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Daemon:
    """One daemon of the cluster, a child process in its own session, logging to `log`."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path  # its stdout and stderr
    files: list[Path] = field(default_factory=list)  # the log files it writes itself

    def describe(self, lines: int = 15) -> str:
        """Its state and the tails of its logs, for a failure message."""
        state = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
        return "\n".join(f"--- {self.name} ({state}), {path}:\n{tail(path, lines)}" for path in [self.log, *self.files])

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM its process group, then SIGKILL what is left after `timeout_s`."""
        with contextlib.suppress(ProcessLookupError):  # already gone: nothing to stop
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout_s)
        with contextlib.suppress(ProcessLookupError):  # a child it left in its group, if any
            os.killpg(self.proc.pid, signal.SIGKILL)


@dataclass
class SlurmCluster:
    """A running single-node cluster; `env` is what a Slurm client needs to reach it."""

    root: Path
    conf_path: Path
    node_name: str
    partition: str
    cluster_name: str
    shared_dir: Path  # the directory jobs run in and write to, seen by the daemon's host as well
    cpus: int
    gpus: int
    has_accounting: bool
    env: dict[str, str]
    daemons: list[Daemon] = field(default_factory=list)

    def run(self, *args: str, check: bool = True, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
        """A Slurm client command (`sbatch`, `squeue`, `sacct`, ...) against this cluster."""
        program = find_binary(args[0]) or args[0]
        done = subprocess.run(
            [program, *args[1:]], env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout_s
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()}\n{self.logs()}")
        return done

    def submit(self, *args: str) -> str:
        """`sbatch --parsable` with `args` (in `shared_dir`); the job's id."""
        done = self.run("sbatch", "--parsable", f"--chdir={self.shared_dir}", *args)
        return done.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -o` as a dict (JobState, Reason, ExitCode, RunTime, ...); empty once forgotten."""
        done = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        if done.returncode != 0:
            return {}
        return parse_scontrol(done.stdout)

    def accounting(self, job_id: str) -> dict[str, str]:
        """The job's own `sacct` row (not its steps), its latest attempt: State, ExitCode, ElapsedRaw, AllocTRES..."""
        attempts = self.attempts(job_id)
        return attempts[-1] if attempts else {}

    def attempts(self, job_id: str) -> list[dict[str, str]]:
        """`sacct -D`: a row for each attempt of the job, the requeued ones (State REQUEUED) first."""
        done = self.run("sacct", "-j", job_id, "-X", "-D", "-n", "-P", "--format=" + ",".join(SACCT_FIELDS))
        return [dict(zip(SACCT_FIELDS, line.split("|"), strict=True)) for line in done.stdout.splitlines() if line]

    def wait_for_job(self, job_id: str, states: set[str], timeout_s: float = 30) -> dict[str, str]:
        """Poll `scontrol show job` until the job's JobState is one of `states`; its fields then."""
        return self._wait_for("scontrol", lambda: self.job(job_id), "JobState", states, timeout_s)

    def wait_for_accounting(self, job_id: str, states: set[str], timeout_s: float = 30) -> dict[str, str]:
        """Poll `sacct` until the job's State (its first word: `CANCELLED by 0`) is one of `states`."""
        return self._wait_for("sacct", lambda: self.accounting(job_id), "State", states, timeout_s)

    def _wait_for(
        self, source: str, read: Callable[[], dict[str, str]], key: str, states: set[str], timeout_s: float
    ) -> dict[str, str]:
        return wait_until(
            f"{source} to show {key} in {sorted(states)}",
            lambda: only_in(read(), key, states),
            timeout_s=timeout_s,
            describe=lambda: f"{source} shows {read() or 'nothing'}\n{self.logs()}",
        )

    def logs(self, lines: int = 15) -> str:
        """The tail of every daemon's log, for a failure message."""
        return "\n".join(daemon.describe(lines) for daemon in self.daemons)


def only_in(fields: dict[str, str], key: str, states: set[str]) -> dict[str, str] | None:
    """`fields` when its `key`'s first word (sacct writes `CANCELLED by 0`) is one of `states`, else None."""
    words = fields.get(key, "").split()
    return fields if words and words[0] in states else None


def parse_scontrol(text: str) -> dict[str, str]:
    """`Key=Value Key=Value ...` (one line of `scontrol show -o`) as a dict; a value may hold spaces only in the
    last field of the few that can (Command, WorkDir), which tests do not read."""
    fields: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep:
            fields[key] = value
    return fields


def wait_until(
    what: str, probe: Callable[[], T | None], *, timeout_s: float, describe: Callable[[], str] | None = None
) -> T:
    """`eventually`, its failure saying what `describe()` finds then (a job's fields, the daemons' logs)."""
    try:
        found: T = eventually(what, probe, timeout_s=timeout_s, every_s=0.2)
    except AssertionError as error:
        raise AssertionError(f"{error} ({timeout_s:.0f} s): {describe() if describe else ''}") from None
    return found


def node_memory_mb() -> int:
    """This machine's memory in MiB, as slurmd would count it (MemTotal)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 1024


def slurm_conf(root: Path, *, ports: dict[str, int], cpus: int, gpus: int, accounting: bool) -> str:
    """The cluster's slurm.conf: loopback ports, state under `root`, no cgroups, quick scheduling."""
    lines = [
        f"ClusterName={CLUSTER_NAME}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ports['slurmctld']}",
        f"SlurmdPort={ports['slurmd']}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # cred_expire: a requeued job waits this long plus a second before it may start again (120 s by default),
        # and a job's launch credential lives this long: short for the tests, not so short a busy slurmd misses it.
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'},cred_expire={CRED_EXPIRE_S}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'run' / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # No cgroups here (CI's container has none to give): processes are tracked by their parent ids.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        # The node is what slurm.conf says, whatever this machine has: N tasks fit on one node of few cores.
        "SlurmdParameters=config_overrides",
        "SchedulerType=sched/builtin",
        # A job starts as it arrives, or within a second of becoming eligible (a requeued one, a --begin).
        "SchedulerParameters=batch_sched_delay=0,sched_interval=1",
        "ReturnToService=2",
        "MinJobAge=3600",  # scontrol keeps an ended job an hour: a test reads its end state there too
        "KillWait=2",
        "OverTimeLimit=0",
        "InactiveLimit=0",
        "JobRequeue=1",
        "MessageTimeout=10",
        "SlurmctldTimeout=60",
        "SlurmdTimeout=60",
        "GresTypes=gpu",
    ]
    if accounting:
        lines += [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={ports['slurmdbd']}",
            f"AccountingStoragePass={root / 'munge' / 'munge.socket'}",  # with slurmdbd: the munge socket to use
            "AccountingStorageTRES=gres/gpu",
            "AccountingStoreFlags=job_comment",  # sacct keeps the run id a job's --comment carries
            "JobAcctGatherType=jobacct_gather/linux",
            "JobAcctGatherFrequency=30",
        ]
    gres = f" Gres=gpu:{gpus}" if gpus else ""
    memory_mb = min(node_memory_mb(), 8192)
    lines += [
        f"NodeName={NODE_NAME} NodeAddr=127.0.0.1 CPUs={cpus} Boards=1 SocketsPerBoard=1 CoresPerSocket={cpus} "
        f"ThreadsPerCore=1 RealMemory={memory_mb}{gres} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={NODE_NAME} Default=YES MaxTime={MAX_TIME_MIN} State=UP",
    ]
    return "\n".join(lines) + "\n"


def gres_conf(root: Path, gpus: int) -> str:
    """gres.conf: `gpus` GPUs Slurm counts and bills, each a link to /dev/null under `root` (slurmd drops a GPU
    that has no device file). They are no devices: a job asking for one gets CUDA_VISIBLE_DEVICES, nothing more."""
    if not gpus:
        return ""
    devices = root / "dev"
    devices.mkdir(exist_ok=True)
    for index in range(gpus):
        device = devices / f"gpu{index}"
        if not device.is_symlink():  # written again when the start is retried on new ports
            device.symlink_to(os.devnull)  # a character device, as slurmd wants
    return f"NodeName={NODE_NAME} Name=gpu File={devices}/gpu[0-{gpus - 1}]\n"


def slurmdbd_conf(root: Path, *, ports: dict[str, int]) -> str:
    """slurmdbd.conf: MariaDB on loopback with no grant tables (a throwaway database nobody else reaches)."""
    return "\n".join(
        [
            "AuthType=auth/munge",
            f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
            "DbdHost=localhost",
            "DbdAddr=127.0.0.1",
            f"DbdPort={ports['slurmdbd']}",
            "SlurmUser=root",
            f"LogFile={root / 'log' / 'slurmdbd.log'}",
            f"PidFile={root / 'run' / 'slurmdbd.pid'}",
            "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1",
            f"StoragePort={ports['mariadb']}",
            "StorageUser=root",
            "StorageLoc=slurm_acct_db",
            "",
        ]
    )


class _Starter:
    """Starts the cluster's daemons one by one, each waited for, all stopped on the way out."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.daemons: list[Daemon] = []

    def spawn(self, name: str, *argv: str, files: list[Path]) -> Daemon:
        log = self.root / "log" / f"{name}.out"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [find_binary(argv[0]) or argv[0], *argv[1:]],
                env={**os.environ, **self.env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() signals the daemon and what it forked
                preexec_fn=die_with_parent,
            )
        daemon = Daemon(name, proc, log, files)
        self.daemons.append(daemon)
        return daemon

    def await_ready(self, daemon: Daemon, what: str, probe: Callable[[], object]) -> None:
        """Wait for `probe` while every daemon started lives; on a death or a timeout, fail with all their logs."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if probe():
                return
            if any(started.proc.poll() is not None for started in self.daemons):
                break
            time.sleep(0.1)
        dead = [started.name for started in self.daemons if started.proc.poll() is not None]
        status = f"{', '.join(dead)} exited" if dead else f"timed out after {START_TIMEOUT_S:.0f} s"
        shown = "\n".join(started.describe() for started in self.daemons)
        raise SlurmStartError(f"the test Slurm cluster did not start: {status} before {daemon.name} {what}:\n{shown}")

    def stop_all(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()


def die_with_parent() -> None:
    """In the daemon's process before it runs: SIGTERM it when the test process dies, even by SIGKILL (a test
    run killed at its timeout must leave no daemon behind). Linux's PR_SET_PDEATHSIG; elsewhere nothing."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the context's own stop is all there is
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def accepts(port: int) -> bool:
    """Whether something listens on 127.0.0.1:`port`."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start_munge(starter: _Starter) -> None:
    """munged with a fresh key of its own; the cluster's daemons and clients use its socket."""
    munge = starter.root / "munge"
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    daemon = starter.spawn(
        "munged",
        "munged",
        "--foreground",
        "--force",  # as root, and under a /tmp whose parents munged finds too open
        f"--socket={munge / 'munge.socket'}",
        f"--key-file={key}",
        f"--pid-file={munge / 'munged.pid'}",
        f"--log-file={munge / 'munged.log'}",
        f"--seed-file={munge / 'munged.seed'}",
        files=[],  # --foreground: it logs to its stderr too
    )
    starter.await_ready(daemon, "made its socket", (munge / "munge.socket").exists)


def start_accounting(starter: _Starter, ports: dict[str, int]) -> None:
    """MariaDB on a fresh data directory, then slurmdbd over it."""
    db = starter.root / "db"
    (db / "data").mkdir(parents=True, exist_ok=True)
    mariadb = starter.spawn(
        "mariadbd",
        "mariadbd",
        "--no-defaults",
        f"--datadir={db / 'data'}",
        f"--socket={db / 'mariadb.sock'}",
        f"--port={ports['mariadb']}",
        "--bind-address=127.0.0.1",
        "--user=root",
        # No grant tables, so no mariadb-install-db (4 s of fsyncs): an empty data directory serves. Nobody else
        # reaches this loopback database, it dies with the cluster, and nothing in it need survive a crash.
        "--skip-grant-tables",
        "--innodb-log-file-size=8M",
        "--innodb-buffer-pool-size=32M",
        "--innodb-flush-log-at-trx-commit=0",
        "--innodb-doublewrite=0",
        f"--log-error={db / 'error.log'}",
        f"--pid-file={db / 'mariadbd.pid'}",
        files=[db / "error.log"],
    )
    starter.await_ready(mariadb, f"listened on {ports['mariadb']}", lambda: accepts(ports["mariadb"]))
    # -D: slurmctld, slurmd and slurmdbd in the foreground write their log to stderr as well.
    slurmdbd = starter.spawn("slurmdbd", "slurmdbd", "-D", files=[])
    starter.await_ready(slurmdbd, f"listened on {ports['slurmdbd']}", lambda: accepts(ports["slurmdbd"]))


def node_is_idle(cluster: SlurmCluster) -> bool:
    """Whether sinfo shows the cluster's node idle (ready for a job)."""
    try:
        done = cluster.run("sinfo", "-h", "-N", "-o", "%T", check=False, timeout_s=5)
    except subprocess.TimeoutExpired:  # a controller that does not answer yet (or is not ours): not ready
        return False
    return done.returncode == 0 and done.stdout.strip() == "idle"


@contextlib.contextmanager
def start_slurm_cluster(
    root: Path, *, accounting: bool | None = None, cpus: int | None = None, gpus: int = GPUS
) -> Iterator[SlurmCluster]:
    """A single-node Slurm cluster under `root`, stopped (jobs, then daemons) on the way out.

    accounting: None starts slurmdbd where MariaDB and slurmdbd are installed; False never; True requires it.
    cpus: the node's CPUs (default this machine's, at least 2, so a 2-task job fits).
    """
    if accounting is None:
        accounting = not missing_binaries(accounting=True)
    if missing := missing_binaries(accounting=accounting):
        raise SlurmStartError(f"{', '.join(missing)} not found: install them with {INSTALL_HINT}")
    for part in ("munge", "db", "state", "spool", "run", "log", "shared"):
        (root / part).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o755)  # munged wants its socket's directory open to all; the key stays 0600
    starter = _Starter(root, {"SLURM_CONF": str(root / "slurm.conf")})
    cluster = SlurmCluster(
        root=root,
        conf_path=root / "slurm.conf",
        node_name=NODE_NAME,
        partition=PARTITION,
        cluster_name=CLUSTER_NAME,
        shared_dir=root / "shared",
        cpus=cpus or max(os.cpu_count() or 1, 2),
        gpus=gpus,
        has_accounting=accounting,
        env=starter.env,
        daemons=starter.daemons,
    )
    try:
        start_daemons(starter, cluster)
        yield cluster
    finally:
        with contextlib.suppress(Exception):  # a cluster that never started has nothing to cancel
            cancel_all(cluster)
        starter.stop_all()


def start_daemons(starter: _Starter, cluster: SlurmCluster, *, tries: int = 3) -> None:
    """Write the configuration on free ports and start every daemon; on new ports again where another process
    took one between our look and the daemon's bind (a free port is only free until someone binds it)."""
    for attempt in range(1, tries + 1):
        ports = dict(zip(["slurmctld", "slurmd", "slurmdbd", "mariadb"], free_ports(4), strict=True))
        write_configs(cluster, ports)
        try:
            start_munge(starter)
            if cluster.has_accounting:
                start_accounting(starter, ports)
            start_slurm(starter, cluster, ports)
            return
        except SlurmStartError as error:
            if "already in use" not in str(error) or attempt == tries:
                raise
            starter.stop_all()
            starter.daemons.clear()


def write_configs(cluster: SlurmCluster, ports: dict[str, int]) -> None:
    """slurm.conf, gres.conf and slurmdbd.conf under the cluster's root."""
    root = cluster.root
    conf = slurm_conf(root, ports=ports, cpus=cluster.cpus, gpus=cluster.gpus, accounting=cluster.has_accounting)
    cluster.conf_path.write_text(conf)
    (root / "gres.conf").write_text(gres_conf(root, cluster.gpus))
    (root / "slurmdbd.conf").write_text(slurmdbd_conf(root, ports=ports))
    (root / "slurmdbd.conf").chmod(0o600)  # slurmdbd refuses a readable one


def start_slurm(starter: _Starter, cluster: SlurmCluster, ports: dict[str, int]) -> None:
    """slurmctld, then slurmd, until sinfo shows the node idle."""
    conf = str(cluster.conf_path)
    ctld = starter.spawn("slurmctld", "slurmctld", "-D", "-i", "-f", conf, files=[])
    starter.await_ready(ctld, f"listened on {ports['slurmctld']}", lambda: accepts(ports["slurmctld"]))
    slurmd = starter.spawn("slurmd", "slurmd", "-D", "-N", cluster.node_name, "-f", conf, files=[])
    starter.await_ready(slurmd, f"showed {cluster.node_name} idle in sinfo", lambda: node_is_idle(cluster))


def cancel_all(cluster: SlurmCluster, timeout_s: float = 15) -> None:
    """Cancel every job of the cluster and wait until none runs: no job outlives the cluster."""
    cluster.run("scancel", "--full", "--user=root", check=False, timeout_s=10)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = cluster.run("squeue", "-h", "-o", "%i", check=False, timeout_s=10)
        if done.returncode != 0 or not done.stdout.strip():
            return
        time.sleep(0.2)


def our_processes(root: Path) -> list[tuple[str, str]]:
    """(name, command line) of each process still running that names `root` in its command line (every daemon
    of a cluster there does) or its environment (slurmstepd and the jobs inherit SLURM_CONF)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
            name = (proc / "comm").read_text().strip()
        except OSError:  # gone while we looked, or a zombie's environment
            continue
        if str(root).encode() in argv + environ:
            found.append((name, argv.replace(b"\0", b" ").decode(errors="replace").strip()))
    return found


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The session's single-node Slurm cluster (skips where Slurm or munge is not installed). Offer it from a
    conftest.py (tests/e2e/slurm/ has one): imported into each test module, it would start a cluster per module."""
    if missing := missing_binaries(accounting=False):
        pytest.skip(f"Slurm's test cluster needs {', '.join(missing)}: install them with {INSTALL_HINT}")
    with start_slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster
