"""How a trial's memory limit is enforced: cgroup v2, cgroup v1, RLIMIT_AS, a watcher.

Each mechanism is one small class behind `Mechanism` (the driver's side); the
strongest available is chosen once per experiment (`choose_mechanism`). Also here:
reading the driver's own cgroup (a container's limit) and the RSS of process trees.
See docs/memory.md.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time

from tunefleet.backends._files import HeldFile, read_text, write_text

logger = logging.getLogger("tunefleet")

MECHANISMS = ("cgroup2", "cgroup1", "rlimit", "watcher")
ENV_MECHANISM = "TUNEFLEET_MEMORY_MECHANISM"  # force one mechanism (tests, debugging)


# -- cgroup files ------------------------------------------------------------------------
def _read_int(path: str) -> int | None:
    return _int_in(read_text(path))


def _int_in(text: str | None) -> int | None:
    """The number a one-value kernel file holds (None: none, or "max")."""
    if text is None or not text.strip() or text.strip() == "max":
        return None
    return int(text.split()[0])


def _field(path: str, key: str) -> int | None:
    """The value of `key` in a flat-keyed file such as memory.stat or memory.events."""
    return _field_in(read_text(path), key)


def _field_in(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return None


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _mounts() -> list[tuple[str, str, str, str]]:
    """(root, mount point, fstype, super options) of each mounted cgroup file system."""
    found = []
    for line in (read_text("/proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            found.append((fields[3], fields[4], rest[0], rest[2]))
    return found


def own_cgroup_dir(version: int) -> str | None:
    """The directory of this process's memory cgroup in the v1 or v2 hierarchy."""
    for line in (read_text("/proc/self/cgroup") or "").splitlines():
        hid, controllers, path = line.split(":", 2)
        if (version == 2 and hid != "0") or (
            version == 1 and "memory" not in controllers.split(",")
        ):
            continue
        for root, point, fstype, opts in _mounts():
            v1_memory = fstype == "cgroup" and "memory" in opts.split(",")
            if (fstype == "cgroup2" if version == 2 else v1_memory) and path.startswith(root):
                rel = path[len(root) :] if root != "/" else path
                return os.path.normpath(point + "/" + rel.lstrip("/"))
    return None


@functools.lru_cache(maxsize=1)
def _own_limit() -> tuple[str, int, int] | None:
    """(cgroup dir, limit, version) of the tightest memory limit over the driver."""
    for version, limit_file in ((2, "memory.max"), (1, "memory.limit_in_bytes")):
        path = own_cgroup_dir(version)
        if path is None or not os.path.exists(os.path.join(path, limit_file)):
            continue
        best: tuple[str, int, int] | None = None
        while os.path.exists(os.path.join(path, limit_file)):
            limit = _read_int(os.path.join(path, limit_file))
            if limit is not None and limit < (1 << 60) and (best is None or limit < best[1]):
                best = (path, limit, version)
            path = os.path.dirname(path)
        return best
    return None


def cgroup_memory_limit() -> int | None:
    """The memory limit of the driver's cgroup (a container's), or None."""
    found = _own_limit()
    return found[1] if found else None


def _working_set(path: str, version: int) -> int | None:
    """Memory in use by a cgroup, less the page cache the kernel can drop at once."""
    usage_file, inactive_key = ("memory.current", "inactive_file")
    if version == 1:
        usage_file, inactive_key = ("memory.usage_in_bytes", "total_inactive_file")
    usage = _read_int(os.path.join(path, usage_file))
    if usage is None:
        return None
    inactive = _field(os.path.join(path, "memory.stat"), inactive_key) or 0
    return max(0, usage - inactive)


def node_memory_usage() -> tuple[float, float]:
    """(used, total) bytes: the machine's, or its cgroup's when that limit is smaller."""
    import psutil

    vm = psutil.virtual_memory()
    found = _own_limit()
    if found is not None and found[1] < vm.total:
        used = _working_set(found[0], found[2])
        if used is not None:
            return float(used), float(found[1])
    return float(vm.total - vm.available), float(vm.total)


