"""A stub OpenAI completions server that streams instantly (every token of a request at once, one chunk each),
for two uses: the generator's own ceiling (how many requests and tokens per second the client takes in, with no
server time in the way), and the faults the tests play (`--fault`).

    python -m roseprof.load.stub --port 8123 [--fault http500|malformed|stall|cut|mid500] [--token-delay-ms D]

Raw asyncio, no framework: the stub must be cheaper than the client it measures."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading

FAULTS = ("none", "http500", "malformed", "stall", "cut", "mid500")


class Stub:
    def __init__(self, fault: str = "none", token_delay_ms: float = 0.0, say_done: bool = False) -> None:
        self.fault = fault
        self.delay = token_delay_ms / 1e3  # a server slower by this much a token (the diff tests' regression)
        self.served = 0
        self.done = 0
        self.say_done = (
            say_done  # a line on stdout as each stream ends: tests wait for requests done, not a time
        )

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            length = 0
            while (h := await reader.readline()) not in (b"\r\n", b""):
                if h.lower().startswith(b"content-length:"):
                    length = int(h.split(b":")[1])
            body = await reader.readexactly(length) if length else b""
            path = line.split()[1] if len(line.split()) > 1 else b"/"
            if path.endswith(b"/v1/models"):
                self._json(writer, 200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
            elif path.endswith(b"/v1/completions"):
                await self._complete(writer, json.loads(body or b"{}"))
            else:
                self._json(writer, 404, {"error": {"message": "not found"}})
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    def _json(self, writer, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        writer.write(
            b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, len(data), data)
        )

    async def _complete(self, writer, body: dict) -> None:
        self.served += 1
        n = int(body.get("max_tokens") or 16)
        if self.fault == "http500" or (self.fault == "mid500" and self.served > 3):
            self._json(
                writer, 500, {"error": {"message": "the stub fails on purpose", "type": "server_error"}}
            )
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        if self.fault == "stall":
            await writer.drain()
            await asyncio.sleep(3600)
            return
        rid = f"cmpl-stub-{self.served}"
        events = []
        for i in range(n):
            if self.fault == "malformed" and i == 1:
                events.append(b"data: {not json\n\n")
                break
            if self.fault == "cut" and i == n // 2:
                writer.write(b"".join(_chunk(e) for e in events))
                await writer.drain()
                return  # the connection closes mid-stream
            if self.delay:
                writer.write(b"".join(_chunk(e) for e in events))
                events = []
                await writer.drain()
                await asyncio.sleep(self.delay)
            choice = {"index": 0, "text": "x", "finish_reason": "length" if i == n - 1 else None,
                      "token_ids": [1000 + i], "token_steps": [i]}  # fmt: skip
            events.append(b"data: " + json.dumps({"id": rid, "choices": [choice]}).encode() + b"\n\n")
        events.append(b"data: [DONE]\n\n")
        writer.write(b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
        await writer.drain()
        self.done += 1
        if self.say_done:
            print(f"done {self.done}", flush=True)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class StubThread:
    """The stub on a loopback port in a thread of this process (`with StubThread() as url:`)."""

    def __init__(self, fault: str = "none") -> None:
        self.stub = Stub(fault)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0

    def __enter__(self) -> str:
        threading.Thread(target=self._serve, daemon=True).start()
        self.ready.wait(10)
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self.stub.handle, "127.0.0.1", 0, backlog=4096)
        )
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--token-delay-ms", type=float, default=0.0, help="sleep this long before each token")
    p.add_argument("--say-done", action="store_true", help="print 'done N' as the N-th stream ends")
    args = p.parse_args()

    async def serve() -> None:
        server = await asyncio.start_server(
            Stub(args.fault, args.token_delay_ms, args.say_done).handle, "127.0.0.1", args.port, backlog=4096
        )
        print(f"stub ready at http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
        async with server:
            await server.serve_forever()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
