#!/usr/bin/env bash
# Latency probe: open-loop enqueue at RATE/s for SECONDS to two workers,
# captured on loopback (tcpdump), then split per job into hops: commit ->
# publish -> delivery -> claim sent -> claim answered -> handler start
# (latency_hops.py). Usage: tests/bench/probe/latency.sh RATE SECONDS
# [PREFETCH] (BIN= another build). Needs tcpdump and root.
source "$(dirname "$0")/common.sh"
RATE=$1 SECONDS_=$2 PREFETCH=${3:-16}
command -v tcpdump >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump >/dev/null
rm -f "$OUT"/lat-*.log "$OUT/enqueue.log" "$OUT/lat.pcap"
fresh_db $((RATE * SECONDS_ + 10))
start_workers lat "$PREFETCH"
sleep 2
tcpdump -i lo -s 400 -w "$OUT/lat.pcap" 'tcp port 5432 or tcp port 5672' 2>/dev/null &
capture=$!
sleep 1
DATABASE_MAX_CONNECTIONS=32 "$BIN" enqueue --rate "$RATE" --seconds "$SECONDS_" --log "$OUT/enqueue.log" >/dev/null
sleep 1
kill "$capture"; wait "$capture" 2>/dev/null || true
stop_workers
python3 tests/bench/probe/latency_hops.py "$OUT/lat.pcap" "$OUT/enqueue.log" "$OUT"/lat-*.log