def tree_rss(roots: list[int]) -> dict[int, int]:
    """RSS of each root's whole process tree (the root and all its descendants)."""
    import psutil

    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        children.setdefault(proc.info["ppid"], []).append(proc.pid)
    out = {}
    for root in roots:
        total, stack = 0, [root]
        while stack:
            pid = stack.pop()
            stack.extend(children.get(pid, ()))
            total += _rss(pid)
        out[root] = total
    return out


def _rss(pid: int) -> int:
    statm = read_text(f"/proc/{pid}/statm")
    try:
        return int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE") if statm else 0
    except (ValueError, IndexError):
        return 0


# -- mechanisms (driver side) ----------------------------------------------------------
class Mechanism:
    """The tree watcher alone: nothing in the kernel enforces a limit."""

    name = "watcher"
    worker_rlimit = False  # the worker sets RLIMIT_AS on itself

    def attach(self, pid: int) -> None:
        """A new worker process."""

    def manages(self, pid: int) -> bool:
        """True if the kernel accounts (and can limit) this worker's memory."""
        return False

    def apply(self, pid: int, limit: int | None) -> bool:
        """Set the limit for the next trial; True if the kernel enforces it."""
        return False

    def usage(self, pid: int) -> int | None:
        return None

    def peak(self, pid: int) -> int | None:
        return None

    def oom_killed(self, pid: int) -> bool:
        """True if the kernel's OOM killer killed in this worker's cgroup this trial."""
        return False

    def detach(self, pid: int) -> None:
        """The worker is gone."""

    def tidy(self) -> None:
        """Remove what detached workers left (cgroups empty only after their tasks die)."""

    def close(self) -> None:
        """The experiment is over."""


class _RLimit(Mechanism):
    name = "RLIMIT_AS"
    worker_rlimit = True


class _Cgroup(Mechanism):
    """One memory cgroup per worker under `base`; subclasses name the files."""

    version = 0
    oom_file = ""

    def __init__(self, base: str) -> None:
        self._base = base
        self._dirs: dict[int, str] = {}
        self._oom_base: dict[int, int] = {}
        self._limits: dict[int, int | None] = {}  # the limit each worker's cgroup has now
        self._doomed: list[str] = []
        self._count = 0
        self._held: dict[int, dict[str, HeldFile]] = {}  # pid -> its cgroup's files read often

    def attach(self, pid: int) -> None:
        self._count += 1
        path = os.path.join(self._base, f"worker-{pid}-{self._count}")
        try:
            os.mkdir(path)
            write_text(os.path.join(path, "cgroup.procs"), str(pid))
        except OSError as exc:
            logger.warning("could not put worker %d in cgroup %s (%s): watching it", pid, path, exc)
            _rmdir(path)
            return
        self._dirs[pid] = path

    def manages(self, pid: int) -> bool:
        return pid in self._dirs

    def apply(self, pid: int, limit: int | None) -> bool:
        path = self._dirs.get(pid)
        if path is None:
            return False
        try:
            if self._limits.get(pid, -1) != limit:  # a reused worker often keeps its limit
                self._set_limit(path, limit)
                self._limits[pid] = limit
            self._reset_peak(pid, path)
        except OSError as exc:  # e.g. EBUSY: the worker already holds more than `limit`
            logger.warning("could not set memory limit %s on %s (%s)", limit, path, exc)
            return False
        finally:
            self._oom_base[pid] = self._oom_kills(pid, path)
        return True

    def usage(self, pid: int) -> int | None:
        path = self._dirs.get(pid)
        return _working_set(path, self.version) if path else None

    def oom_killed(self, pid: int) -> bool:
        path = self._dirs.get(pid)
        return path is not None and self._oom_kills(pid, path) > self._oom_base.get(pid, 0)

    def _oom_kills(self, pid: int, path: str) -> int:
        return _field_in(self._file(pid, path, self.oom_file).read(), "oom_kill") or 0

    def _file(self, pid: int, path: str, name: str, mode: str = "r") -> HeldFile:
        """The worker's cgroup file `name`, held open (read or written at every trial)."""
        files = self._held.setdefault(pid, {})
        held = files.get(name)
        if held is None:
            held = files[name] = HeldFile(os.path.join(path, name), mode)
        return held

    def detach(self, pid: int) -> None:
        for held in self._held.pop(pid, {}).values():
            held.close()
        path = self._dirs.pop(pid, None)
        self._oom_base.pop(pid, None)
        self._limits.pop(pid, None)
        if path is not None:
            self._doomed.append(path)

    def tidy(self) -> None:
        self._doomed = [path for path in self._doomed if not _rmdir(path)]

    def close(self) -> None:
        for pid in list(self._dirs):
            self.detach(pid)
        deadline = time.monotonic() + 2.0
        self.tidy()
        while self._doomed and time.monotonic() < deadline:
            time.sleep(0.02)  # the last killed processes are still exiting
            self.tidy()
        _rmdir(self._base)
        _rmdir(os.path.dirname(self._base))  # fails while another experiment uses it

    def _set_limit(self, path: str, limit: int | None) -> None:
        raise NotImplementedError

    def _reset_peak(self, pid: int, path: str) -> None:
        raise NotImplementedError


