"""`roseprof load` against the wire: the same requests timed by the kernel's packet stamps, so a server's own
variance cannot hide a client's error.

    sudo python scripts/wire_agreement.py URL [--concurrency 8] [--requests 64] [--output-len 64]
                                               [--prompt-len 32] [--json FILE]

scripts/load_agreement.py compares roseprof's client with an independent one; the two meet the server at different
moments, and a server whose prefill moves by 2 ms from one load to the next (roseinfer's eager prefill on the GPU,
docs/BENCHMARKS.md) makes their TTFT differ by that much whoever measures right. Here nothing else runs: a raw
packet socket on the loopback interface (AF_PACKET, Linux, root or CAP_NET_RAW; the server on this host) records
every TCP segment to and from the server's port with the kernel's receive stamp (SO_TIMESTAMPNS) while `roseprof
load` runs as a user runs it. Per connection: the request's first segment is "sent", each SSE event's time is the
segment that completed it (as a client's read would), the response's `id` joins it to roseprof's stored request.
Then per request and per token, roseprof's TTFT and ITL against the wire's, and their percentiles: what the
criterion "agree within 5% or 0.1 ms" asks of a client, on the very same requests. No code is shared with
roseprof's client (the segments are parsed here, chunked encoding included). Exits 1 when a percentile disagrees.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

REPO = Path(__file__).resolve().parent.parent
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # loopback shows each segment twice (out, then in): keep one
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
QUANTILES = (50, 90, 99)


class Sniffer(threading.Thread):
    """Every segment on `lo` to or from `port`: (kernel stamp ns, source port, destination port, TCP sequence
    number, payload). The thread only receives; parsing waits until the load is over."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True, name="wire-sniffer")
        self.port = port
        self.raw: list[tuple[int, bytes]] = []
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)  # a burst must not overflow it
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.stop = threading.Event()

    def run(self) -> None:
        sock, raw = self.sock, self.raw
        while not self.stop.is_set():
            try:
                data, anc, _, addr = sock.recvmsg(262144, 64)
            except TimeoutError:
                continue
            if addr[2] != PACKET_OUTGOING:
                continue
            stamp = 0
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", value[:16])
                    stamp = sec * 1_000_000_000 + nsec
            raw.append((stamp, data))

    def segments(self) -> list[tuple[int, int, int, int, bytes]]:
        out = []
        for stamp, frame in self.raw:
            ip = frame[14:]  # an Ethernet header of zeros on lo
            if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:  # IPv4, TCP
                continue
            ip = ip[: struct.unpack("!H", ip[2:4])[0]]  # its total length (a frame may carry padding)
            tcp = ip[(ip[0] & 0x0F) * 4 :]
            sport, dport, seq = struct.unpack("!HHI", tcp[:8])
            if self.port not in (sport, dport):
                continue
            payload = tcp[(tcp[12] >> 4) * 4 :]
            if payload:
                out.append((stamp, sport, dport, seq, payload))
        return out


def _dechunk(body: bytes, times: list[int]) -> tuple[bytes, list[int]]:
    """A chunked body's data, with each byte's segment stamp carried along."""
    data, data_t, i = bytearray(), [], 0
    while i < len(body):
        eol = body.find(b"\r\n", i)
        if eol < 0:
            break
        size = int(body[i:eol].split(b";")[0].strip() or b"0", 16)
        if size == 0:
            break
        data += body[eol + 2 : eol + 2 + size]
        data_t += times[eol + 2 : eol + 2 + size]
        i = eol + 2 + size + 2
    return bytes(data), data_t


def wire_requests(segments, port: int) -> dict[str, dict]:
    """Per response id: when its request's first segment left, and each token's time (the segment that completed
    its SSE event)."""
    by_conn: dict[int, dict] = {}
    for stamp, sport, dport, seq, payload in segments:
        if dport == port:
            conn = by_conn.setdefault(sport, {"sent": None, "out": []})
            if conn["sent"] is None and payload.startswith(b"POST"):
                conn["sent"] = stamp
        else:
            by_conn.setdefault(dport, {"sent": None, "out": []})["out"].append((seq, stamp, payload))
    out = {}
    for conn in by_conn.values():
        if conn["sent"] is None or not conn["out"]:
            continue
        stream, times, seen = bytearray(), [], set()
        for seq, stamp, payload in sorted(conn["out"], key=lambda s: s[1]):
            if seq in seen:  # a retransmission
                continue
            seen.add(seq)
            stream += payload
            times += [stamp] * len(payload)
        head_end = stream.find(b"\r\n\r\n")
        if head_end < 0 or b" 200 " not in stream[: stream.find(b"\r\n")]:
            continue
        head = bytes(stream[:head_end]).lower()
        body, body_t = bytes(stream[head_end + 4 :]), times[head_end + 4 :]
        if b"transfer-encoding: chunked" in head:
            body, body_t = _dechunk(body, body_t)
        rid, tokens, pos = None, [], 0
        while (end := body.find(b"\n\n", pos)) >= 0:
            event, done_at = body[pos:end], body_t[end]
            pos = end + 2
            data = b"".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
            if not data or data == b"[DONE]":
                continue
            chunk = json.loads(data)
            rid = rid or chunk.get("id")
            for choice in chunk.get("choices") or []:
                ids = choice.get("token_ids")
                tokens += [done_at] * (len(ids) if ids is not None else int(bool(choice.get("text"))))
        if rid is not None:
            out[rid] = {"sent": conn["sent"], "tokens": tokens}
    return out


