"""The second part of `exactmesh demo`: one router with a relay store (docs/relay.md).

An MQTT 5 device subscribes with a persistent session and goes offline. A publisher sends
QoS 1 messages to its topic, far more than the router's publisher window (16 here): each
PUBACK comes once the copy is on disk, so the publisher finishes while the device is away.
The router is then killed with SIGKILL and started again on the same store; the device comes
back, finds its session, and the report checks that it got every message once, in order.
With `exactmesh demo --secure` the router runs secured too, and both clients log in over TLS
(router/demo_secure.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .demo_procs import Router, free_ports, wait

if TYPE_CHECKING:
    from .demo_secure import Secure

WINDOW = 16


class _Mqtt:
    """A paho MQTT 5 client on its network thread; with `secure`, over TLS, logged in as the
    user its client id names."""

    def __init__(self, port: int, client_id: str, persistent: bool,
                 secure: Secure | None = None) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        self.got: list[bytes] = []
        self.acked: set[int] = set()
        self.connected: Any = None
        self.subscribed = False
        self.c = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
                             protocol=mqtt.MQTTv5, client_id=client_id)
        self.c.max_inflight_messages_set(WINDOW)  # the router's Receive Maximum
        self.c.on_connect = lambda c, u, flags, rc, p: setattr(self, "connected", flags)
        self.c.on_message = lambda c, u, m: self.got.append(m.payload)
        self.c.on_publish = lambda c, u, mid, rc, p: self.acked.add(mid)
        self.c.on_subscribe = lambda *a: setattr(self, "subscribed", True)
        if secure is not None:
            secure.mqtt_login(self.c, client_id)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600 if persistent else 0
        self.c.connect("127.0.0.1", port, keepalive=30, clean_start=not persistent,
                       properties=props)
        self.c.loop_start()
        wait(lambda: self.connected is not None, 10, f"{client_id}'s CONNACK")

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def run_relay_demo(state_dir: str, messages: int = 2000, secure: Secure | None = None) -> bool:
    try:
        import paho.mqtt.client  # noqa: F401
    except ImportError:
        print("(paho-mqtt is not installed: the relay store part is skipped)")
        return True
    amqp, mesh, mqtt = free_ports(3)
    router = Router("R", amqp, mesh, None, mqtt, "--relay-store", f"{state_dir}/relay",
                    "--publisher-window", str(WINDOW), secure=secure)
    clients: list[_Mqtt] = []
    try:
        wait(router.ready, 15, "router R with a relay store")
        device = _Mqtt(mqtt, "laptop", persistent=True, secure=secure)
        device.c.subscribe("fleet/#", qos=1)
        wait(lambda: device.subscribed, 10, "the device's SUBACK")
        device.close()
        print(f"\nrelay store: router R ({router.url}, {'MQTTS' if secure else 'MQTT'} "
              f"127.0.0.1:{mqtt}, window {WINDOW}); device 'laptop' subscribed to fleet/# "
              "and went offline")
        pub = _Mqtt(mqtt, "dispatcher", persistent=False, secure=secure)
        clients.append(pub)
        started = time.monotonic()
        mids = [pub.c.publish("fleet/truck-7", b"%d" % i, qos=1).mid for i in range(messages)]
        wait(lambda: len(pub.acked) >= len(mids), 60, "every PUBACK")
        took = time.monotonic() - started
        print(f"  {messages} QoS 1 messages acknowledged in {took:.2f} s while the device was "
              f"away ({messages / took:,.0f} msg/s; {messages // WINDOW} times the window)")
        router.kill()
        router.start()
        wait(router.ready, 15, "router R to restart")
        print("  router R killed with SIGKILL and restarted on the same store")
        back = _Mqtt(mqtt, "laptop", persistent=True, secure=secure)
        clients.append(back)
        wait(lambda: len(back.got) >= messages, 60, "the stored messages")
        present = bool(back.connected.session_present)
        want = [b"%d" % i for i in range(messages)]
        ok = present and back.got == want
        dup = len(back.got) - len(set(back.got))
        print(f"  device back: session present {present}, {len(back.got)} messages, "
              f"{dup} duplicated, {'in order' if back.got == want else 'NOT in order'}: "
              f"{'OK' if ok else 'WRONG'}")
        return ok
    finally:
        for c in clients:
            c.close()
        router.stop()
