"""Running workers (command layer): one in this process, or several processes for --num.streams
(capped by --max.procs). Exit codes as in commands/__init__.py.
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time

from confluent_kafka import KafkaException

from mirror_worker.commands.base import EXIT_BAD_INPUT, EXIT_FATAL, EXIT_OK, fail
from mirror_worker.config.model import MirrorConfig
from mirror_worker.engine.worker import MirrorWorker
from mirror_worker.exceptions import ConfigError, MirrorError, StopInterrupted
from mirror_worker.logs import configure_logging
from mirror_worker.metrics import MirrorMetrics

log = logging.getLogger("mirror_worker")

def run_worker(config: MirrorConfig, index: int = 0) -> int:
    """One worker in this process, until SIGTERM, SIGINT or SIGHUP, or a fatal error."""
    metrics = MirrorMetrics(config.name)
    worker = MirrorWorker(config, metrics, stream_index=index)

    def request_stop(signum, _frame):
        log.info("stop requested", extra={"mirror": config.name, "signal": signal.Signals(signum).name})
        worker.state.request_stop()  # the shutdown clock starts here, for a flush under way too

    _handle_stops(request_stop)
    # A forked --num.streams child starts with these blocked (see run_processes): a stop sent meanwhile
    # is pending and arrives here, at this process's own handler.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    if config.metrics_port is not None:
        port = metrics.serve(config.metrics_port + index if config.metrics_port else 0)
        log.info("metrics endpoint", extra={"mirror": config.name, "url": f"http://127.0.0.1:{port}/metrics"})
    started = False
    try:
        worker.start()
        started = True
        _tune_gc()
        worker.run()
    except StopInterrupted as exc:
        # A clean stop (exit 0), as after it started: what was asked for was done, nothing of the step it
        # interrupted was consumed or committed. Not bad input (2) nor a failure (1): the clusters may only be
        # slow, and a pause or failover that stops a worker still starting must not read as a broken spec.
        log.info("stopped before start" if not started else "stopped during a wait on a cluster",
                 extra={"mirror": config.name, "reason": str(exc)})
        return EXIT_OK
    except ConfigError as exc:
        return fail(str(exc), EXIT_BAD_INPUT)
    except MirrorError as exc:
        return fail(str(exc), EXIT_FATAL)
    except KafkaException as exc:  # a client call no part of the worker expected to fail: where, in the log
        log.error("unexpected client error", exc_info=True, extra={"mirror": config.name})
        return fail(str(exc), EXIT_FATAL)
    finally:
        if started:
            # What is left of the stop's bound (all of it after a fatal error), and the grace.
            left = max(0.0, worker.state.request_stop() - worker.clock())
            close_within(worker.close, left + CLOSE_GRACE_S, config.name)
    return EXIT_OK


# close() bounds its own flush by shutdown_timeout_s; this is for the calls librdkafka does not bound.
CLOSE_GRACE_S = 5.0


def close_within(close, timeout_s: float, mirror: str) -> bool:
    """Run `close` for at most `timeout_s`: the final offset commit and the consumer's close wait without
    limit for an unreachable cluster's coordinator. Giving up loses nothing: what was not committed is
    mirrored again after the restart (at-least-once); an open transaction is aborted by the next owner."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            close()
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    closer = threading.Thread(target=run, name="mirror-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    if closer.is_alive():
        log.error("shutdown timed out", extra={"mirror": mirror, "timeout_s": timeout_s})
        print(f"mirror_worker: shutdown did not finish within {timeout_s:.0f}s (a cluster unreachable?): "
              "exiting without the final commit; what it held is mirrored again after a restart",
              file=sys.stderr, flush=True)
        # Where it is stuck, for whoever reads the log: every thread's stack (the closer's among them).
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        return False
    if errors:
        raise errors[0]
    return True


def _tune_gc() -> None:
    """The mirror loop allocates thousands of short-lived objects per batch (one per consumed record),
    none in reference cycles: with the default threshold (700) the cyclic GC ran several times per batch
    and took ~15% of a copying worker's CPU (py-spy, issue #7). Objects from start-up are frozen out of
    the collections; cycles are still collected, just less often.
    """
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


# The stops that flush and commit: a pause or failover (TERM), Ctrl-C (INT), the terminal the worker was started
# from closing (HUP: its default action killed the worker with neither; MirrorMaker's JVM runs its shutdown
# hooks on it).
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def _handle_stops(handler) -> None:
    for stop in _STOP_SIGNALS:
        if stop == signal.SIGHUP and signal.getsignal(stop) == signal.SIG_IGN:
            continue  # started under nohup: hang-ups are to be ignored, as asked
        signal.signal(stop, handler)


def _child(config_json: str, index: int, parent: int) -> None:
    configure_logging()
    config = MirrorConfig.model_validate_json(config_json)
    stop_with_parent(parent, config.name)
    sys.exit(run_worker(config, index))


PR_SET_PDEATHSIG = 1


def stop_with_parent(parent: int, mirror: str, interval_s: float = 1.0) -> None:
    """A SIGTERM to this process (a clean stop) when `parent` dies, even by kill -9: a --num.streams child
    must not go on mirroring where a pause or the failover's stop, which signal the parent, cannot reach it.

    Linux's parent-death signal, and a watch of the parent's pid besides (other systems; and the parent may
    have died before the signal was asked for). The SIGTERM is held until run_worker unblocks it."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        log.warning("parent process gone", extra={"mirror": mirror, "parent": parent})
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _single_threaded() -> bool:
    """No other thread in this process, librdkafka's included (they are not in `threading`): only then is
    fork safe, since a forked child gets copies of locks other threads might hold."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def start_method() -> str:
    """How --num.streams children start. `fork` from the parent, which has imported everything and
    started no client yet: no second interpreter start-up and import per child (~0.25 CPU-s each, on cores
    the copy needs) and the children share the parent's pages until they write them. `spawn` otherwise."""
    return "fork" if _single_threaded() and "fork" in multiprocessing.get_all_start_methods() else "spawn"


def run_processes(config: MirrorConfig) -> int:
    """--num.streams N: N worker processes in one consumer group; SIGTERM reaches them all."""
    context = multiprocessing.get_context(start_method())
    config_json = config.model_dump_json()
    children = [
        context.Process(target=_child, args=(config_json, i, os.getpid()), name=f"{config.name}-stream-{i}",
                        daemon=False)
        for i in range(config.process_count)
    ]
    stopping = False

    def request_stop(signum, _frame):
        nonlocal stopping
        stopping = True
        for child in children:
            if child.is_alive():
                child.terminate()  # SIGTERM: each child flushes and commits

    # Stops are held while the children start: a forked child would otherwise run the parent's handler
    # until run_worker installs its own; it unblocks them then. The parent's pending stop arrives below.
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    _handle_stops(request_stop)
    try:
        for child in children:
            child.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    log.info("worker processes started", extra={"mirror": config.name, "pids": [c.pid for c in children],
                                                "start_method": context.get_start_method()})
    code = EXIT_OK
    while any(c.is_alive() for c in children):
        for child in children:
            if child.exitcode not in (None, 0) and not stopping:
                code = child.exitcode if child.exitcode > 0 else EXIT_FATAL
                request_stop(signal.SIGTERM, None)
                stopping = True
        time.sleep(0.2)
    for child in children:
        child.join()
        if child.exitcode not in (0, None) and code == EXIT_OK and not stopping:
            code = child.exitcode
    return code
