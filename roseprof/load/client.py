"""One streamed completion on the client's monotonic clock: raw asyncio HTTP/1.1 and Server-Sent Events (no client
library between the clock and the bytes: docs/BENCHMARKS.md has the choice and its numbers).

Per request: when it was sent, when each token arrived (a chunk of k tokens: k tokens at one time), its token ids
and, where the server says (roseinfer's `token_steps` extension), the decode step of each, the server's response
id, how it ended. Errors by kind: `connect` (refused, unreachable), `http_<status>`, `timeout` (no byte for the
stall timeout, or the whole request past its limit), `bad_stream` (an event that is no JSON chunk), `broken_stream`
(the stream ended before `[DONE]`), `server_error` (an error event inside the stream)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import msgspec

from roseprof.errors import RoseprofError
from roseprof.workload.roseinfer import STREAM_TOKEN_IDS, STREAM_TOKEN_STEPS

clock = time.perf_counter  # monotonic, the finest on every platform


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    base: str  # path prefix before /v1/completions ("" or "/something")
    url: str
    api_key: str | None = None

    def path(self, route: str) -> str:
        return f"{self.base}{route}"


def parse_url(url: str, api_key: str | None = None) -> Endpoint:
    """http://HOST[:PORT][/PREFIX] (a trailing /v1 or /v1/completions is taken off)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http" or not parts.hostname:
        raise RoseprofError(f"{url!r} is no http:// URL of a server (https is not supported)")
    try:
        port = 80 if parts.port is None else parts.port
    except ValueError:
        port = 0
    if port == 0:  # a port past 65535 or no number; and 0, which is no server's (it read as 80)
        raise RoseprofError(f"{url!r}: the port must be a number from 1 to 65535")
    base = parts.path.rstrip("/")
    for tail in ("/v1/completions", "/v1"):
        if base.endswith(tail):
            base = base[: -len(tail)]
    return Endpoint(parts.hostname, port, base, url, api_key)


@dataclass
class Record:
    """One request as the client saw it (seconds on `clock`)."""

    index: int
    prompt_len: int | None
    max_tokens: int
    due: float | None = None  # when the schedule wanted it sent
    sent: float | None = None
    end: float | None = None
    status: str = "pending"  # ok | error | cancelled
    error: str | None = None  # the kind (module doc)
    detail: str | None = None  # the server's or the socket's words
    request_id: str | None = None
    times: list[float] = field(default_factory=list)  # per token
    token_ids: list[int] = field(default_factory=list)
    steps: list[int | None] = field(default_factory=list)

    @property
    def first(self) -> float | None:
        return self.times[0] if self.times else None


