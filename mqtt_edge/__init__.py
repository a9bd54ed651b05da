"""MQTT 3.1.1 and 5.0 edge (grown by the MQTT issue).

So far the sans-IO codec: ``mqtt_edge.packets`` (a frozen dataclass per packet type, the same
for both versions), ``mqtt_edge.properties`` (the MQTT 5 property table),
``mqtt_edge.reason_codes`` (MQTT 5 reason codes, 3.1.1 CONNACK return codes) and
``mqtt_edge.codec`` (``Decoder``, ``encode``, ``ProtocolError``).
"""

from router import accel

accel.guard()  # before anything imports a module that may be compiled (router/accel.py)