class _CgroupV1(_Cgroup):
    name = "cgroup v1"
    version = 1
    oom_file = "memory.oom_control"

    def _set_limit(self, path: str, limit: int | None) -> None:
        # memsw (memory + swap) must stay >= the memory limit at every step
        memsw = os.path.join(path, "memory.memsw.limit_in_bytes")
        files = [memsw] if os.path.exists(memsw) else []
        for name in [*files, os.path.join(path, "memory.limit_in_bytes")]:
            write_text(name, "-1")
        for name in [os.path.join(path, "memory.limit_in_bytes"), *files]:
            write_text(name, str(limit) if limit else "-1")

    def _reset_peak(self, pid: int, path: str) -> None:
        self._file(pid, path, "memory.max_usage_in_bytes", "rw").write("0")
        self._file(pid, path, "memory.failcnt", "rw").write("0")

    def _oom_kills(self, pid: int, path: str) -> int:
        kills = _field_in(self._file(pid, path, self.oom_file).read(), "oom_kill")
        if kills is not None:
            return kills
        # before Linux 4.13 there is no count of kills: the limit was hit (failcnt, reset
        # before each trial) is the best sign left
        failcnt = _int_in(self._file(pid, path, "memory.failcnt", "rw").read())
        return 1 if (failcnt or 0) > 0 else 0

    def peak(self, pid: int) -> int | None:
        path = self._dirs.get(pid)
        if path is None:
            return None
        return _int_in(self._file(pid, path, "memory.max_usage_in_bytes", "rw").read())


class _CgroupV2(_Cgroup):
    name = "cgroup v2"
    version = 2
    oom_file = "memory.events"

    def _set_limit(self, path: str, limit: int | None) -> None:
        write_text(os.path.join(path, "memory.max"), str(limit) if limit else "max")
        swap = os.path.join(path, "memory.swap.max")
        if os.path.exists(swap):
            write_text(swap, "0" if limit else "max")

    def _reset_peak(self, pid: int, path: str) -> None:
        # memory.peak resets per open file (Linux 6.12): read back through the same one
        try:
            self._file(pid, path, "memory.peak", "rw").write("reset\n")
        except OSError:
            pass  # before Linux 5.19 no peak; before 6.12 the worker's lifetime peak

    def peak(self, pid: int) -> int | None:
        path = self._dirs.get(pid)
        return _int_in(self._file(pid, path, "memory.peak", "rw").read()) if path else None


