"""Worker processes that keep state between tasks (:class:`Pool`): a key's fixed-base tables, a party's bin codes and
the tree's ciphertexts stay in each worker, so a task carries only what changes (row indices, a chunk of plaintexts).

A task is a module-level function ``fn(state, *args)``; ``state`` is the worker's own dict. :meth:`Pool.broadcast`
runs one in every worker (to install what every task needs), :meth:`Pool.map` spreads many over the workers as they
come free and returns their results in order. With one worker nothing is started: the tasks run in this process on
its own state dict, so the two paths are the same code. Workers are spawned (no fork of a process that holds torch's
threads) and end with the pool."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import traceback
from multiprocessing.connection import Connection, wait


class WorkerError(RuntimeError):
    pass


def _main(fd: int) -> None:  # pragma: no cover - runs in the worker process
    _serve(Connection(fd))


def _serve(conn) -> None:  # pragma: no cover - runs in the worker process
    state: dict = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        fn, args = msg
        try:
            conn.send((True, fn(state, *args)))
        except BaseException as e:  # sent back whole: the caller raises it with the worker's traceback
            conn.send((False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def _peak_rss(state: dict) -> int:
    """This process's peak resident set (VmHWM), bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Pool:
    """``workers`` processes (1: none, every task in this process)."""

    def __init__(self, workers: int = 1):
        self.workers = max(1, int(workers))
        self.peak_rss: list[int] = []  # each worker's, read as it ends
        self.state: dict = {}  # this process's state (the tasks' when no process was started)
        self._conns: list = []
        self._procs: list = []
        if self.workers > 1:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "OMP_NUM_THREADS": "1"}
            for _ in range(self.workers):
                here, there = socket.socketpair()
                code = "import sys; from vflbench.trees.he.pool import _main; _main(int(sys.argv[1]))"
                p = subprocess.Popen(
                    [sys.executable, "-c", code, str(there.fileno())], pass_fds=(there.fileno(),), env=env
                )
                there.close()
                self._conns.append(Connection(here.detach()))
                self._procs.append(p)

    @property
    def processes(self) -> bool:
        return bool(self._conns)

    def _reply(self, conn):
        ok, value = conn.recv()
        if not ok:
            raise WorkerError(value)
        return value

    def broadcast(self, fn, *args) -> list:
        """``fn(state, *args)`` in every worker (in this process without workers); their results."""
        if not self._conns:
            return [fn(self.state, *args)]
        for c in self._conns:
            c.send((fn, args))
        return [self._reply(c) for c in self._conns]

    def map(self, fn, arglist: list) -> list:
        """``fn(state, *args)`` for each ``args`` in ``arglist``, spread over the workers as they come free; the
        results in the order of ``arglist``."""
        arglist = list(arglist)
        if not self._conns:
            return [fn(self.state, *a) for a in arglist]
        out: list = [None] * len(arglist)
        busy: dict = {}
        nxt = 0
        for c in self._conns:
            if nxt < len(arglist):
                c.send((fn, tuple(arglist[nxt])))
                busy[c] = nxt
                nxt += 1
        error = None
        while busy:
            for c in wait(list(busy)):
                i = busy.pop(c)
                try:
                    out[i] = self._reply(c)
                except WorkerError as e:  # the others finish first: the pipes stay in step
                    error = error or e
                if nxt < len(arglist) and error is None:
                    c.send((fn, tuple(arglist[nxt])))
                    busy[c] = nxt
                    nxt += 1
        if error is not None:
            raise error
        return out

    def close(self) -> None:
        """End the workers, first reading each one's peak resident set (:attr:`peak_rss`, bytes: they hold the key's
        tables and the tree's ciphertexts beside the run's own process)."""
        if self._conns:
            try:
                self.peak_rss = self.broadcast(_peak_rss)
            except (OSError, EOFError, WorkerError):
                pass
        for c in self._conns:
            try:
                c.send(None)
                c.close()
            except OSError:
                pass
        for p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._conns, self._procs = [], []

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
