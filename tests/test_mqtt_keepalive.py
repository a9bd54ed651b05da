"""Keep-alive watching costs nothing while devices are idle (mqtt_edge/server.py, _watchdog).

A router with many connected, quiet devices (the usual MQTT deployment) must not wake for
each of them several times a second: a watchdog sleeps until its connection's deadline, and
is woken early only by CONNECT, the one event that can move that deadline earlier. Counted
with a trio instrument over real loopback sockets, in-process: no timing threshold. That a
silent device is still closed on time is tests/test_mqtt_edge.py's keep-alive test.
"""

from __future__ import annotations

from collections import Counter

import trio

from mqtt_edge.codec import Decoder, encode
from mqtt_edge.packets import ConnAck, Connect
from mqtt_edge.server import serve_mqtt
from router.config import HostPort, RouterConfig
from router.runtime.node import Node
from tests.harness import free_port

DEVICES = 20
WINDOW = 1.5  # seconds watched; the old watchdog looked every 0.25 s


class _WatchdogSteps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps: Counter[int] = Counter()  # per watchdog task

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("_watchdog"):
            self.steps[id(task)] += 1


async def _connect(port: int, n: int) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(encode(Connect(f"idle-{n}", 4, True, 60), 4))
    decoder = Decoder(role="client", version=4)
    got: list[object] = []
    with trio.fail_after(10):
        while not got:
            got += decoder.receive(await stream.receive_some(1024))
    assert isinstance(got[0], ConnAck) and got[0].reason_code == 0
    return stream


def test_idle_devices_do_not_wake_the_router() -> None:
    node = Node(RouterConfig(id="K", amqp=HostPort("127.0.0.1", free_port())))
    counter = _WatchdogSteps()
    result: dict[str, Counter[int]] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(serve_mqtt, node, HostPort("127.0.0.1", 0))
            port = listeners[0].socket.getsockname()[1]
            streams = [await _connect(port, n) for n in range(DEVICES)]
            before = Counter(counter.steps)
            await trio.sleep(WINDOW)  # the window observed, not a synchronization
            result["steps"] = counter.steps - before
            for s in streams:
                await s.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main, instruments=[counter])
    # Keep-alive 60 s: no deadline falls in the window. A watchdog may still be taking in
    # its CONNECT when the window opens (one step); the old one looked WINDOW / 0.25 = 6
    # times per device.
    steps = result["steps"]
    assert max(steps.values(), default=0) <= 1, steps