def _experiment_dir(version: int, experiment_id: str) -> str:
    """Create <driver cgroup>/tunefleet/<experiment_id>; raise OSError saying why not."""
    own = own_cgroup_dir(version)
    if own is None:
        raise OSError(f"no cgroup v{version} memory hierarchy is mounted for this process")
    if not os.access(own, os.W_OK):
        raise OSError(f"the driver's cgroup {own} is not writable (not root, not delegated)")
    if version == 2:
        _delegate_memory(own)
    parent = os.path.join(own, "tunefleet")
    os.makedirs(parent, exist_ok=True)
    _remove_stale(parent)
    if version == 2:
        _delegate_memory(parent)
    base = os.path.join(parent, experiment_id)
    os.makedirs(base, exist_ok=True)
    if version == 2:
        _delegate_memory(base)
    return base


def _delegate_memory(path: str) -> None:
    controllers = (read_text(os.path.join(path, "cgroup.controllers")) or "").split()
    if "memory" not in controllers:
        raise OSError(f"the memory controller is not enabled for cgroup {path}")
    subtree = os.path.join(path, "cgroup.subtree_control")
    if "memory" not in (read_text(subtree) or "").split():
        try:
            write_text(subtree, "+memory")
        except OSError as exc:
            raise OSError(
                f"cannot enable the memory controller below {path} ({exc}): the driver must "
                "run in a cgroup that delegates it (e.g. the root of a container's cgroup)"
            ) from exc


def _remove_stale(parent: str) -> None:
    """Remove the empty cgroups of experiments whose driver is gone (killed drivers)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return  # another experiment just removed it
    for name in names:
        match = re.fullmatch(r".*-(\d+)-\d+", name)
        if match is None or _alive(int(match.group(1))):
            continue
        path = os.path.join(parent, name)
        try:
            for child in os.listdir(path):
                if child.startswith("worker-"):
                    _rmdir(os.path.join(path, child))
        except OSError:
            continue  # removed meanwhile by another experiment's clean-up
        _rmdir(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_EXPERIMENTS = iter(range(1, 1 << 62))


def _make(name: str, experiment: str) -> Mechanism:
    """Build mechanism `name`; raise OSError saying why it is unavailable."""
    if name in ("cgroup1", "cgroup2"):
        exp_id = f"{re.sub(r'[^A-Za-z0-9_.]+', '_', experiment)[:40]}-{os.getpid()}"
        exp_id += f"-{next(_EXPERIMENTS)}"
        base = _experiment_dir(int(name[-1]), exp_id)
        return _CgroupV1(base) if name == "cgroup1" else _CgroupV2(base)
    if name == "rlimit":
        try:
            import resource  # noqa: F401
        except ImportError as exc:
            raise OSError("the resource module (POSIX rlimits) is not available") from exc
        return _RLimit()
    return Mechanism()


def choose_mechanism(wanted: str | None, experiment: str) -> Mechanism:
    """The strongest mechanism available, or the one `wanted` (or $TUNEFLEET_MEMORY_MECHANISM)."""
    wanted = wanted or os.environ.get(ENV_MECHANISM) or "auto"
    if wanted not in (*MECHANISMS, "auto"):
        raise ValueError(
            f"memory mechanism {wanted!r} is not valid: use one of {', '.join(MECHANISMS)} or auto"
        )
    for name in MECHANISMS if wanted == "auto" else (wanted,):
        try:
            return _make(name, experiment)
        except OSError as exc:
            if wanted != "auto":
                raise RuntimeError(f"memory mechanism {name} is not available here: {exc}") from exc
            logger.debug("memory mechanism %s is not available: %s", name, exc)
    return Mechanism()


def why_unavailable(name: str) -> str | None:
    """None if mechanism `name` works here, else the reason (it is set up, then removed)."""
    try:
        _make(name, "probe").close()
    except OSError as exc:
        return str(exc)
    return None
