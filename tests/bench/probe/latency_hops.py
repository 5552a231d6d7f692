"""Splits enqueue commit -> handler start into hops, per job, from a loopback
capture (tcpdump -i lo, ports 5432 and 5672) and the benchmark's logs.

For each job: its commit (the enqueuer's log), the publish (the first frame to
the broker naming the job), the delivery (the first frame from the broker
naming it), the claim sent (the first message to PostgreSQL carrying the
job's id as a uuid and a worker's id, `probe-N`), the claim answered (the
server's next packet on that connection) and the handler's start (the
workers' logs). Prints one JSON line: the median and the 10th and 90th
percentiles of each hop in microseconds.

Usage: latency_hops.py CAPTURE ENQUEUE_LOG WORKER_LOG...
"""

import bisect
import itertools
import json
import statistics
import struct
import sys
import uuid


def read_log(path, into):
    for line in open(path):
        job, micros = line.split()
        into.setdefault(job, int(micros))


def packets(path):
    """(µs, source port, destination port, payload) of each TCP segment with data."""
    out = []
    with open(path, "rb") as f:
        header = f.read(24)
        nanos = struct.unpack("<I", header[:4])[0] == 0xA1B23C4D
        link = struct.unpack("<I", header[20:24])[0]
        offset = {1: 14, 113: 16}.get(link, 0)
        while len(record := f.read(16)) == 16:
            seconds, fraction, length, _ = struct.unpack("<IIII", record)
            frame = f.read(length)
            ip = frame[offset:]
            if not ip or ip[0] >> 4 != 4 or ip[9] != 6:
                continue
            tcp = ip[(ip[0] & 15) * 4:]
            payload = tcp[(tcp[12] >> 4) * 4:]
            if payload:
                source, destination = struct.unpack(">HH", tcp[:4])
                micros = seconds * 1_000_000 + (fraction // 1000 if nanos else fraction)
                out.append((micros, source, destination, payload))
    return out


def hops(job, commit, started, capture, times):
    text, binary = job.encode(), uuid.UUID(job).bytes
    publish = delivery = claim = answer = None
    after_commit = itertools.islice(capture, bisect.bisect_left(times, commit), None)
    for micros, source, destination, payload in after_commit:
        if publish is None:
            if destination == 5672 and text in payload:
                publish = micros
        elif delivery is None:
            if source == 5672 and text in payload:
                delivery = micros
        elif claim is None:
            if destination == 5432 and binary in payload and b"probe-" in payload:
                claim, port = micros, source
        elif source == 5432 and destination == port:
            answer = micros
            break
    if answer is None:
        return None
    return {
        "commit_to_publish": publish - commit,
        "publish_to_delivery": delivery - publish,
        "delivery_to_claim_sent": claim - delivery,
        "claim_sent_to_answer": answer - claim,
        "answer_to_handler": started - answer,
        "total": started - commit,
    }


def main():
    capture_path, enqueue_log, *worker_logs = sys.argv[1:]
    commits, starts = {}, {}
    read_log(enqueue_log, commits)
    for path in worker_logs:
        read_log(path, starts)
    capture = packets(capture_path)
    times = [p[0] for p in capture]
    split = [h for job in commits if job in starts
             if (h := hops(job, commits[job], starts[job], capture, times))]
    summary = {"jobs": len(commits), "matched": len(split)}
    for hop in split[0] if split else []:
        values = sorted(h[hop] for h in split)
        summary[hop] = {"p50": statistics.median(values),
                        "p10": values[len(values) // 10],
                        "p90": values[9 * len(values) // 10]}
    print(json.dumps(summary))


main()