class StreamError(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.detail = kind, detail


def _request_bytes(ep: Endpoint, route: str, body: bytes | None, method: str = "POST") -> bytes:
    head = [f"{method} {ep.path(route)} HTTP/1.1", f"Host: {ep.host}:{ep.port}", "Connection: close"]
    if ep.api_key:
        head.append(f"Authorization: Bearer {ep.api_key}")
    if body is not None:
        head += [
            "Content-Type: application/json",
            "Accept: text/event-stream",
            f"Content-Length: {len(body)}",
        ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + (body or b"")


async def _head(reader: asyncio.StreamReader) -> tuple[int, bool, int | None]:
    """(status, chunked, content length) of the response's head."""
    line = await reader.readline()
    if not line:
        raise StreamError("broken_stream", "the server closed the connection before answering")
    try:
        status = int(line.split()[1])
    except (IndexError, ValueError):
        raise StreamError("bad_stream", f"no HTTP status line: {line[:80]!r}") from None
    chunked, length = False, None
    while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = h.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "transfer-encoding" and "chunked" in value:
            chunked = True
        elif name == "content-length" and value.isdigit():
            length = int(value)
    return status, chunked, length


async def _body_pieces(reader: asyncio.StreamReader, chunked: bool):
    """The body as it arrives: HTTP chunks decoded, or raw reads until the server closes."""
    while True:
        if chunked:
            size_line = await reader.readline()
            if not size_line:
                return
            try:
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
            except ValueError:
                raise StreamError("bad_stream", f"bad HTTP chunk size {size_line[:40]!r}") from None
            if size == 0:
                return
            data = await reader.readexactly(size + 2)
            yield data[:-2]
        else:
            data = await reader.read(65536)
            if not data:
                return
            yield data


async def stream_completion(
    ep: Endpoint, rec: Record, body: dict, stall_s: float, limit_s: float | None = None
) -> Record:
    """Send one streamed completion and fill `rec` as it arrives; never raises (an error is the record's)."""
    payload = json.dumps(body, separators=(",", ":")).encode()
    writers: list = []

    async def exchange() -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(ep.host, ep.port), stall_s)
        except (OSError, asyncio.TimeoutError) as e:
            raise StreamError("connect", str(e) or type(e).__name__) from None
        writers.append(writer)
        writer.write(_request_bytes(ep, "/v1/completions", payload))
        rec.sent = clock()
        await writer.drain()
        status, chunked, length = await asyncio.wait_for(_head(reader), stall_s)
        if status != 200:
            rest = b""
            try:
                rest = await asyncio.wait_for(reader.read(4096), stall_s)
            except (asyncio.TimeoutError, OSError):
                pass
            raise StreamError(f"http_{status}", _error_words(rest))
        await _read_events(reader, chunked, rec, stall_s)

    try:
        await asyncio.wait_for(exchange(), limit_s)
        rec.status = "ok"
    except StreamError as e:
        rec.status, rec.error, rec.detail = "error", e.kind, e.detail[:300]
    except (asyncio.TimeoutError, TimeoutError):
        rec.status, rec.error = "error", "timeout"
        rec.detail = f"no byte for {stall_s:g} s" if limit_s is None else "past its time limit"
    except asyncio.IncompleteReadError:
        rec.status, rec.error, rec.detail = "error", "broken_stream", "the stream was cut inside a chunk"
    except (ConnectionError, OSError) as e:
        rec.status, rec.error, rec.detail = "error", "broken_stream", str(e)[:300] or type(e).__name__
    except asyncio.CancelledError:
        rec.status, rec.error = "cancelled", "cancelled"
        raise
    finally:
        rec.end = clock()
        for writer in writers:
            writer.close()
    return rec


def _error_words(raw: bytes) -> str:
    """An error body in one line: OpenAI's {"error": {"message"}} where it is that."""
    text = raw.decode("utf-8", "replace")
    try:
        obj = json.loads(text.split("\r\n\r\n")[-1])
        return str(obj["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return " ".join(text.split())[:300]


async def _read(reader: asyncio.StreamReader, stall_s: float) -> bytes:
    """What the socket has (up to 64 KiB), failing after stall_s with no byte. asyncio.timeout (3.11+) costs no
    task; wait_for (3.10) one per read."""
    if _timeout is not None:
        async with _timeout(stall_s):
            return await reader.read(65536)
    return await asyncio.wait_for(reader.read(65536), stall_s)


_timeout = getattr(asyncio, "timeout", None)


async def _read_events(reader: asyncio.StreamReader, chunked: bool, rec: Record, stall_s: float) -> None:
    """The SSE stream into the record, each read stamped once on arrival (every token it carries has that time).

    Between a read's stamp and its parsing the task yields once: an engine step answers many streams at once, and
    the reads that arrived together are all stamped before any is parsed (the loop runs every task woken in one
    pass before the ones that yielded). Parsed as soon as read, each stream's stamp waited for the parsing of the
    streams woken before it; parsed only at the stream's end, a request's whole parse delayed the others' stamps
    at once: at 8 streams on an H200, ITL p99 read 0.4 ms and 1.0 ms above the kernel's packet stamps of the same
    requests (scripts/wire_agreement.py, docs/BENCHMARKS.md)."""
    events = _EventParser(chunked, rec)
    while True:
        data = await _read(reader, stall_s)
        now = clock()
        if not data:
            raise StreamError(
                "broken_stream", f"the stream ended after {len(rec.times)} tokens without [DONE]"
            )
        await asyncio.sleep(0)  # the other reads of this moment are stamped first
        if events.feed(data, now):
            return


class _EventParser:
    """A response body's bytes, read by read, into the record's tokens (chunked transfer encoding undone)."""

    def __init__(self, chunked: bool, rec: Record) -> None:
        self.chunked, self.rec = chunked, rec
        self.raw, self.buffer, self.left = b"", b"", 0  # left: bytes of the current HTTP chunk still to come
        self.ended = False  # the body's last chunk came

    def feed(self, data: bytes, now: float) -> bool:
        """One read's bytes, stamped `now`; True at [DONE]. A body that ended without it is a broken stream."""
        if self.chunked:
            self.raw += data
            raw, left = self.raw, self.left
            while raw:
                if left == 0:
                    line_end = raw.find(b"\r\n")
                    if line_end < 0:
                        break
                    try:
                        left = int(raw[:line_end].split(b";")[0].strip() or b"0", 16) + 2
                    except ValueError:
                        raise StreamError("bad_stream", f"bad HTTP chunk size {raw[:40]!r}") from None
                    raw = raw[line_end + 2 :]
                    if left == 2:  # the last chunk: the body ended
                        self.ended, raw, left = True, b"", 0
                        break
                take = raw[:left]
                raw, left = raw[len(take) :], left - len(take)
                self.buffer += take[: len(take) - max(0, 2 - left)] if left < 2 else take
            self.raw, self.left = raw, left
        else:
            self.buffer += data
        buffer = self.buffer
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if _event(event, self.rec, now):
                return True
        self.buffer = buffer
        if self.ended:
            raise StreamError(
                "broken_stream", f"the stream ended after {len(self.rec.times)} tokens without [DONE]"
            )
        return False


_decode = msgspec.json.Decoder().decode


def _event(event: bytes, rec: Record, now: float) -> bool:
    """One SSE event into the record; True at [DONE]."""
    data = b"".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
    if not data:
        return False  # a comment or keep-alive
    if data.strip() == b"[DONE]":
        return True
    try:
        chunk = _decode(data)  # msgspec: a third of json.loads' time a chunk (docs/BENCHMARKS.md)
    except (ValueError, msgspec.DecodeError):
        raise StreamError("bad_stream", f"an event is not JSON: {data[:60]!r}") from None
    if not isinstance(chunk, dict):
        raise StreamError("bad_stream", f"an event is not a JSON object: {data[:60]!r}")
    if "error" in chunk:
        err = chunk["error"]
        raise StreamError("server_error", str(err.get("message") if isinstance(err, dict) else err))
    rec.request_id = rec.request_id or chunk.get("id")
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict):
            raise StreamError("bad_stream", "a choice is not a JSON object")
        ids = choice.get(STREAM_TOKEN_IDS)
        if ids is None:  # a server without the token_ids extension: one token per chunk with text
            n = 1 if choice.get("text") else 0
            ids = [None] * n
        steps = choice.get(STREAM_TOKEN_STEPS) or [None] * len(ids)
        rec.times += [now] * len(ids)
        rec.token_ids += ids
        rec.steps += list(steps)[: len(ids)] + [None] * (len(ids) - len(steps))
    return False


async def get(ep: Endpoint, route: str, timeout_s: float) -> tuple[int, bytes]:
    """A plain GET (the /metrics scrape, the reachability check): (status, body)."""

    async def exchange() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(ep.host, ep.port)
        try:
            writer.write(_request_bytes(ep, route, None, "GET"))
            await writer.drain()
            status, chunked, length = await _head(reader)
            if chunked or length is None:
                return status, b"".join([p async for p in _body_pieces(reader, chunked)])
            return status, await reader.readexactly(length)
        finally:
            writer.close()

    return await asyncio.wait_for(exchange(), timeout_s)