def compare(client_rows: list[dict], wire: dict[str, dict]) -> dict:
    """Per request joined by id: TTFT and every ITL gap of both, ms."""
    ttft_c, ttft_w, itl_c, itl_w, ttft_diff, itl_diff, lost = [], [], [], [], [], [], 0
    for row in client_rows:
        w = wire.get(row["request_id"])
        if w is None or row["sent_ms"] is None or not row["t_ms"] or len(w["tokens"]) != len(row["t_ms"]):
            lost += 1
            continue
        tc = row["t_ms"][0] - row["sent_ms"]
        tw = (w["tokens"][0] - w["sent"]) / 1e6
        ttft_c.append(tc)
        ttft_w.append(tw)
        ttft_diff.append(tc - tw)
        gc = np.diff(row["t_ms"])
        gw = np.diff(np.asarray(w["tokens"], dtype=np.float64)) / 1e6
        itl_c += list(gc)
        itl_w += list(gw)
        itl_diff += list(gc - gw)
    return {
        "requests": len(ttft_c),
        "not_joined": lost,
        "ttft_ms": {"roseprof": ttft_c, "wire": ttft_w, "diff": ttft_diff},
        "itl_ms": {"roseprof": itl_c, "wire": itl_w, "diff": itl_diff},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--gc-off", action="store_true",
                   help="run roseprof's client with Python's cyclic GC off (does a collection stall its reads?)")  # fmt: skip
    args = p.parse_args()
    parts = urlsplit(args.url)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        sys.exit(f"wire_agreement: {args.url}: the server must listen on 127.0.0.1 (its segments cross lo)")
    try:
        sniffer = Sniffer(parts.port or 80)
    except PermissionError:
        sys.exit("wire_agreement: a raw packet socket needs root or CAP_NET_RAW")
    sniffer.start()
    with tempfile.TemporaryDirectory() as tmp:
        run_it = (
            [
                "-c",
                "import gc, runpy, sys; gc.disable(); sys.argv[0] = 'roseprof'; "
                "runpy.run_module('roseprof', run_name='__main__')",
            ]
            if args.gc_off
            else ["-m", "roseprof"]
        )
        cmd = [sys.executable, *run_it, "load", args.url, "--concurrency", str(args.concurrency),
               "--requests", str(args.requests), "--output-len", str(args.output_len), "--prompt-len",
               str(args.prompt_len), "--traces-dir", tmp, "--name", "wire"]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        sniffer.stop.set()
        sniffer.join()
        if proc.returncode != 0:
            sys.exit(f"wire_agreement: roseprof load failed: {proc.stderr.strip()[-400:]}")
        run = next(q for q in Path(tmp).iterdir() if q.is_dir() and "wire" in q.name)
        rows = json.loads((run / "load_tokens.json").read_text())
    got = compare(rows, wire_requests(sniffer.segments(), parts.port or 80))
    print(f"{got['requests']} requests joined to the wire ({got['not_joined']} not), "
          f"{len(got['itl_ms']['diff'])} gaps; {len(sniffer.raw)} segments")  # fmt: skip
    print(f"{'figure':10}{'roseprof ms':>13}{'wire ms':>10}{'diff ms':>10}  agree (5% or 0.1 ms)")
    ok, table = True, {}
    for what in ("ttft_ms", "itl_ms"):
        for q in QUANTILES:
            c, w = (float(np.percentile(got[what][k], q)) for k in ("roseprof", "wire"))
            agree = abs(c - w) <= max(0.1, 0.05 * abs(w))
            ok &= agree
            table[f"{what[:-3]}_p{q}"] = {"roseprof": c, "wire": w, "agree": agree}
            print(
                f"{what[:-3].upper() + f' p{q}':10}{c:13.3f}{w:10.3f}{c - w:+10.3f}  {'yes' if agree else 'NO'}"
            )
    for what in ("ttft_ms", "itl_ms"):
        d = np.asarray(got[what]["diff"])
        print(f"per {'request' if what == 'ttft_ms' else 'gap'}, roseprof - wire ({what[:-3].upper()}): "
              + ", ".join(f"p{q} {np.percentile(d, q):+.3f}" for q in (1, 50, 99)) + " ms")  # fmt: skip
        table[f"{what[:-3]}_diff"] = {f"p{q}": float(np.percentile(d, q)) for q in (1, 50, 99)}
    if args.json:
        args.json.write_text(
            json.dumps({"requests": got["requests"], "not_joined": got["not_joined"], **table})
        )
    sys.exit(0 if ok and got["requests"] else 1)


if __name__ == "__main__":
    main()
