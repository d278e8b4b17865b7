#!/usr/bin/env bash
# Slow and abusive clients against tessera: 5,000 connections split between slowloris
# (half a head), slow body (a head promising a body that never comes) and slow readers
# (a 4 MiB response nobody reads), while one well-behaved keep-alive client measures its
# latency. Prints the good client's latency without and with the abusers, then how many
# abusive connections tessera has closed once their timeouts (5 s here) have passed.
#
# usage: bench/abuse.sh [ABUSERS]     (default 5000)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ABUSERS=${1:-5000}
ulimit -n "$(ulimit -Hn)"
need python3 python3
cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera

make_work abuse
mkdir -p "$work/site"
printf 'hello world\n' > "$work/site/12b.txt"
head -c $((4 << 20)) /dev/zero > "$work/site/big.bin"
cat > "$work/tessera.toml" <<CONF
[timeouts]
head = 5
body = 5
write = 5
CONF
port=$(free_port)
taskset -c 0 "$TESSERA" serve --root "$work/site" --listen "127.0.0.1:$port" --workers 1 --config "$work/tessera.toml" 2>"$work/tessera.log" &
pids+=($!)
wait_up "$port" 12b.txt

cat > "$work/abuse.py" <<'PY'
import socket, sys, time
port, abusers = int(sys.argv[1]), int(sys.argv[2])

def latencies(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        s.sendall(b"GET /12b.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        data = b""
        while not data.endswith(b"hello world\n"):
            chunk = s.recv(4096)
            if not chunk:
                sys.exit("server closed the good client")
            data += chunk
        out.append((time.perf_counter() - t) * 1e3)
    s.close()
    out.sort()
    return out

def report(label, lat):
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    print(f"{label:<28} p50 {pick(0.5):7.3f} ms   p99 {pick(0.99):7.3f} ms   max {lat[-1]:7.3f} ms")

report("good client alone", latencies(3000))
conns = []
for i in range(abusers):
    s = socket.socket()
    kind = i % 3
    if kind == 2:
        # A tiny receive window (set before connecting), so the response cannot all
        # sit in kernel buffers: the server's writes stall.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    if kind == 0:
        s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: ")
    elif kind == 1:
        s.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\nabc")
    else:
        s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    conns.append(s)
time.sleep(1)  # let the server take in every abuser's opening bytes
report(f"with {abusers} abusers", latencies(3000))
time.sleep(6)
closed, by_kind = 0, [0, 0, 0]
for i, s in enumerate(conns):
    s.setblocking(False)
    try:
        while True:
            data = s.recv(1 << 20)
            if not data:
                closed += 1
                by_kind[i % 3] += 1
                break
    except BlockingIOError:
        pass
    except ConnectionResetError:
        closed += 1
        by_kind[i % 3] += 1
print(f"abusive connections closed by the server after their 5 s timeouts: {closed} of {abusers}"
      f" (slowloris {by_kind[0]}, slow body {by_kind[1]}, slow reader {by_kind[2]})")
PY
echo "# $(date -u +%F) $(nproc) cores, $(uname -r); tessera one worker on core 0, clients on core 1"
taskset -c 1 python3 "$work/abuse.py" "$port" "$ABUSERS"
