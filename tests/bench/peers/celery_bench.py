"""Celery's side of the job backbone benchmark (tests/bench/backbone.py).

    python celery_bench.py enqueue --jobs N [--log FILE]
    python celery_bench.py enqueue --rate R --seconds S --log FILE
    celery -A celery_bench worker ...          (the worker; BENCH_LOG names its log)

BENCH_MODE=durable turns on late acknowledgement, rejection when a worker is
lost, and publisher confirms; the default mode is Celery's defaults. The task
appends "<task id> <µs since the epoch>" to BENCH_LOG. AMQP_URL names the broker.
"""

import json
import os
import sys
import time
import uuid

from celery import Celery

DURABLE = os.environ.get("BENCH_MODE") == "durable"
QUEUE = os.environ.get("BENCH_QUEUE", "kubebyon-bench-celery")

app = Celery("celery_bench", broker=os.environ["AMQP_URL"])
app.conf.update(
    task_default_queue=QUEUE,
    task_ignore_result=True,
    result_backend=None,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
if DURABLE:
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={"confirm_publish": True},
    )

_log = None


def _now_micros():
    return time.time_ns() // 1000


@app.task(name="noop")
def noop(_i):
    global _log
    if _log is None:
        _log = os.open(os.environ["BENCH_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(_log, f"{noop.request.id} {_now_micros()}\n".encode())


def _value(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def enqueue():
    if not _value("--rate"):
        # The burn-down's prefill (the workers are measured, not this):
        # persistent messages, without waiting for a confirm each.
        app.conf.broker_transport_options = {}
    log_path = _value("--log")
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT) if log_path else None

    def add(i):
        task_id = str(uuid.uuid4())
        noop.apply_async((i,), task_id=task_id)
        if log is not None:
            os.write(log, f"{task_id} {_now_micros()}\n".encode())

    with app.producer_or_acquire():
        if _value("--rate"):
            rate, seconds = int(_value("--rate")), int(_value("--seconds"))
            jobs = rate * seconds
            start = time.perf_counter()
            for i in range(jobs):
                wait = start + i / rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                add(i)
            print(json.dumps({"enqueued": jobs, "rate": rate}))
        else:
            jobs = int(_value("--jobs"))
            start = time.perf_counter()
            for i in range(jobs):
                add(i)
            seconds = time.perf_counter() - start
            print(json.dumps({"enqueued": jobs, "seconds": seconds, "per_second": jobs / seconds}))


if __name__ == "__main__" and sys.argv[1:2] == ["enqueue"]:
    enqueue()
